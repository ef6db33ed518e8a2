"""A program from Debian's binary packages, fetched once, checked on every use, never installed.

`unpacked(package, binary)` returns a folder holding `package` and every package it needs that
this machine lacks, unpacked; the tests run `binary` from there (with LD_LIBRARY_PATH naming its
libraries where it needs them). It is what the tests use instead of skipping when a tool (a
headless browser, a compiler cache) is not installed on a fresh machine.

How it is fetched (nothing of the system's apt setup is touched, nothing is installed):
1. A private apt configuration (sources.list with the suite, its updates and, where asked, its
   security archive; private lists and archive cache) under `<cache>/<package>/<suite>/apt/`,
   `apt-get update` against the signed archive (apt checks the Release signatures with the
   Debian keyring).
2. `apt-get install --download-only --no-install-recommends <package>` into the private archive
   cache: every package this machine lacks for it (apt checks each .deb against the signed
   index as it downloads it).
3. For each .deb, the SHA256 the signed index names for it (`apt-cache show`, the stanza whose
   Filename is that file), kept as `manifest.json`; every .deb checked against it, then
   unpacked with `dpkg -x` into `root/`.
On every later use, each .deb is checked against the manifest before the unpacked copy is
trusted; a bad or incomplete copy is fetched again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

from support.debian import CACHE, KEYRING, MIRROR, SUITE, apt_options

SECURITY = "http://deb.debian.org/debian-security"


class PackageUnavailable(Exception):
    """The package could not be fetched or unpacked here: the test fails with this reason."""


def unpacked(
    package: str, binary: Path, cache: Path = CACHE, suite: str = SUITE, security: bool = False
) -> Path:
    """The root `package` is unpacked under (fetched when missing or bad); `binary` (relative to
    it) must be a file there."""
    top = cache / package / suite
    root = top / "root"
    if _verified(top) and (root / binary).is_file() and (top / "complete").is_file():
        return root
    if top.exists():
        shutil.rmtree(top)
    _fetch(top, package, suite, security)
    if not (root / binary).is_file():
        raise PackageUnavailable(f"{package}: the unpacked package has no {binary}")
    return root


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
        raise PackageUnavailable(
            f"apt-get is not installed: cannot fetch Debian's {top.parent.name}"
        )
    done = subprocess.run(
        ["apt-get", *apt_options(top / "apt"), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PackageUnavailable(f"apt-get {' '.join(args)}: {done.stderr.strip()[-800:]}")
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
    raise PackageUnavailable(f"{deb.name}: no stanza of the package index names this file")


def _apt_cache(top: Path, *args: str) -> str:
    done = subprocess.run(
        ["apt-cache", *apt_options(top / "apt"), *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PackageUnavailable(f"apt-cache {' '.join(args)}: {done.stderr.strip()[-800:]}")
    return done.stdout


def _fetch(top: Path, package: str, suite: str, security: bool) -> None:
    apt = top / "apt"
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    signed = f"[signed-by={KEYRING}] " if Path(KEYRING).is_file() else ""
    (apt / "sources.list").write_text(
        f"deb {signed}{MIRROR} {suite} main\n"
        f"deb {signed}{MIRROR} {suite}-updates main\n"
        + (f"deb {signed}{SECURITY} {suite}-security main\n" if security else "")
    )
    _apt(top, "update")
    _apt(top, "--download-only", "-y", "--no-install-recommends", "install", package)
    archives = apt / "cache" / "archives"
    manifest = {deb.name: _indexed_sha256(top, deb) for deb in sorted(archives.glob("*.deb"))}
    if not any(name.startswith(f"{package}_") for name in manifest):
        raise PackageUnavailable(f"apt downloaded no {package} package: {sorted(manifest)}")
    (top / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    if not _verified(top):
        raise PackageUnavailable("a downloaded .deb does not match the SHA256 its index names")
    root = top / "root"
    root.mkdir()
    for name in sorted(manifest):
        subprocess.run(
            ["dpkg", "-x", str(apt / "cache" / "archives" / name), str(root)], check=True
        )
    (top / "complete").write_text("ok\n")


def ccache(cache: Path = CACHE, suite: str = SUITE) -> Path:
    """A `ccache` to put first on PATH: the installed one, else Debian's, unpacked under the test
    cache and run through a small wrapper that names its libraries (the folder it returns holds
    only that `ccache`)."""
    installed = shutil.which("ccache")
    if installed is not None:
        return Path(installed).parent
    top = cache / "ccache-bin"
    root = unpacked("ccache", Path("usr/bin/ccache"), cache, suite)
    libs = sorted({str(p.parent) for p in root.rglob("*.so*") if p.is_file()})
    wrapper = top / "ccache"
    top.mkdir(parents=True, exist_ok=True)
    ld = f"LD_LIBRARY_PATH={':'.join(libs)}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}} " if libs else ""
    text = f'#!/bin/sh\n{ld}exec {root / "usr/bin/ccache"} "$@"\n'
    if not wrapper.is_file() or wrapper.read_text() != text:
        tmp = wrapper.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.chmod(0o755)
        tmp.replace(wrapper)
    return top
