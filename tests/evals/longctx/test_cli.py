"""evals/longctx/cli.py: run -> plot -> table through the command line (stand-in server)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from evals.longctx import models
from evals.longctx.cli import main
from evals.longctx.corpus import save_corpus

from .fakes import corpus, model_wheels


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_plot_table(tmp_path: Path, fake_bin: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    save_corpus(corpus(), tmp_path / "corpus.json.xz")
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF tiny")
    out = tmp_path / "docs" / "r.json"
    code, table, err = _run(
        capsys, "run", "--server", str(fake_bin), "--model", "tiny", "--model-file", str(model),
        "--n-train", "4096", "--multiples", "1,2", "--methods", "naive,yarn,dca-mscale",
        "--methods", "dca-small=--dca on --dca-chunk-size 512", "--haystacks", "1",
        "--corpus", str(tmp_path / "corpus.json.xz"), "--out", str(out), "--label", "cpu",
        "--mv-keys", "1", "--vt-chains", "1",
    )  # fmt: skip
    assert code == 0, err
    assert "| passkey | naive | 1/1 [0.21, 1.00] | 1/1 [0.21, 1.00] |" in table
    assert "| passkey | yarn |  | 0/1 [0.00, 0.79] |" in table
    assert "dca-mscale" in err and "unsupported" in err  # named, and the run went on
    doc = json.loads(out.read_text())
    assert {c["method"] for c in doc["cells"]} == {"naive", "yarn", "dca-small"}
    assert len(doc["trials"]) == (1 + 4 + 1 + 1) * (2 + 1 + 2)

    code, _, err = _run(capsys, "plot", str(out), "--out-dir", str(tmp_path / "png"))
    assert code == 0, err
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == [f"tiny-cpu-{t}.png" for t in ("mk_niah", "mv_niah", "passkey", "vt")]
    assert all((tmp_path / "png" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)

    page = tmp_path / "page.md"
    page.write_text("<!-- longctx:table accuracy docs/r.json -->\n<!-- longctx:end -->\n")
    root = ("--root", str(tmp_path))
    assert _run(capsys, "table", "--check", str(page), *root)[0] == 20  # stale: exit 20
    assert _run(capsys, "table", "--update", str(page), *root)[0] == 0
    assert _run(capsys, "table", "--check", str(page), *root)[0] == 0
    assert table.strip() in page.read_text()


def test_errors_exit_with_their_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, "--json", "fetch", "nope")
    assert code == 15 and json.loads(out)["error"] == "NotFound"
    assert err.startswith("error: unknown model 'nope'")
    code, _, err = _run(capsys, "plan", "--methods", "naive,warp")
    assert code == 5 and "unknown method 'warp'" in err
    code, _, err = _run(capsys, "plan", "--mk-keys", "2")
    assert code == 5 and "mk_keys" in err


def test_plan_shows_lanes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "plan", "--tier", "core", "--lanes", "2", "--probe", "dca-q8@32")
    assert code == 0
    assert out.startswith("plan core (combined layout, cost model h200-0.5b)")
    assert "dca@1048576 x1" in out and "dca-q8@1048576 x0" in out


def test_pack_then_join_from_a_stage_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATCHCTL_CACHE_DIR", str(tmp_path / "cache"))
    spec, folder = model_wheels(tmp_path)
    monkeypatch.setitem(models.MODELS, "tiny", spec)
    code, _, err = _run(capsys, "pack", "tiny", str(tmp_path / "packed"), "--part-mib", "1",
                          "--wheels", str(folder))  # fmt: skip
    assert code == 0, err
    stage = tmp_path / "stage"
    stage.mkdir()
    for part in sorted((tmp_path / "packed").glob("part*/*")):
        part.rename(stage / part.name)
    (stage / "other.gguf.00").write_bytes(b"another model's part")
    code, _, err = _run(capsys, "join", "tiny", str(tmp_path / "m.gguf"), "--parts-in",
                          str(stage), "--remove-parts")  # fmt: skip
    assert code == 0, err
    assert (tmp_path / "m.gguf").stat().st_size == spec.size
    assert sorted(p.name for p in stage.iterdir()) == ["other.gguf.00"]
    code, _, err = _run(capsys, "join", "tiny", str(tmp_path / "n.gguf"), "--parts-in", str(stage))
    assert code == 15 and "no part of tiny.gguf" in err


def test_unpinned_file_of_a_listed_model_then_publish(
    tmp_path: Path, fake_bin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_corpus(corpus(), tmp_path / "corpus.json.xz")
    model = tmp_path / "smol-q8.gguf"
    model.write_bytes(b"GGUF another quantization")
    args = ["run", "--server", str(fake_bin), "--model", "smollm2-135m", "--model-file",
            str(model), "--multiples", "0.5", "--haystacks", "1", "--methods", "naive",
            "--corpus", str(tmp_path / "corpus.json.xz"), "--out", str(tmp_path / "r.json"),
            "--summary", str(tmp_path / "s.json")]  # fmt: skip
    code, _, err = _run(capsys, *args)
    assert code == 20 and "--unpinned" in err  # not the pinned file: refused, with the way out
    code, _, err = _run(capsys, *args, "--unpinned")
    assert code == 0, err
    doc = json.loads((tmp_path / "r.json").read_text())
    sha = hashlib.sha256(model.read_bytes()).hexdigest()
    assert doc["model"]["name"] == f"smollm2-135m-{sha[:8]}" and doc["model"]["sha256"] == sha
    assert doc["model"]["n_ctx_train"] == 8192 and {t["length"] for t in doc["trials"]} == {4096}
    assert json.loads((tmp_path / "s.json").read_text())["cells"] == doc["cells"]
    md = tmp_path / "docs" / "dca.md"
    md.parent.mkdir()
    md.write_text("<!-- longctx:published -->\n")
    code, _, err = _run(capsys, "publish", str(tmp_path / "r.json"), "--date", "2026-12-01",
                        "--doc", str(md), "--root", str(tmp_path))  # fmt: skip
    assert code == 0, err
    out = tmp_path / "results" / "longctx" / "2026-12-01"
    assert (out / f"smollm2-135m-{sha[:8]}-cpu-passkey.png").is_file()
    block = f"accuracy results/longctx/2026-12-01/smollm2-135m-{sha[:8]}-cpu.json"
    assert f"longctx:table {block} -->" in md.read_text()


def test_rounds_grow_every_cell_one_haystack_at_a_time(
    tmp_path: Path, fake_bin: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    save_corpus(corpus(), tmp_path / "corpus.json.xz")
    model = tmp_path / "tiny.gguf"
    model.write_bytes(b"GGUF tiny")
    out = tmp_path / "r.json"
    grid = ["run", "--server", str(fake_bin), "--model", "tiny", "--model-file", str(model),
            "--n-train", "4096", "--multiples", "1", "--methods", "naive,dca",
            "--tasks", "passkey", "--corpus", str(tmp_path / "corpus.json.xz")]  # fmt: skip
    code, _, err = _run(capsys, *grid, "--haystacks", "3", "--rounds", "--out", str(out))
    assert code == 0, err
    doc = json.loads(out.read_text())
    # three rounds, each a run of its own that resumed the one before: one job per method per
    # round, each haystack asked once
    assert len(doc["runs"]) == 3
    assert sorted((j["run"], j["method"], j["haystacks"]) for j in doc["jobs"]) == [
        (r, m, r + 1) for r in range(3) for m in ("dca", "naive")
    ]
    asked = [(t["method"], t["haystack"]) for t in doc["trials"]]
    assert sorted(asked) == [(m, h) for m in ("dca", "naive") for h in range(3)]
    # the same grid in one go asks the same questions
    code, _, err = _run(capsys, *grid, "--haystacks", "3", "--out", str(tmp_path / "one.json"))
    assert code == 0, err
    one = json.loads((tmp_path / "one.json").read_text())
    answers = sorted((t["method"], t["haystack"], t["got"]) for t in one["trials"])
    assert sorted((t["method"], t["haystack"], t["got"]) for t in doc["trials"]) == answers
    code, _, err = _run(capsys, *grid, "--tier", "smoke", "--rounds", "--out", str(out))
    assert code != 0 and "--rounds" in err


def test_a_round_cut_by_the_budget_ends_the_rounds() -> None:
    from evals.longctx.cli import _round_complete

    def doc(*statuses: str) -> dict[str, object]:
        jobs = [{"run": 0, "status": "budget"}]  # an earlier round's cut job does not count
        jobs += [{"run": 1, "status": s} for s in statuses]
        return {"runs": [{}, {}], "jobs": jobs}

    assert _round_complete(doc("ok", "unsupported", "probe"))
    for cut in ("budget", "partial", "failed"):
        assert not _round_complete(doc("ok", cut))
