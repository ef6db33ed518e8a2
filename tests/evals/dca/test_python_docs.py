"""docs/dca.md's Python section runs as written, on a copy of the repository's tracked files
(what a fresh clone holds) in a new virtual environment.

Its fenced blocks are extracted from the Markdown and run in order: the `sh` blocks as one bash
script (`set -e`: a failing command fails the test) in the copy, the `python` blocks with the
venv's Python in the copy, where the GGUF the example names is linked from the test cache.

One step is not redone: `pip install dist/llama_cpp_python-*.tar.gz` compiles llama.cpp (10-20
min on 2 cores). The test runs that line with its argument, the documented glob, first hashed
(`sha256sum`: the glob must name exactly one file, byte-identical to the sdist the test wheel
was built from, tests/dca/wheel.py) and then installed as that cached wheel, with the same pip
and environment. Every other line runs as the docs print it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from patchctl.gitlayer.git import Git

from .test_longctx_smoke import smollm2  # noqa: F401  (the SmolLM2-135M fixture)
from .wheel import PROJECT, Wheel

DOC = PROJECT / "docs" / "dca.md"
SECTION = "## Python (llama-cpp-python)"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)
INSTALL = re.compile(r"^pip install (dist/llama_cpp_python-\S+\.tar\.gz)(.*)$", re.MULTILINE)
MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"


def section(text: str, heading: str = SECTION) -> str:
    """The text of a `## ` section, up to the next `## ` heading."""
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + len(heading))
    return text[start : len(text) if end < 0 else end]


def blocks(text: str) -> list[tuple[str, str]]:
    """The fenced code blocks of `text`: (language, body)."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def commands(script: str) -> list[str]:
    """The command lines of a shell block (comments and blank lines left out)."""
    lines = (line.split("#", 1)[0].strip() for line in script.splitlines())
    return [line for line in lines if line]


def test_the_section_installs_patchctl_alone_and_exports_the_sdist() -> None:
    """The sh block is the path of a user who only wants the sdist: no `make`, patchctl
    installed without extras, the series applied, verified and exported, then installed."""
    shells = [body for lang, body in blocks(section(DOC.read_text())) if lang == "sh"]
    assert shells, "no sh block in the Python section"
    lines = commands("\n".join(shells))
    assert not [line for line in lines if line.startswith("make")], lines
    assert "pip install -e ." in lines  # patchctl alone: no [test] extra
    series = "--series patches/llama-cpp-python"
    for step in ("cleanroom apply", "verify --all", "export --sdist"):
        assert any(line.startswith(f"patchctl {step} {series}") for line in lines), step
    assert len(INSTALL.findall("\n".join(lines))) == 1, lines


def test_the_extraction_reads_fences_and_sections() -> None:
    text = "# t\n## A\n```sh\nx # c\n\ny\n```\n## Python (llama-cpp-python)\n```python\nz\n```\n"
    assert blocks(section(text)) == [("python", "z\n")]
    assert blocks(section(text, "## A")) == [("sh", "x # c\n\ny\n")]
    assert commands("x # c\n\n  # only\ny\n") == ["x", "y"]
    with pytest.raises(ValueError):
        section(text, "## Missing")


def _copy_tracked(target: Path) -> Path:
    """The tracked files of the working tree (a clone of it, uncommitted edits included)."""
    for raw in sorted(Git(PROJECT).tracked_paths()):
        rel = Path(os.fsdecode(raw))
        source = PROJECT / rel
        if source.is_symlink() or not source.is_file():
            continue  # a deleted file, or a link (none is needed here)
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target / rel)
    return target


def _env() -> dict[str, str]:
    """The environment of the user's shell: the test venv off PATH, the real caches kept."""
    test_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != test_bin]
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PATH"] = os.pathsep.join(path)
    return env


def test_the_python_section_runs_as_written(
    python_wheel: Wheel,
    smollm2: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    repo = _copy_tracked(tmp_path / "repo")
    found = blocks(section((repo / "docs" / "dca.md").read_text()))
    script = "\n".join(body for lang, body in found if lang == "sh")
    pythons = [body for lang, body in found if lang == "python"]
    assert pythons, "no python block in the Python section"
    hashes = tmp_path / "sdist.sha256"
    script, n = INSTALL.subn(
        lambda m: f"sha256sum {m.group(1)} > {hashes}\npip install {python_wheel.path}{m.group(2)}",
        script,
    )
    assert n == 1, "the install line of the exported sdist is not in the sh block"
    env = _env()
    shell = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=1500,
    )  # fmt: skip
    assert shell.returncode == 0, f"{script}\n---\n{shell.stdout[-3000:]}\n{shell.stderr[-4000:]}"
    (line,) = hashes.read_text().splitlines()  # the documented glob names one file
    digest, name = line.split()
    assert digest == python_wheel.sdist_sha256, f"{name} is not the sdist the wheel was built from"
    assert name == f"dist/{python_wheel.sdist.name}"
    (repo / MODEL).symlink_to(smollm2)
    python = repo / ".venv" / "bin" / "python"
    outputs = []
    for body in pythons:
        run = subprocess.run(
            [str(python), "-c", body],
            cwd=repo, env=env, capture_output=True, text=True, check=False, timeout=900,
        )  # fmt: skip
        assert run.returncode == 0, f"{body}\n---\n{run.stderr[-4000:]}"
        outputs.append(run.stdout)
    printed = "".join(outputs)
    tokens = int(printed.split()[0])
    assert tokens > 8192, f"the example's prompt ({tokens} tokens) is within the trained context"
    assert (
        "Failed to create llama_context: failed to initialize the context: "
        "dca_local_window (2048) must be smaller than chunk_len" in printed
    ), printed
