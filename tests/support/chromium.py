"""A real headless browser from the distribution's packages, fetched once and checked on use.

`chromium()` gives a `Browser` whose `dump_dom(page)` loads a local HTML file in Debian's
`chromium` with `--headless --dump-dom` and returns the DOM as the browser built it (after
parsing, scripts run or refused by the page's policy), which is what a reader's browser shows.

How it is fetched and checked: tests/support/debpkg.py (Debian's signed index, a private apt
setup, nothing installed); the binary runs from the unpacked copy with its libraries found
through LD_LIBRARY_PATH.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from support.debian import CACHE, SUITE
from support.debpkg import PackageUnavailable, unpacked

PACKAGE = "chromium"
BINARY = Path("usr/lib/chromium/chromium")


class BrowserUnavailable(PackageUnavailable):
    """chromium could not be fetched or run here: the test fails with this reason."""


@dataclass(frozen=True)
class Browser:
    """chromium unpacked under `root`, run headless."""

    root: Path

    def env(self, home: Path) -> dict[str, str]:
        """The environment chromium runs in: its own libraries first, a private HOME."""
        libs = sorted({str(p.parent) for p in self.root.rglob("*.so*") if p.is_file()})
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LD_LIBRARY_PATH": ":".join(libs),
            "LANG": "C.UTF-8",
        }

    def dump_dom(self, page: Path, timeout: float = 120.0) -> str:
        """The DOM chromium builds from the local file `page`, serialized."""
        with tempfile.TemporaryDirectory(prefix="patchctl-chromium-") as tmp:
            home = Path(tmp)
            command = [
                str(self.root / BINARY),
                "--headless",
                "--no-sandbox",  # root in CI; the page is local and has no script anyway
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={home / 'profile'}",
                "--dump-dom",
                page.resolve().as_uri(),
            ]
            done = subprocess.run(
                command, capture_output=True, env=self.env(home), timeout=timeout, check=False
            )
        if done.returncode != 0 or not done.stdout.strip():
            raise BrowserUnavailable(
                f"chromium exited {done.returncode}: {done.stderr.decode(errors='replace')[-800:]}"
            )
        return done.stdout.decode("utf-8")


def chromium(cache: Path = CACHE, suite: str = SUITE) -> Browser:
    """Debian's chromium, unpacked under the test cache (fetched when missing or bad)."""
    try:
        return Browser(unpacked(PACKAGE, BINARY, cache, suite, security=True))
    except PackageUnavailable as error:
        raise BrowserUnavailable(str(error)) from error


class Seen(HTMLParser):
    """What a reader sees of a DOM: its text (script and style content left out), its title,
    and the tags it has."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.tags: list[str] = []
        self.title = ""
        self._skip = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._skip += tag in ("script", "style")
        self._in_title = tag == "title"

    def handle_endtag(self, tag: str) -> None:
        self._skip -= tag in ("script", "style")
        self._in_title = False

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif not self._skip:
            self.text.append(data)


def seen(dom: str) -> Seen:
    """The DOM `dump_dom` returned, as a reader sees it."""
    parser = Seen()
    parser.feed(dom)
    return parser
