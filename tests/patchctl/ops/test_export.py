"""export.py: `patchctl export --sdist` of a series that extends another, over a fake sdist
whose in-tree build backend lets pip build and install it offline."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

from patchctl.cli.main import main
from patchctl.errors import ConfigError, DirtyTree, NotFound, PatchctlError, VerifyFailed
from patchctl.ops.capture import add_patch, capture
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.export import export_sdist
from patchctl.progress import RecordingProgress
from patchctl.room.cleanroom import open_cleanroom
from patchctl.series.model import Extends, Series, Upstream, load_series, save_series

MTIME = 1667997441
BACKEND = b'''"""A minimal PEP 517 backend: a pure wheel of pkg/, version from pyproject.toml."""
import base64, hashlib, tomllib, zipfile

def _record(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"

def get_requires_for_build_wheel(config_settings=None):
    return []

def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = tomllib.load(open("pyproject.toml", "rb"))["project"]
    name, version = project["name"], project["version"]
    info = f"{name}-{version}.dist-info"
    files = {
        "pkg/__init__.py": open("pkg/__init__.py", "rb").read(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\n"
        .encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\n"
        b"Tag: py3-none-any\\n",
    }
    wheel = f"{name}-{version}-py3-none-any.whl"
    record = "\\n".join(_record(n, d) for n, d in files.items()) + f"\\n{info}/RECORD,,\\n"
    with zipfile.ZipFile(f"{wheel_directory}/{wheel}", "w") as out:
        for n, d in files.items():
            out.writestr(n, d)
        out.writestr(f"{info}/RECORD", record)
    return wheel
'''
SDIST: dict[str, bytes] = {
    "PKG-INFO": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "pyproject.toml": b'[build-system]\nrequires = []\nbuild-backend = "backend"\n'
    b'backend-path = ["."]\n\n[project]\nname = "demo"\nversion = "1.0"\n',
    "backend.py": BACKEND,
    "pkg/__init__.py": b"VALUE = 1\n",
    "run.sh": b"#!/bin/sh\necho run\n",
    "vendor/lib/core.c": b"int core(void) { return 1; }\n",
    ".git/HEAD": b"ref: refs/heads/main\n",  # VCS metadata in the sdist: not exported
}


def _sdist(path: Path) -> Path:
    """demo-1.0.tar.gz: GNU headers, one mtime, an executable, a symlink, a .git dir."""
    with tarfile.open(path, "w:gz", format=tarfile.GNU_FORMAT) as tar:
        for name, data in SDIST.items():
            info = tarfile.TarInfo(f"demo-1.0/{name}")
            info.size, info.mtime = len(data), MTIME
            info.mode = 0o755 if name == "run.sh" else 0o644
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("demo-1.0/link")
        link.type, link.linkname, link.mtime = tarfile.SYMTYPE, "run.sh", MTIME
        tar.addfile(link)
    return path


def _series(directory: Path, upstream: Upstream, extends: Extends | None = None) -> Path:
    directory.mkdir(parents=True)
    save_series(Series(directory / "series.yaml", upstream, extends=extends))
    return directory


def _change(series: Path, patch_id: str, rel: str, data: bytes) -> None:
    add_patch(series, patch_id, f"Change {rel}")
    (open_cleanroom(series).path / rel).write_bytes(data)
    capture(series, patch_id)


@pytest.fixture
def package(tmp_path: Path) -> Path:
    """patches/package (the whole sdist) extends patches/lib (its vendor/lib); one patch each."""
    archive = _sdist(tmp_path / "demo-1.0.tar.gz")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    pin = Upstream(kind="archive", path=str(archive), sha256=sha)
    patches = tmp_path / "project" / "patches"
    lib = _series(patches / "lib", replace(pin, subdir="vendor/lib"))
    base = cleanroom_apply(lib).base_tree
    series = load_series(lib)
    save_series(replace(series, upstream=replace(series.upstream, tree=base)))
    _change(lib, "0001-core", "core.c", b"int core(void) { return 2; }\n")
    package = _series(patches / "package", pin, Extends("lib", "vendor/lib"))
    cleanroom_apply(package)
    _change(package, "0002-value", "pkg/__init__.py", b"VALUE = 2\n")
    return package


def _members(path: Path) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(path) as tar:
        return {
            m.name: (m, tar.extractfile(m).read() if m.isreg() else b"")  # type: ignore[union-attr]
            for m in tar.getmembers()
        }


def test_the_export_is_the_patched_stack_with_the_version_marked(
    package: Path, tmp_path: Path
) -> None:
    progress = RecordingProgress()
    result = export_sdist(package, tmp_path, progress=progress)
    tree = load_series(package).patch("0002-value").post_tree
    assert tree is not None and result.tree == tree
    assert result.version == f"1.0+patchctl.{tree[:12]}" and result.upstream_version == "1.0"
    assert result.path == tmp_path / f"demo-{result.version}.tar.gz"
    assert result.sha256 == hashlib.sha256(result.path.read_bytes()).hexdigest()
    members = _members(result.path)
    names = list(members)
    assert names == sorted(names) and all(n.startswith("demo-1.0/") for n in names)
    assert not any("/.git" in n for n in names)
    files = {n.removeprefix("demo-1.0/"): d for n, (_m, d) in members.items()}
    assert files["vendor/lib/core.c"] == b"int core(void) { return 2; }\n"
    assert files["pkg/__init__.py"] == b"VALUE = 2\n"
    assert files["PKG-INFO"] == SDIST["PKG-INFO"].replace(b"1.0", result.version.encode())
    assert f'version = "{result.version}"'.encode() in files["pyproject.toml"]
    infos = {n.removeprefix("demo-1.0/"): m for n, (m, _d) in members.items()}
    assert infos["run.sh"].mode == 0o755 and infos["backend.py"].mode == 0o644
    assert infos["link"].issym() and infos["link"].linkname == "run.sh"
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in infos.values()} == {(MTIME, 0, 0, "")}
    assert result.path.read_bytes()[4:8] == MTIME.to_bytes(4, "little")  # gzip header mtime
    assert ("done", "export", None) in progress.events


def test_the_bytes_depend_only_on_the_series_not_on_the_clean_room(
    package: Path, tmp_path: Path
) -> None:
    first = export_sdist(package, tmp_path / "a.tar.gz")
    room = open_cleanroom(package)
    (room.path / "pkg" / "__init__.py").write_bytes(b"VALUE = 'unsaved edit'\n")
    cleanroom_apply(load_series(package).path, upto="0001-core", force=True)
    second = export_sdist(package, tmp_path / "b.tar.gz")
    assert first.sha256 == second.sha256
    assert first.path.read_bytes() == second.path.read_bytes()
    assert not list(tmp_path.glob(".*part*"))


def test_pip_installs_the_export_and_reports_the_marked_version(
    package: Path, tmp_path: Path
) -> None:
    result = export_sdist(package, tmp_path)
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--quiet",
         "--disable-pip-version-check", "--target", str(target), str(result.path)],
        capture_output=True, text=True, check=False, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (target / "pkg" / "__init__.py").read_bytes() == b"VALUE = 2\n"
    metadata = target / f"demo-{result.version}.dist-info" / "METADATA"
    assert f"Version: {result.version}" in metadata.read_text()


def test_everything_is_checked_before_the_first_write(package: Path, tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="does not exist"):
        export_sdist(package, tmp_path / "missing" / "x.tar.gz")
    series = load_series(package)
    wrong = replace(series.patches[0], post_tree="0" * 40)
    save_series(series.with_patch(wrong))
    with pytest.raises(VerifyFailed, match="0002-value gives a tree other than"):
        export_sdist(package, tmp_path)
    save_series(series)
    with pytest.raises(ConfigError, match="only vendor/lib") as info:
        export_sdist(package.parent / "lib", tmp_path)
    assert info.value.key == "upstream.subdir"
    assert list(tmp_path.glob("*.tar.gz")) == [tmp_path / "demo-1.0.tar.gz"]  # the upstream
    assert not (package.parent.parent / "dist").exists()


def test_the_default_output_is_the_project_dist_dir(package: Path) -> None:
    result = export_sdist(package)
    assert result.path.parent == package.parent.parent / "dist"
    again = export_sdist(package)  # patchctl's own folder: an earlier export there is replaced
    assert again.path == result.path and again.sha256 == result.sha256


def test_an_existing_output_file_is_replaced_only_with_force(package: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.tar.gz"
    mine.write_bytes(b"the user's own file")
    with pytest.raises(DirtyTree, match="refusing to overwrite") as info:
        export_sdist(package, mine)
    assert info.value.exit_code == 8 and "--force" in (info.value.hint or "")
    assert mine.read_bytes() == b"the user's own file"
    result = export_sdist(package, mine, force=True)
    assert result.path == mine and hashlib.sha256(mine.read_bytes()).hexdigest() == result.sha256


def test_partial_files_of_killed_exports_are_swept(package: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    name = export_sdist(package, out).path.name
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = out / f".{name}.part{dead.pid}"  # its process is gone
    running = out / f".{name}.part{os.getppid()}"  # a process that runs (this test's parent)
    for path in (stale, running):
        path.write_bytes(b"half a tarball")
    export_sdist(package, out, force=True)
    assert not stale.exists() and running.exists()


@pytest.mark.parametrize("name", ["/ABS/evil", "../../evil", "demo pkg", "-demo"])
def test_a_pkg_info_name_that_is_no_package_name_is_refused(tmp_path: Path, name: str) -> None:
    """The tarball's file name comes from the upstream's PKG-INFO `Name:`: one that is not a
    PEP 508 name (an absolute path, `..`) would put the export anywhere."""
    from patchctl.errors import SdistError

    pkg_info = SDIST["PKG-INFO"].replace(b"Name: demo", f"Name: {name}".encode())
    pkg_info = pkg_info.replace(b"/ABS", str(tmp_path / "victim").encode())
    archive = tmp_path / "demo-1.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for member, data in {**SDIST, "PKG-INFO": pkg_info}.items():
            info = tarfile.TarInfo(f"demo-1.0/{member}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    series = _series(
        tmp_path / "project" / "patches" / "x", Upstream("archive", path=str(archive), sha256=sha)
    )
    cleanroom_apply(series)
    (tmp_path / "victim").mkdir()
    with pytest.raises(SdistError, match="PKG-INFO Name"):
        export_sdist(series)
    assert list((tmp_path / "victim").iterdir()) == []
    assert not (tmp_path / "project" / "dist").exists() or not any(
        (tmp_path / "project" / "dist").rglob("*.tar.gz")
    )


# ----------------------------------------------------------------------------- --output


def test_a_trailing_slash_names_a_directory_that_is_made(package: Path, tmp_path: Path) -> None:
    out = tmp_path / "fresh"  # as `--output fresh/` reaches the core
    result = export_sdist(package, out, output_is_dir=True)
    assert out.is_dir() and result.path.parent == out and result.path.name.endswith(".tar.gz")


def test_an_output_file_pip_cannot_install_is_refused(package: Path, tmp_path: Path) -> None:
    with pytest.raises(PatchctlError, match=r"\*\.tar\.gz") as info:
        export_sdist(package, tmp_path / "dist")
    assert info.value.exit_code == 1 and f"{tmp_path / 'dist'}/" in (info.value.hint or "")
    assert not (tmp_path / "dist").exists()


def test_a_file_in_the_default_folders_place_is_named(package: Path) -> None:
    (package.parent.parent / "dist").write_bytes(b"an earlier mistake")
    with pytest.raises(PatchctlError, match="exists and is not a directory") as info:
        export_sdist(package)
    assert "remove or rename" in (info.value.hint or "")


def test_the_cli_keeps_the_trailing_slash_and_hints_a_path_pip_installs(
    package: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    project = package.parent.parent
    monkeypatch.chdir(project)
    code = main(["export", "--sdist", "--series", str(package), "--output", "out/"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    (written,) = (project / "out").glob("*.tar.gz")
    assert f"install: pip install ./out/{written.name}" in printed
