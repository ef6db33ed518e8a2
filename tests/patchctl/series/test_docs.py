"""docs + the CLI flow: new -> edit -> capture -> verify -> docs, and staleness (exit 16)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from support.drift import rebase_ready
from support.paths import REPO
from support.series import make_project

from patchctl.cli.main import main
from patchctl.ops.cleanroom.apply import cleanroom_apply
from patchctl.series.docs import (
    GENERATED,
    doc_paths,
    marker_registry,
    patch_stats,
    render_docs,
    series_readme,
    stale_docs,
)
from patchctl.series.model import load_series, save_series
from patchctl.series.project import series_key

FILES = {"main.c": b"int main(void)\n{\n\treturn 0;\n}\n", "README": b"hello | world\n"}


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def project(tmp_path: Path) -> Path:
    series_dir = make_project(tmp_path, FILES)
    cleanroom_apply(series_dir)
    return series_dir


def _capture_one(capsys: pytest.CaptureFixture[str], series: Path) -> Path:
    room = series.parent.parent / "cleanroom" / "demo"
    s = str(series)
    code, _, err = run(
        capsys, "new", "0001-greet", "--title", "Greet | loudly", "--marker", "// patchctl 0001",
        "--series", s,
    )  # fmt: skip
    assert code == 0, err
    (room / "main.c").write_bytes(b"int main(void)\n{\n\t// patchctl 0001\n\treturn 1;\n}\n")
    (room / "logo.bin").write_bytes(b"\0\1\2")
    code, out, err = run(capsys, "capture", "0001-greet", "--series", s, "--json")
    assert code == 0, err
    assert json.loads(out)["written"] is True
    return room


def test_cli_flow_new_capture_verify_docs(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = str(project)
    room = _capture_one(capsys, project)
    patch_file = project / "0001-greet.patch"
    first = patch_file.read_bytes()
    code, out, _ = run(capsys, "capture", "0001-greet", "--series", s, "--json")
    assert code == 0 and json.loads(out)["written"] is False
    assert patch_file.read_bytes() == first
    code, out, err = run(capsys, "verify", "--all", "--series", s, "--json")
    assert code == 0, out + err
    report = json.loads(out)
    assert report["ok"] and report["stale_docs"] == []
    code, _, _ = run(capsys, "docs", "--check", "--series", s)
    assert code == 0
    readme, registry = doc_paths(load_series(project))
    assert "| 1 | `0001-greet` | Greet \\| loudly | 2 (1 binary) | +2 / -1 |" in readme.read_text()
    assert "| `// patchctl 0001` | `0001-greet` | `main.c` |" in registry.read_text()
    # the clean room moved on: HEAD is the patch's commit, nothing unsaved
    code, out, _ = run(capsys, "cleanroom", "status", "--series", s, "--json")
    status = json.loads(out)
    assert [a["id"] for a in status["applied"]] == ["0001-greet"] and status["dirty"] == []
    assert (room / "main.c").is_file()


def test_verify_exit_codes(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = str(project)
    _capture_one(capsys, project)
    readme, _ = doc_paths(load_series(project))
    readme.write_text(readme.read_text() + "hand edit\n")
    code, _, err = run(capsys, "verify", "--series", s)
    assert code == 16 and "generated docs are out of date" in err
    code, _, _ = run(capsys, "docs", "--check", "--series", s)
    assert code == 16
    code, _, _ = run(capsys, "docs", "--series", s)
    assert code == 0 and not stale_docs(load_series(project))
    patch_file = project / "0001-greet.patch"
    data = patch_file.read_bytes()
    patch_file.write_bytes(data.replace(b"Subject: [PATCH] Greet", b"Subject: [PATCH] Greeet"))
    code, out, err = run(capsys, "verify", "0001-greet", "--series", s)
    assert code == 12
    assert "patch 0001-greet, step reexport" in err and "FAIL 0001-greet" in out


def test_capture_refuses_a_stack_that_does_not_match(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = str(project)
    _capture_one(capsys, project)
    code, _, _ = run(capsys, "new", "0002-second", "--title", "Second", "--series", s)
    assert code == 0
    code, _, err = run(capsys, "new", "0002-second", "--title", "Again", "--series", s)
    assert code == 5 and "already exists" in err
    code, _, err = run(capsys, "cleanroom", "apply", "--series", s)
    assert code == 15  # 0002-second has no file yet: capture it first
    code, _, err = run(capsys, "capture", "0002-second", "--series", s)
    assert code == 1 and "no changes" in err  # nothing edited since 0001's commit
    series = load_series(project, check_files=False)
    save_series(series.with_patches(reversed(series.patches)))  # 0002 now before 0001
    code, _, err = run(capsys, "capture", "0002-second", "--series", s)
    assert code == 8 and "needs exactly the patches before it" in err
    code, _, err = run(capsys, "capture", "9999-none", "--series", s)
    assert code == 15


def test_generated_docs_are_deterministic(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _capture_one(capsys, project)
    series = load_series(project)
    assert series_readme(series) == series_readme(series)
    registry = marker_registry(series)
    key = series_key(series.dir)
    assert registry == marker_registry(series)
    assert f"<!-- patchctl-series: {key} -->\n".encode() in registry
    assert registry.endswith(f"<!-- patchctl-series-end: {key} -->\n".encode())
    stats = patch_stats((project / "0001-greet.patch").read_bytes())
    assert stats.files == ("logo.bin", "main.c") and stats.binary == 1
    assert (stats.added, stats.removed) == (2, 1)


def test_json_failures_are_one_document(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s = str(project)
    _capture_one(capsys, project)
    readme, _ = doc_paths(load_series(project))
    readme.write_text("stale\n")
    code, out, _ = run(capsys, "verify", "--series", s, "--json")
    doc = json.loads(out)  # exactly one JSON document
    assert code == 16 and doc["ok"] is False and doc["exit_code"] == 16
    assert doc["stale"] == [str(readme)] and doc["report"]["ok"] is True
    code, out, _ = run(capsys, "docs", "--check", "--series", s, "--json")
    assert code == 16 and json.loads(out)["stale"] == [str(readme)]
    patch_file = project / "0001-greet.patch"
    patch_file.write_bytes(patch_file.read_bytes() + b"\n")
    code, out, _ = run(capsys, "verify", "--series", s, "--json")
    doc = json.loads(out)
    assert code == 12 and doc["error"] == "RoundTripFailed"
    steps = {st["step"]: st["ok"] for st in doc["report"]["patches"][0]["steps"]}
    assert steps == {"chain": True, "forward": True, "reverse": True, "reexport": False,
                     "markers": True, "bases": True}  # fmt: skip


def test_the_registry_keeps_hand_written_text_and_other_series_sections(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _capture_one(capsys, project)
    _, registry = doc_paths(load_series(project))
    other = project.parent / "other"
    shutil.copytree(project, other)
    code, _, err = run(capsys, "docs", "--series", str(other))
    assert code == 0, err
    text = registry.read_bytes()
    assert text.count(b"<!-- patchctl-series: ") == 2  # demo's section, then other's
    assert text.index(b"Series `demo`") < text.index(b"Series `other`")
    log = b"\n## Sync log\n\nMoved to 1.1: conflict in main.c, resolved by hand.\n"
    section = b"<!-- patchctl-series: "
    registry.write_bytes(text.replace(section, log + b"\n" + section, 1))
    edited = registry.read_bytes()
    assert stale_docs(load_series(project)) == [] and stale_docs(load_series(other)) == []
    patch_file = other / "0001-greet.patch"
    series = load_series(other)
    save_series(series.with_patches(p for p in series.patches if p.id != "0001-greet"))
    patch_file.unlink()
    code, _, err = run(capsys, "docs", "--series", str(other))
    assert code == 0, err
    after = registry.read_bytes()
    assert log in after and after.startswith(edited[: edited.index(b"Series `other`")])
    assert b"| `// patchctl 0001` | `0001-greet`" in after.split(b"Series `other`")[0]
    assert after.split(b"Series `other`")[1].count(b"| `// patchctl 0001`") == 0
    code, _, _ = run(capsys, "docs", "--check", "--series", str(project))
    assert code == 0


def test_a_registry_written_whole_by_an_earlier_patchctl_is_replaced(project: Path) -> None:
    series = load_series(project)
    legacy = b"# Upstream sync: marker registry\n\n" + GENERATED.encode()
    legacy += b"\n\nSeries `demo` on something old.\n\n## Markers\n"
    fresh = marker_registry(series, legacy)
    assert fresh == marker_registry(series, None) and b"something old" not in fresh


SYNC_DOC = REPO / "docs" / "UPSTREAM_SYNC.md"


def _documented_sync() -> list[str]:
    """The command lines of the upstream-sync procedure docs/UPSTREAM_SYNC.md shows."""
    block = re.search(r"```sh\n(.*?)```", SYNC_DOC.read_text(encoding="utf-8"), re.S)
    assert block is not None
    lines = [line.split("  #")[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def test_the_documented_upstream_sync_leaves_a_series_that_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The procedure on a synthetic project (its series for patches/llamafile, its copy for
    patches/llamafile-0.3.35): the copy verifies before the rebase and after an --abort."""
    series_dir, onto = rebase_ready(tmp_path)
    project = series_dir.parent.parent
    monkeypatch.chdir(project)
    names = {
        "patches/llamafile-0.3.35": "patches/demo-next",
        "patches/llamafile": "patches/demo",
        "llama-cpp-python==0.3.35": onto,
    }
    commands = []
    for line in _documented_sync():
        for old, new in names.items():
            line = line.replace(old, new)
        commands.append(line)
    rebase_at = next(i for i, c in enumerate(commands) if c.startswith("patchctl rebase --onto"))
    for command in commands[:rebase_at]:
        if command.startswith("patchctl "):
            assert main(shlex.split(command)[1:]) == 0, command
        else:
            subprocess.run(command, shell=True, cwd=project, check=True)
    copy = ["--series", "patches/demo-next"]
    assert main(["cleanroom", "apply", *copy]) == 0
    assert main(["verify", "--all", *copy]) == 0, capsys.readouterr().out
    assert main(shlex.split(commands[rebase_at])[1:]) == 3  # stops at the conflict
    assert main(["rebase", "--abort", *copy]) == 0
    assert main(["verify", "--all", *copy]) == 0
    assert main(["verify", "--all", "--series", "patches/demo"]) == 0


def test_a_document_embeds_the_series_table_and_keeps_the_rest(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = str(project)
    key = series_key(project)
    root = project.parent.parent
    doc = root / "docs" / "design.md"
    doc.parent.mkdir(exist_ok=True)
    before = "# Design\r\n\nHand-written \xe9 text.\n\n"
    after = "\nMore prose.\n"
    other = "<!-- patchctl-table: patches/other -->\nkept\n"
    other += "<!-- patchctl-table-end: patches/other -->\n"
    block = f"<!-- patchctl-table: {key} -->\nold\n<!-- patchctl-table-end: {key} -->\n"
    doc.write_bytes((before + block + other + after).encode("utf-8"))
    _capture_one(capsys, project)  # capture regenerates every generated doc, this one too
    text = doc.read_bytes().decode("utf-8")
    assert text.startswith(before) and text.endswith(other + after)
    assert "| 1 | `0001-greet` | Greet \\| loudly | 2 (1 binary) | +2 / -1 |" in text
    assert "\nold\n" not in text and not stale_docs(load_series(project))
    doc.write_bytes(doc.read_bytes().replace(b"+2 / -1", b"+9 / -9"))  # the table went stale
    assert stale_docs(load_series(project)) == [doc]
    code, _, err = run(capsys, "verify", "--series", s)
    assert code == 16 and "generated docs are out of date" in err
    code, _, _ = run(capsys, "docs", "--series", s)
    assert code == 0 and "+2 / -1" in doc.read_text() and not stale_docs(load_series(project))


def test_a_symlinked_document_is_not_followed(project: Path, tmp_path: Path) -> None:
    key = series_key(project)
    outside = tmp_path / "outside.md"
    outside.write_text(f"<!-- patchctl-table: {key} -->\nx\n<!-- patchctl-table-end: {key} -->\n")
    docs = project.parent.parent / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "link.md").symlink_to(outside)
    assert docs / "link.md" not in render_docs(load_series(project))
