"""sdist.py: the marked version (PEP 440, accepted by pip), the version sources of each build
backend, the original's layout."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest
from pip._vendor.packaging.utils import parse_sdist_filename
from pip._vendor.packaging.version import Version

from patchctl.errors import SdistError, UnsafeArchive
from patchctl.upstream.sdist import (
    PKG_INFO,
    VersionSource,
    mark_version,
    marked_version,
    pkg_info_field,
    read_layout,
    sdist_filename,
    version_sources,
)

TREE = "34ade154293abcccbd38ba82536fcda7d82c7e04"


@pytest.mark.parametrize(
    ("version", "marked"),
    [
        ("0.3.36", "0.3.36+patchctl.34ade154293a"),
        ("1.0rc1", "1.0rc1+patchctl.34ade154293a"),
        ("2.1.post3.dev0", "2.1.post3.dev0+patchctl.34ade154293a"),
        ("1.0+cu121", "1.0+cu121.patchctl.34ade154293a"),
    ],
)
def test_the_marked_version_is_a_local_version_pip_accepts(version: str, marked: str) -> None:
    assert marked_version(version, TREE) == marked
    parsed = Version(marked)
    assert str(parsed) == marked and parsed.public == version.split("+")[0]
    name, from_file = parse_sdist_filename(sdist_filename("llama-cpp-python", marked))
    assert (name, str(from_file)) == ("llama-cpp-python", marked)
    assert sdist_filename("Llama.CPP__Python", marked).startswith("llama_cpp_python-")


@pytest.mark.parametrize("version", ["1.0-beta", "v1.0", "1.0+Local_Thing", "1.0 ", ""])
def test_a_non_canonical_version_is_refused(version: str) -> None:
    with pytest.raises(SdistError, match="not a canonical PEP 440 version"):
        marked_version(version, TREE)


def test_pkg_info_fields_come_from_the_header_only() -> None:
    data = b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n\nVersion: 9.9 (in the body)\n"
    assert pkg_info_field(data, "Version") == "1.0" and pkg_info_field(data, "Name") == "demo"
    with pytest.raises(SdistError, match="no Summary"):
        pkg_info_field(data, "Summary")


def _source(pyproject: str) -> list[VersionSource]:
    return version_sources(pyproject.encode())


def test_version_sources_of_each_backend() -> None:
    assert [s.path for s in version_sources(None)] == [PKG_INFO]
    static = _source('[project]\nname = "x"\nversion = "1.0"\n')
    assert [s.path for s in static] == [PKG_INFO, "pyproject.toml"]
    skbuild = _source(
        '[project]\ndynamic = ["version"]\n[tool.scikit-build.metadata.version]\n'
        'provider = "scikit_build_core.metadata.regex"\ninput = "pkg/__init__.py"\n'
    )
    assert [s.path for s in skbuild] == [PKG_INFO, "pkg/__init__.py"]
    hatch = _source('[project]\ndynamic = ["version"]\n[tool.hatch.version]\npath = "v.py"\n')
    assert [s.path for s in hatch] == [PKG_INFO, "v.py"]
    scm = _source(
        '[build-system]\nrequires = ["setuptools", "setuptools_scm>=8"]\n'
        '[project]\ndynamic = ["version"]\n'
    )
    assert [s.path for s in scm] == [PKG_INFO]
    with pytest.raises(SdistError, match="dynamic version"):
        _source('[build-system]\nrequires = ["flit_core"]\n[project]\ndynamic = ["version"]\n')
    with pytest.raises(SdistError, match="does not parse"):
        _source("[project\n")


def test_mark_version_replaces_exactly_the_version() -> None:
    pyproject = (
        '[build-system]\nrequires = ["x"]\n[project]\nname = "x"\n'
        'dependencies = [\n  "y",\n]\nversion = "1.0"\n[tool.other]\nversion = "1.0"\n'
    )
    (_info, static) = _source(pyproject)
    marked = mark_version(pyproject.encode(), static, "1.0", "1.0+p.1").decode()
    assert marked == pyproject.replace('\nversion = "1.0"\n[tool', '\nversion = "1.0+p.1"\n[tool')
    init = VersionSource("pkg/__init__.py", _source(
        '[project]\ndynamic = ["version"]\n[tool.scikit-build.metadata.version]\n'
        'provider = "scikit_build_core.metadata.regex"\ninput = "pkg/__init__.py"\n'
    )[1].pattern)  # fmt: skip
    text = b'from .x import *\n\n__version__ = "1.0"\n'
    assert (
        mark_version(text, init, "1.0", "1.0+p.1")
        == b'from .x import *\n\n__version__ = "1.0+p.1"\n'
    )
    with pytest.raises(SdistError, match=r"expected version '2\.0' once"):
        mark_version(text, init, "2.0", "2.0+p.1")
    with pytest.raises(SdistError, match="found none"):
        mark_version(b"nothing here\n", init, "1.0", "1.0+p.1")
    with pytest.raises(SdistError, match="not UTF-8"):
        mark_version(b"\xff\xfe", init, "1.0", "1.0+p.1")


def _tar(
    path: Path, names: list[str], *, mtime: int = 1667997441, fmt: int = tarfile.PAX_FORMAT
) -> Path:
    with tarfile.open(path, "w:gz", format=fmt) as tar:
        for name in names:
            info = tarfile.TarInfo(name)
            info.mtime, info.uname, info.gname = mtime, "", ""
            tar.addfile(info, io.BytesIO(b""))
    return path


def test_read_layout_keeps_top_mtime_owner_and_format(tmp_path: Path) -> None:
    layout = read_layout(_tar(tmp_path / "a.tar.gz", ["pkg-1.0/PKG-INFO", "pkg-1.0/a/b.py"]))
    assert (layout.top, layout.mtime, layout.uid, layout.uname, layout.pax, layout.dirs) == (
        "pkg-1.0", 1667997441, 0, "", True, False,
    )  # fmt: skip
    gnu = read_layout(_tar(tmp_path / "g.tar.gz", ["p/x"], fmt=tarfile.GNU_FORMAT))
    assert gnu.pax is False
    with pytest.raises(UnsafeArchive, match="2 top-level entries"):
        read_layout(_tar(tmp_path / "two.tar.gz", ["a/x", "b/y"]))
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball")
    with pytest.raises(SdistError, match="not a readable tar archive"):
        read_layout(tmp_path / "junk.tar.gz")
