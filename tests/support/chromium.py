"""A real headless browser from the distribution's packages, fetched once and checked on use.

`chromium()` gives a `Browser` whose `dump_dom(page)` loads a local HTML file in Debian's
`chromium` with `--headless --dump-dom` and returns the DOM as the browser built it (after
parsing, scripts run or refused by the page's policy), which is what a reader's browser shows.

How it is fetched (nothing of the system's apt setup is touched, nothing is installed):
1. A private apt configuration (sources.list with bookworm, bookworm-updates and
   bookworm-security, where Debian ships chromium; private lists and archive cache) under
   `<cache>/chromium/<suite>/apt/`, `apt-get update` against the signed archive (apt checks the
   Release signatures with the Debian keyring).
2. `apt-get install --download-only --no-install-recommends chromium` into the private archive
   cache: every package this machine lacks for chromium (apt checks each .deb against the
   signed index as it downloads it).
3. For each .deb, the SHA256 the signed index names for it (`apt-cache show`, the stanza whose
   Filename is that file), kept as `manifest.json`; every .deb checked against it, then
   unpacked with `dpkg -x` into `root/`.
On every later use, each .deb is checked against the manifest before the unpacked copy is
trusted; a bad or incomplete copy is fetched again. The binary runs from `root/` with its
libraries found through LD_LIBRARY_PATH.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from support.debian import CACHE, KEYRING, MIRROR, SUITE, apt_options

SECURITY = "http://deb.debian.org/debian-security"
PACKAGE = "chromium"
BINARY = Path("usr/lib/chromium/chromium")


class BrowserUnavailable(Exception):
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
    top = cache / "chromium" / suite
    root = top / "root"
    if _verified(top) and (root / BINARY).is_file() and (top / "complete").is_file():
        return Browser(root)
    if top.exists():
        shutil.rmtree(top)
    _fetch(top, suite)
    return Browser(root)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _manifest(top: Path) -> dict[str, str]:
    path = top / "manifest.json"
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    return {str(k): str(v) for k, v in data.items()}


def _verified(top: Path) -> bool:
    """Every .deb of the manifest present with the SHA256 the signed index named."""
    manifest = _manifest(top)
    archives = top / "apt" / "cache" / "archives"
    return bool(manifest) and all(
        (archives / name).is_file() and _sha256(archives / name) == sha
        for name, sha in manifest.items()
    )


def _apt(top: Path, *args: str) -> str:
    if shutil.which("apt-get") is None:
        raise BrowserUnavailable("apt-get is not installed: cannot fetch Debian's chromium")
    done = subprocess.run(
        ["apt-get", *apt_options(top / "apt"), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BrowserUnavailable(f"apt-get {' '.join(args)}: {done.stderr.strip()[-800:]}")
    return done.stdout


def _indexed_sha256(top: Path, deb: Path) -> str:
    """The SHA256 the signed package index names for the .deb file `deb` (its package, version
    and architecture read from the file; the index stanza matched by its file name)."""
    fields = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Package", "Version", "Architecture"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    info = dict(line.split(": ", 1) for line in fields.splitlines() if ": " in line)
    spec = f"{info['Package']}:{info['Architecture']}={info['Version']}"
    shown = _apt_cache(top, "show", spec)
    for stanza in shown.split("\n\n"):
        found = dict(
            line.split(": ", 1) for line in stanza.splitlines() if ": " in line and line[0] != " "
        )
        if Path(found.get("Filename", "")).name.replace("%3a", ":") == deb.name.replace("%3a", ":"):
            return found["SHA256"]
    raise BrowserUnavailable(f"{deb.name}: no stanza of the package index names this file")


def _apt_cache(top: Path, *args: str) -> str:
    done = subprocess.run(
        ["apt-cache", *apt_options(top / "apt"), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise BrowserUnavailable(f"apt-cache {' '.join(args)}: {done.stderr.strip()[-800:]}")
    return done.stdout


def _fetch(top: Path, suite: str) -> None:
    apt = top / "apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    signed = f"[signed-by={KEYRING}] " if Path(KEYRING).is_file() else ""
    (apt / "sources.list").write_text(
        f"deb {signed}{MIRROR} {suite} main\n"
        f"deb {signed}{MIRROR} {suite}-updates main\n"
        f"deb {signed}{SECURITY} {suite}-security main\n"
    )
    _apt(top, "update")
    _apt(top, "--download-only", "-y", "--no-install-recommends", "install", PACKAGE)
    archives = apt / "cache" / "archives"
    manifest = {deb.name: _indexed_sha256(top, deb) for deb in sorted(archives.glob("*.deb"))}
    if not any(name.startswith(f"{PACKAGE}_") for name in manifest):
        raise BrowserUnavailable(f"apt downloaded no {PACKAGE} package: {sorted(manifest)}")
    (top / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if not _verified(top):
        raise BrowserUnavailable("a downloaded .deb does not match the SHA256 its index names")
    root = top / "root"
    root.mkdir()
    for name in sorted(manifest):
        subprocess.run(
            ["dpkg", "-x", str(apt / "cache" / "archives" / name), str(root)], check=True
        )
    (top / "complete").write_text("ok\n")


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
