"""session.py: one lock around every read-modify-write of a series, series.yaml read after it,
and a hand edit between the read and a write refused instead of dropped."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from support.series import NEW_FILE_PATCH, make_project

from patchctl import fsio
from patchctl.errors import PatchctlError, SeriesChanged
from patchctl.gitlayer.git import Git
from patchctl.ops import capture as capture_module
from patchctl.ops.capture import add_patch, capture
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.ops.docs import update_docs
from patchctl.ops.import_.record import import_series
from patchctl.series.docs import doc_paths
from patchctl.series.model import load_series
from patchctl.txn import session as session_module
from patchctl.txn.session import series_session

FILES = {"main.c": b"int main(void) { return 0; }\n"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project with a clean room and patch 0001-one added, its edit made (not captured)."""
    series_dir = make_project(tmp_path, FILES)
    cleanroom_apply(series_dir)
    add_patch(series_dir, "0001-one", "One")
    room = series_dir.parent.parent / "cleanroom" / "demo"
    (room / "main.c").write_bytes(b"int main(void) { return 1; }\n")
    return series_dir


def hook_inside(monkeypatch: pytest.MonkeyPatch, name: str, action: Callable[[], None]) -> None:
    """Run `action` when capture calls `capture_trees`: inside the locks, after the read."""
    real = capture_module.capture_trees

    def hooked(*args: object, **kwargs: object) -> bytes:
        action()
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(capture_module, name, hooked)


def test_a_concurrent_new_is_refused_while_capture_holds_the_lock_and_never_dropped(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inside, release = threading.Event(), threading.Event()

    def pause() -> None:
        inside.set()
        assert release.wait(30)

    hook_inside(monkeypatch, "capture_trees", pause)
    errors: list[BaseException] = []

    def run_capture() -> None:
        try:
            capture(project, "0001-one")
        except BaseException as exc:  # reported below, in the test's thread
            errors.append(exc)

    worker = threading.Thread(target=run_capture)
    worker.start()
    try:
        assert inside.wait(30)
        before = (project / "series.yaml").read_bytes()
        with pytest.raises(PatchctlError, match="another patchctl is working"):
            add_patch(project, "0002-two", "Two")
        assert (project / "series.yaml").read_bytes() == before
    finally:
        release.set()
        worker.join(60)
    assert not errors
    add_patch(project, "0002-two", "Two")  # the retry, after capture
    series = load_series(project, check_files=False)
    assert series.ids() == ("0001-one", "0002-two")
    assert series.patch("0001-one").post_tree is not None  # capture's write kept too


def test_the_series_is_read_after_the_lock(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A `new` that completes between the command's start and its lock must survive the
    # command's write (capture, import and docs read series.yaml only once they hold the lock).
    real = fsio.locked_dir
    pending = [lambda: add_patch(project, "0002-two", "Two")]

    @contextmanager
    def racing(directory: Path) -> Iterator[None]:
        if pending:
            pending.pop()()  # the concurrent run, just before this one locks
        with real(directory):
            yield

    monkeypatch.setattr(session_module, "locked_dir", racing)
    result = capture(project, "0001-one")
    assert result.captured.written
    assert load_series(project, check_files=False).ids() == ("0001-one", "0002-two")
    readme = (project / "README.md").read_text()  # regenerated with an entry without a file
    assert "- `0002-two` (`0002-two.patch`): (no patch file yet" in readme


def test_a_hand_edit_during_capture_is_refused_not_dropped(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = project / "series.yaml"
    room = Git(project.parent.parent / "cleanroom" / "demo")
    head = room.rev_parse("HEAD")

    def hand_edit() -> None:
        path.write_bytes(path.read_bytes().replace(b"title: One", b"title: One, by hand"))

    hook_inside(monkeypatch, "capture_trees", hand_edit)
    with pytest.raises(SeriesChanged, match="changed on disk"):
        capture(project, "0001-one")
    assert b"title: One, by hand" in path.read_bytes()
    assert not (project / "0001-one.patch").exists()  # refused before the first write
    assert room.rev_parse("HEAD") == head


def test_a_hand_edit_during_import_and_docs_is_refused(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    capture(project, "0001-one")
    path = project / "series.yaml"
    source = tmp_path / "extra.patch"
    source.write_bytes(NEW_FILE_PATCH)
    real_save = session_module.SeriesSession.check_unchanged

    def edit_then_check(self: session_module.SeriesSession) -> None:
        path.write_bytes(path.read_bytes() + b"# a hand edit\n")
        real_save(self)

    readme, _registry = doc_paths(load_series(project))
    readme.unlink()
    monkeypatch.setattr(session_module.SeriesSession, "check_unchanged", edit_then_check)
    with pytest.raises(SeriesChanged):
        import_series(project, source)
    assert not (project / "0002-extra.patch").exists()
    with pytest.raises(SeriesChanged):
        update_docs(project)
    assert not readme.exists()
    assert path.read_bytes().endswith(b"# a hand edit\n# a hand edit\n")


def test_a_session_never_creates_a_missing_series_directory(tmp_path: Path) -> None:
    with pytest.raises(PatchctlError, match="no series file"), series_session(tmp_path / "nope"):
        pass
    assert not (tmp_path / "nope").exists()
