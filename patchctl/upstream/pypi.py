"""The HTTP client of the upstream layer and PyPI's two index APIs: which sdist files a
release publishes (`sdist_releases`, JSON API first, the simple API as fallback), and the one
bounded, hashed download (`download`) every https upstream goes through.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

from patchctl.allowlists import is_archive
from patchctl.errors import (
    NotFound,
    PatchctlError,
)
from patchctl.limits import DOWNLOAD_BYTES, INDEX_BYTES, human
from patchctl.progress import Progress

PYPI_URL = "https://pypi.org"
SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
CHUNK = 1 << 20


def pypi_url() -> str:
    """The PyPI root (`$PATCHCTL_PYPI_URL` overrides it, e.g. a mirror or a file:// tree)."""
    return os.environ.get("PATCHCTL_PYPI_URL", PYPI_URL).rstrip("/")


@dataclass(frozen=True)
class Release:
    """One sdist file as the index describes it."""

    filename: str
    url: str
    sha256: str | None


@functools.cache
def _tls() -> ssl.SSLContext:
    """The TLS context of every https request of this process, made as http.client makes one
    per connection (the default context, ALPN http/1.1, post-handshake auth): loading the
    CA certificates costs tens of milliseconds, and pinning one release asks twice when
    the index serves only the Simple API."""
    context = ssl._create_default_https_context()
    context.set_alpn_protocols(["http/1.1"])
    if context.post_handshake_auth is not None:
        context.post_handshake_auth = True
    return context


def open_url(url: str, accept: str = "application/json") -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": "patchctl", "Accept": accept})
    try:
        context = _tls() if url.startswith("https:") else None
        return urllib.request.urlopen(request, timeout=60, context=context)
    except OSError as exc:
        raise PatchctlError(
            f"cannot download {url}: {exc}", hint="check the network, or seed the cache"
        ) from None


def _get_json(url: str, accept: str = "application/json") -> dict[str, Any]:
    with open_url(url, accept) as response:
        raw = response.read(INDEX_BYTES + 1)
    if len(raw) > INDEX_BYTES:
        raise PatchctlError(f"{url} answered more than {human(INDEX_BYTES)}; not an index")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise PatchctlError(
            f"{url} did not answer JSON ({str(exc)[:80]})", hint="check PATCHCTL_PYPI_URL"
        ) from None
    return data if isinstance(data, dict) else {}


def _sdist_name(package: str, version: str) -> str:
    """The normalised sdist file stem, e.g. `llama_cpp_python-0.3.36` (PEP 625)."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}"


def _is_sdist(filename: str, package: str, version: str) -> bool:
    stem = _sdist_name(package, version)
    name = filename.lower().replace("-", "_").replace(".", "_")
    expected = stem.replace("-", "_").replace(".", "_")
    return name in (expected + "_tar_gz", expected + "_zip")


def _from_json_api(package: str, version: str) -> list[Release]:
    """The sdists listed by PyPI's JSON API (`/pypi/<pkg>/<version>/json`)."""
    url = f"{pypi_url()}/pypi/{package}/{version}/json"
    entries = _get_json(url).get("urls", [])
    found = []
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("packagetype") == "sdist":
            found.append(_release(url, entry, "digests"))
    return [r for r in found if r is not None]


def _from_simple_api(package: str, version: str) -> list[Release]:
    """The sdists listed by the Simple API in JSON form (PEP 691), used when the JSON API
    is not served (some mirrors and proxies only serve /simple)."""
    url = f"{pypi_url()}/simple/{package}/"
    files = _get_json(url, SIMPLE_JSON).get("files", [])
    found = []
    for entry in files if isinstance(files, list) else []:
        if isinstance(entry, dict) and _is_sdist(str(entry.get("filename", "")), package, version):
            found.append(_release(url, entry, "hashes"))
    return [r for r in found if r is not None]


# What an index may name a file: it becomes a file name in the cache, so one plain name.
RELEASE_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,200}")


def _release(base: str, entry: dict[str, Any], digests: str) -> Release | None:
    """One index entry as a Release; None when it is malformed or names an unsafe file/URL.

    The index is a remote input: its file name must be a plain archive name (it becomes a
    path in the cache) and its URL http(s) (or file: under a file: index).
    """
    filename, link = entry.get("filename"), entry.get("url")
    hashes = entry.get(digests)
    sha = hashes.get("sha256") if isinstance(hashes, dict) else None
    if not isinstance(filename, str) or not isinstance(link, str):
        return None
    if not RELEASE_FILE.fullmatch(filename) or not is_archive(Path(filename)):
        return None
    target = urljoin(base, link)
    allowed = ("https", "http", "file") if base.startswith("file:") else ("https", "http")
    if urlsplit(target).scheme not in allowed:
        return None
    return Release(filename, target, sha if isinstance(sha, str) else None)


def sdist_releases(package: str, version: str) -> list[Release]:
    """The sdist files of package==version (JSON API, else the Simple API)."""
    try:
        found = _from_json_api(package, version)
    except PatchctlError:
        found = []
    if not found:
        found = _from_simple_api(package, version)
    if not found:
        raise NotFound(f"PyPI has no sdist for {package}=={version}", hint="check upstream.version")
    return found


def download(url: str, dest: Path, progress: Progress) -> str:
    """Stream `url` into `dest`; return the sha256 of what was written."""
    digest = hashlib.sha256()
    limit = DOWNLOAD_BYTES.value()
    received = 0
    with open_url(url) as response, dest.open("wb") as out:
        total = response.headers.get("Content-Length")
        progress.start("download", int(total) if total and total.isdigit() else None)
        for block in iter(lambda: response.read(CHUNK), b""):
            received += len(block)
            if received > limit:
                raise PatchctlError(
                    f"{url} is larger than {human(limit)}; nothing was kept",
                    hint=DOWNLOAD_BYTES.hint(),
                )
            digest.update(block)
            out.write(block)
            progress.advance("download", len(block))
    progress.done("download")
    return digest.hexdigest()
