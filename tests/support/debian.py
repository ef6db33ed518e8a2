"""Debian source packages, fetched once and checked on every use.

`fetch_debian_source(package)` runs `apt-get source --download-only` through a private apt
configuration (a deb-src line for `suite` in a private sources.list, private lists and cache
directories: the system's apt setup is never touched) and caches the files in
`<cache>/debian-src/<suite>/<package>/`. Every file the .dsc lists is checked against the sha256
the .dsc names on every use (apt checked the .dsc itself against the signed archive index when it
downloaded it); a bad or incomplete copy is fetched again.

`source_files(directory)` names the parts of a `3.0 (quilt)` source package: the orig tarball,
the component tarballs (`.orig-<component>.tar.*`, which dpkg-source unpacks into
`<component>/`) and the debian tarball.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from patchctl.fsio import sha256_file

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
TARBALL = re.compile(r"\.tar\.(gz|xz|bz2|lzma|zst)$")
# Resolved at import time, before the tests' hermetic seal replaces HOME.
CACHE = Path(os.environ.get("PATCHCTL_TEST_CACHE") or Path.home() / ".cache" / "patchctl-test")


class SourceUnavailable(Exception):
    """The source package cannot be fetched here (no apt-get, no network, unknown package)."""


class AptMissing(SourceUnavailable):
    """apt-get is not installed."""


class NotQuilt(Exception):
    """The source package is not `3.0 (quilt)` (native, or 1.0 with a .diff.gz)."""


@dataclass(frozen=True)
class DebianSource:
    """The files of one `3.0 (quilt)` source package, all checked against its .dsc."""

    directory: Path
    dsc: Path
    version: str
    orig: Path
    components: dict[str, Path]  # component name -> its .orig-<name>.tar.* tarball
    debian: Path


def apt_options(apt: Path) -> list[str]:
    """apt-get options that point every apt path at the private directory `apt`."""
    opts = {
        "Dir::Etc::SourceList": str(apt / "sources.list"),
        "Dir::Etc::SourceParts": "/nonexistent",  # ignore the system's sources.list.d
        "Dir::State::Lists": str(apt / "lists"),
        "Dir::Cache": str(apt / "cache"),
        "Debug::NoLocking": "1",  # our private dirs need no system lock
    }
    if os.geteuid() == 0:
        opts["APT::Sandbox::User"] = "root"  # _apt cannot write into a private cache dir
    return ["-q", *(arg for key, value in opts.items() for arg in ("-o", f"{key}={value}"))]


def dsc_fields(dsc: Path) -> dict[str, str]:
    """The .dsc's fields (continuation lines joined with newlines), PGP armour ignored."""
    fields: dict[str, str] = {}
    key = ""
    for line in dsc.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith((" ", "\t")) and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line and not line.startswith("-----"):
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        else:
            key = ""
    return fields


def dsc_checksums(dsc: Path) -> dict[str, str]:
    """File name -> sha256 from a .dsc's `Checksums-Sha256:` field."""
    sums: dict[str, str] = {}
    for line in dsc_fields(dsc).get("Checksums-Sha256", "").splitlines():
        if line.strip():
            digest, _size, name = line.split()
            sums[name] = digest
    return sums


def verified(src: Path) -> bool:
    """True when `src` holds one .dsc and every file it lists, with the sha256 it names."""
    dscs = list(src.glob("*.dsc"))
    if len(dscs) != 1:
        return False
    sums = dsc_checksums(dscs[0])
    return bool(sums) and all(
        (src / name).is_file() and sha256_file(src / name) == digest
        for name, digest in sums.items()
    )


def _download(package: str, src: Path, cache: Path, suite: str) -> None:
    if shutil.which("apt-get") is None:
        raise AptMissing("apt-get is not installed: cannot fetch a Debian source package")
    apt = cache / "apt" / suite
    for sub in ("lists/partial", "cache/archives/partial"):
        (apt / sub).mkdir(parents=True, exist_ok=True)
    signed = f"[signed-by={KEYRING}] " if Path(KEYRING).is_file() else ""
    (apt / "sources.list").write_text(f"deb-src {signed}{MIRROR} {suite} main\n")
    src.mkdir(parents=True, exist_ok=True)
    opts = apt_options(apt)
    for args, cwd in ((["update"], None), (["source", "--download-only", package], src)):
        done = subprocess.run(["apt-get", *opts, *args], capture_output=True, text=True, cwd=cwd)
        if done.returncode != 0:
            raise SourceUnavailable(f"apt-get {' '.join(args)}: {done.stderr.strip()[-500:]}")


def fetch_debian_source(package: str, cache: Path = CACHE, suite: str = SUITE) -> Path:
    """The directory holding `package`'s .dsc and every file it lists (downloaded once, then
    checked on every use against the sha256 sums the .dsc lists; a bad copy is fetched again)."""
    src = cache / "debian-src" / suite / package
    if verified(src):
        return src
    if src.exists():
        shutil.rmtree(src)
    _download(package, src, cache, suite)
    if not verified(src):
        raise SourceUnavailable(f"{src}: a file is missing or does not match its .dsc's sha256")
    return src


def source_files(src: Path) -> DebianSource:
    """The parts of the `3.0 (quilt)` source package in `src` (see the module docstring)."""
    dsc = next(src.glob("*.dsc"))
    fields = dsc_fields(dsc)
    if fields.get("Format") != "3.0 (quilt)":
        raise NotQuilt(f"{dsc.name}: Format {fields.get('Format')!r}, not '3.0 (quilt)'")
    names = [name for name in dsc_checksums(dsc) if TARBALL.search(name)]  # not the .asc
    orig = [name for name in names if ".orig.tar." in name]
    debian = [name for name in names if ".debian.tar." in name]
    components = {
        name.split(".orig-", 1)[1].split(".tar.", 1)[0]: src / name
        for name in names
        if ".orig-" in name
    }
    if len(orig) != 1 or len(debian) != 1:
        raise NotQuilt(f"{dsc.name}: expected one .orig.tar.* and one .debian.tar.*: {names}")
    return DebianSource(
        directory=src,
        dsc=dsc,
        version=fields.get("Version", "?"),
        orig=src / orig[0],
        components=components,
        debian=src / debian[0],
    )
