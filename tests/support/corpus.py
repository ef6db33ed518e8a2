"""The Debian quilt corpus: patchctl's whole import pipeline on real series nobody here wrote.

For one source package (support/debian.py fetches and checks it), through the real CLI
(`python -m patchctl ... --json`, one subprocess per step, in a fresh project directory):

1. `init` of the `archive` upstream: the orig tarball (with component tarballs, one tarball of
   the tree dpkg-source unpacks: upstream_archive);
2. `import debian/patches/series`: Debian's patches, byte for byte (checked after the step);
3. `verify --all`: forward, reverse and re-export of every patch (tree-exact);
4. `cleanroom apply` (strict): exit 10 names the first patch quilt took at an offset or with
   fuzz; then `refresh --all` rewrites the drifted ones (headers kept) and `cleanroom apply`
   runs again;
5. `verify --all` again;
6. the oracle: the orig tarball unpacked and Debian's own patch files applied with the `patch`
   call dpkg-source makes (offsets allowed, no fuzz); its tree must be the clean room's, but
   for files the patches leave empty, which that call's `-E` removes and git keeps
   (compare_trees lists them).

Beside it, for comparison only (its exit code does not change the result): Debian's own tool on
the same series, `quilt push -a --fuzz=0` in the same upstream tarball unpacked afresh with
debian/ beside it (quilt_push; only the push is timed, not the unpacking), and `timings`: the
wall seconds of `patchctl import` plus the `cleanroom apply` that built the whole tree (the
work quilt's push does: every patch applied to the upstream tree, then a tree), of every
patchctl step of the package, and of quilt's push.

The first step of 1-2 that fails ends the package's run; every step's command, exit code,
wall seconds and error (type, message, hint) is kept. A package with component tarballs
(`.orig-<name>.tar.*`, which dpkg-source unpacks into `<name>/`) gets one tarball built of
the tree dpkg-source unpacks (upstream_archive; an `archive` upstream is one file): the result
names it with its sha256, and lists each component with the patches that touch it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchctl.fsio import sha256_file
from patchctl.gitlayer.git import Git
from patchctl.series.model import load_series
from support.archives import extract_trusted_tar
from support.debian import (
    CACHE,
    DebianSource,
    NotQuilt,
    SourceUnavailable,
    fetch_debian_source,
    source_files,
)

EXIT_DRIFT = 10


@dataclass
class Step:
    """One patchctl command of the pipeline and what it did."""

    name: str
    argv: list[str]
    exit_code: int
    seconds: float
    error: str | None = None
    summary: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    """One package's run: `result` is `ok`, `failed: <step>`, `skipped: <why>` or
    `unavailable: <why>`."""

    package: str
    version: str = ""
    patches: int = 0
    series_options: list[str] = field(default_factory=list)
    features: dict[str, int] = field(default_factory=dict)
    components: dict[str, list[str]] = field(default_factory=dict)
    upstream: dict[str, str] = field(default_factory=dict)  # a tarball built with components
    steps: list[Step] = field(default_factory=list)
    quilt: Step | None = None  # `quilt push -a --fuzz=0` on the same series (quilt_push)
    timings: dict[str, float] = field(default_factory=dict)  # see timings()
    result: str = ""
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def quilt_series(series: Path) -> list[tuple[str, list[str]]]:
    """(patch name, options) of each entry of a quilt series file as dpkg-source reads it
    (Dpkg::Source::Quilt::read_patch_list: a comment starts at `#` at the line's start or after
    whitespace). Written apart from patchctl's reader, so the oracle does not share its bugs."""
    entries = []
    for line in series.read_text(encoding="utf-8", errors="replace").splitlines():
        words = re.sub(r"(?:^|\s+)#.*$", "", line.strip()).split()
        if words:
            entries.append((words[0], words[1:]))
    return entries


# The patch styles counted per package: a patch shows one when a line of it matches.
FEATURES = {
    "format-patch": re.compile(rb"^From [0-9a-f]{40} ", re.M),
    "dep3": re.compile(rb"^(Forwarded|Last-Update|Bug-Debian|Origin): ", re.M),
    "index-header": re.compile(rb"^Index: ", re.M),
    "crlf": re.compile(rb"\r\n"),
    "new-or-deleted-file": re.compile(rb"^(--- /dev/null|\+\+\+ /dev/null)", re.M),
    "mode": re.compile(rb"^(old mode|new mode|new file mode 100755)", re.M),
    "binary": re.compile(rb"^(GIT binary patch|Binary files )", re.M),
    "rename": re.compile(rb"^rename from ", re.M),
}


def _read(patch: Path) -> bytes:
    """A listed patch's bytes; b"" for one that is missing (import reports it, exit 15)."""
    return patch.read_bytes() if patch.is_file() else b""


def features(quilt: Path, names: list[str]) -> dict[str, int]:
    """How many of the series' patches show each FEATURES style, plus the series file's own:
    patches in subdirectories, comment and blank lines (only the styles present)."""
    data = [_read(quilt / p) for p in names]
    counts = {
        name: sum(bool(pattern.search(d)) for d in data) for name, pattern in FEATURES.items()
    }
    lines = (quilt / "series").read_bytes().splitlines()
    counts["subdirectory"] = sum("/" in p for p in names)
    counts["series-comments"] = sum(line.lstrip().startswith(b"#") for line in lines)
    counts["series-blank-lines"] = sum(not line.strip() for line in lines)
    return {name: count for name, count in counts.items() if count}


def _error(data: dict[str, Any], stderr: str) -> str | None:
    if data.get("ok", True) and "error" not in data:
        return None
    if "error" in data:
        hint = f" (hint: {data['hint']})" if data.get("hint") else ""
        return f"{data['error']}: {data.get('message', '')}{hint}"
    return stderr.strip()[-2000:] or None


def _summary(name: str, data: dict[str, Any]) -> dict[str, Any]:
    if name == "import" and "imported" in data:
        drifted = [e for e in data["imported"] if e.get("drift")]
        kinds = sorted({h["kind"] for e in drifted for h in e.get("hunks", [])})
        return {"imported": len(data["imported"]), "drifted": len(drifted), "kinds": kinds}
    if name.startswith("verify") and "patches" in data:
        return {"verified": sum(1 for p in data["patches"] if p.get("ok")), "ok": data.get("ok")}
    if name == "refresh" and "patches" in data:
        return {"refreshed": sum(1 for p in data["patches"] if p.get("refreshed"))}
    if name.startswith("apply") and "applied" in data:
        return {"applied": len(data["applied"]), "tree": data.get("tree")}
    if name.startswith("apply") and "patch" in data:
        return {"stopped_at": data["patch"]}
    return {}


def run_step(name: str, args: list[str], project: Path) -> Step:
    """Run `python -m patchctl ARGS --json` in `project` and record it."""
    argv = ["patchctl", *args, "--json"]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=project, capture_output=True, text=True, check=False
    )
    seconds = round(time.monotonic() - started, 2)
    try:
        data = json.loads(done.stdout) if done.stdout.strip() else {}
    except json.JSONDecodeError:
        data = {"ok": False}
    step = Step(name, argv, done.returncode, seconds, _error(data, done.stderr))
    step.summary = _summary(name, data)
    if done.returncode != 0 and step.error is None:
        step.error = done.stderr.strip()[-2000:] or f"exit {done.returncode}, no message"
    return step


def touches(patch: Path, directory: str) -> bool:
    """True when the patch names a path under `directory/` (after the first component)."""
    for line in _read(patch).splitlines():
        if line.startswith((b"--- ", b"+++ ")):
            parts = line[4:].split(b"\t")[0].split(b"/")
            if len(parts) > 2 and parts[1] == directory.encode():
                return True
    return False


def bytes_kept(series_dir: Path, quilt: Path, names: list[str]) -> bool:
    """True when the series' patch files are Debian's, byte for byte, in Debian's order."""
    series = load_series(series_dir)
    if len(series.patches) != len(names):
        return False
    return all(
        series.patch_path(entry).read_bytes() == (quilt / name).read_bytes()
        for entry, name in zip(series.patches, names, strict=True)
    )


# dpkg-source's own `patch` call for a 3.0 (quilt) package (offsets allowed, no fuzz, files
# left empty removed), without its backups (it keeps them in .pc/, not in the tree).
DPKG_PATCH = (
    *("patch", "-t", "-F", "0", "-N", "-p1", "-u", "-V", "never", "-E", "-s"),
    "--no-backup-if-mismatch",
)


def _unpack(orig: Path, where: Path) -> None:
    """`tar x` of the orig tarball into `where`, its single top directory stripped when it has
    one (as dpkg-source does; a tarball of loose files is taken as it is)."""
    raw = where.with_name(where.name + ".tar-x")
    raw.mkdir(parents=True)
    tar = ["tar", "xf", str(orig), "-C", str(raw), "--no-same-owner", "--no-same-permissions"]
    subprocess.run(tar, check=True)  # dpkg-source's own tar options
    top = list(raw.iterdir())
    if len(top) == 1 and top[0].is_dir() and not top[0].is_symlink():
        top[0].rename(where)
        raw.rmdir()
    else:
        raw.rename(where)


def dpkg_source_tree(orig: Path, quilt: Path, names: list[str], where: Path) -> Step:
    """The oracle: `tar x` of the orig tarball (_unpack) and each of Debian's
    own patch files through DPKG_PATCH, as dpkg-source unpacks the package; the git tree id of
    the result is the step's `tree` (None when a patch did not apply)."""
    started = time.monotonic()
    _unpack(orig, where)
    step = Step("dpkg-source", [*DPKG_PATCH, "-i", "<each patch>"], 0, 0.0)
    for name in names:
        done = subprocess.run(
            [*DPKG_PATCH, "-i", str(quilt / name)], cwd=where, capture_output=True, text=True
        )
        if done.returncode != 0:
            step.exit_code, step.error = done.returncode, f"{name}: {done.stdout}{done.stderr}"
            break
    else:
        # Git.init pins info/attributes: no in-tree .gitattributes (eol, filters) applies, so
        # the tree's bytes are taken as they are, as in a clean room
        git = Git.init(where)
        git.add_all()
        step.summary["tree"] = git.write_tree()
    step.seconds = round(time.monotonic() - started, 2)
    return step


# quilt with no configuration of this machine's user: no quiltrc (`--quiltrc -`), a private
# HOME, no QUILT_* from the environment but the patch directory dpkg-source uses.
QUILT_PUSH = ("quilt", "--quiltrc", "-", "push", "-a", "--fuzz=0", "-q")


def quilt_push(orig: Path, debian: Path, where: Path) -> Step:
    """Debian's own tool on the series: the orig tarball unpacked (_unpack) into `where`,
    `debian` copied to `where/debian` (in place of any the tarball has), then QUILT_PUSH with
    QUILT_PATCHES=debian/patches. The step's seconds cover the push alone (tar and the copy
    not included); its summary counts the patches quilt applied (`.pc/applied-patches`).
    `where` is removed afterwards."""
    _unpack(orig, where)
    if (where / "debian").is_symlink() or (where / "debian").is_file():
        (where / "debian").unlink()
    elif (where / "debian").is_dir():  # an upstream's own debian/ (e2fsprogs): dpkg-source
        shutil.rmtree(where / "debian")  # replaces it with the package's, as here
    shutil.copytree(debian, where / "debian", symlinks=True)
    home = where.with_name(where.name + ".home")
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUILT")}
    env.update(HOME=str(home), QUILT_PATCHES="debian/patches", QUILT_PC=".pc", LC_ALL="C")
    started = time.monotonic()
    try:
        done = subprocess.run(QUILT_PUSH, cwd=where, env=env, capture_output=True, text=True)
    except FileNotFoundError:
        step = Step("quilt", list(QUILT_PUSH), 127, 0.0, "quilt is not installed")
    else:
        seconds = round(time.monotonic() - started, 2)
        step = Step("quilt", list(QUILT_PUSH), done.returncode, seconds)
        if done.returncode != 0:
            step.error = (done.stdout + done.stderr).strip()[-2000:] or "no message"
        applied = where / ".pc" / "applied-patches"
        lines = applied.read_text(errors="replace").splitlines() if applied.is_file() else []
        step.summary["applied"] = len(lines)
    shutil.rmtree(where)
    shutil.rmtree(home)
    return step


def timings(outcome: Outcome) -> dict[str, float]:
    """Wall seconds: `import_apply`, patchctl's `import` plus the `cleanroom apply` that built
    the whole tree (after a refresh, the second; the refused first apply and the refresh are
    not in it), present when both ran; `patchctl`, every patchctl step of the package (init to
    the last verify, each a `python -m patchctl` subprocess); `quilt_push`, quilt's push."""
    steps = {s.name: s for s in outcome.steps}
    found: dict[str, float] = {}
    apply = steps.get("apply-refreshed") or steps.get("apply")
    if "import" in steps and apply is not None and apply.exit_code == 0:
        found["import_apply"] = round(steps["import"].seconds + apply.seconds, 2)
    ours = [s.seconds for s in outcome.steps if s.argv[:1] == ["patchctl"]]
    if ours:
        found["patchctl"] = round(sum(ours), 2)
    if outcome.quilt is not None and outcome.quilt.exit_code != 127:
        found["quilt_push"] = outcome.quilt.seconds
    return found


def _files(root: Path) -> dict[str, tuple[str, str]]:
    """Relative path -> (kind, sha256 or link target) of every file and link under `root`, as
    a git tree records them (.git left out, empty directories unseen)."""
    found: dict[str, tuple[str, str]] = {}
    for top, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not (top == str(root) and d == ".git")]
        for name in [*names, *(d for d in dirs if Path(top, d).is_symlink())]:
            path = Path(top, name)
            rel = str(path.relative_to(root))
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_file():
                kind = "exe" if os.access(path, os.X_OK) else "file"
                found[rel] = (kind, sha256_file(path))
    return found


def compare_trees(step: Step, cleanroom: Path, oracle: Path) -> None:
    """The paths where the clean room and the oracle differ (the first 20), and which of them
    are files the patches left empty: dpkg-source's `patch -E` removes those (a git patch that
    creates an empty file, `index 0000000..e69de29`, gives no file there), git keeps them."""
    ours, theirs = _files(cleanroom), _files(oracle)
    differ = sorted(p for p in ours.keys() | theirs.keys() if ours.get(p) != theirs.get(p))
    empty = [p for p in differ if p not in theirs and ours[p] == ("file", EMPTY_SHA256)]
    step.summary["differences"] = differ[:20]
    step.summary["empty_files_removed_by_patch_E"] = empty[:20]
    step.summary["explained"] = bool(differ) and differ == empty


EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def upstream_archive(source: DebianSource, where: Path) -> Path:
    """The `archive` upstream: the orig tarball, or for a package with component tarballs one
    tarball of the tree dpkg-source unpacks from them (the orig tarball, each component in
    `<component>/` replacing what the orig tarball had there; members in name order, _ownerless),
    since an `archive` upstream is one file."""
    if not source.components:
        return source.orig
    tree = where / "upstream"
    _unpack(source.orig, tree)
    for name, tarball in sorted(source.components.items()):
        if (tree / name).exists():
            shutil.rmtree(tree / name)
        _unpack(tarball, tree / name)
    stem = source.orig.name.split(".orig.tar.", 1)[0]
    combined = where / f"{stem}.orig+{'+'.join(sorted(source.components))}.tar"
    with tarfile.open(combined, "w", format=tarfile.PAX_FORMAT) as tar:
        tar.add(tree, arcname=stem.replace("_", "-", 1), filter=_ownerless)
    shutil.rmtree(tree)
    return combined


def _ownerless(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """No owners; directories at time 0 (their mtimes are the build's), files keep theirs."""
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    if member.isdir():
        member.mtime = 0
    return member


def _pipeline(outcome: Outcome, orig: Path, quilt: Path, project: Path) -> None:
    """Steps 1-6 of the module docstring; a failed init or import ends the run."""
    series = f"patches/{outcome.package}"
    steps = outcome.steps
    for name, args in (
        ("init", ["init", str(orig), "--series", series]),
        ("import", ["import", str(quilt / "series"), "--series", series]),
    ):
        steps.append(run_step(name, args, project))
        if steps[-1].exit_code != 0:
            outcome.result = f"failed: {name}"
            return
    names = [name for name, _ in quilt_series(quilt / "series")]
    steps[-1].summary["bytes_kept"] = bytes_kept(project / series, quilt, names)
    for name, args in (
        ("verify", ["verify", "--all", "--series", series]),
        ("apply", ["cleanroom", "apply", "--series", series]),
    ):
        steps.append(run_step(name, args, project))
    if steps[-1].exit_code == EXIT_DRIFT:
        steps.append(run_step("refresh", ["refresh", "--all", "--series", series], project))
        apply = ["cleanroom", "apply", "--series", series]
        steps.append(run_step("apply-refreshed", apply, project))
    steps.append(run_step("verify-final", ["verify", "--all", "--series", series], project))
    oracle = dpkg_source_tree(orig, quilt, names, project.parent / "dpkg-source")
    steps.append(oracle)
    final = next(s for s in reversed(steps) if s.name.startswith("apply"))
    oracle.summary["equal"] = oracle.summary.get("tree") == final.summary.get("tree")
    if oracle.exit_code == 0 and not oracle.summary["equal"]:
        room = project / "cleanroom" / outcome.package
        compare_trees(oracle, room, project.parent / "dpkg-source")
    failed = [s.name for s in steps if not passed(s)]
    outcome.result = f"failed: {failed[0]}" if failed else "ok"


def passed(step: Step) -> bool:
    """Exit 0 (for the oracle: the same tree as patchctl's), or the first strict apply's exit
    10 (drift: a refresh follows it)."""
    if step.name == "dpkg-source":  # the same tree, but for files dpkg-source's -E removes
        same = step.summary.get("equal") is True or step.summary.get("explained") is True
        return step.exit_code == 0 and same
    return step.exit_code == 0 or (step.name == "apply" and step.exit_code == EXIT_DRIFT)


def run_package(package: str, workdir: Path, cache: Path = CACHE) -> Outcome:
    """Fetch `package` and run the pipeline on it in `workdir/<package>` (made afresh)."""
    outcome = Outcome(package)
    started = time.monotonic()
    try:
        source = source_files(fetch_debian_source(package, cache))
    except SourceUnavailable as exc:
        outcome.result = f"unavailable: {exc}"
        return outcome
    except NotQuilt as exc:
        outcome.result = f"skipped: {exc}"
        return outcome
    outcome.version = source.version
    here = workdir / package
    if here.exists():
        shutil.rmtree(here)
    (here / "project").mkdir(parents=True)
    with tarfile.open(source.debian) as tar:  # debian/ may link into the source tree
        extract_trusted_tar(tar, here)
    quilt = here / "debian" / "patches"
    if not (quilt / "series").is_file():
        outcome.result = "skipped: no debian/patches/series"
        return outcome
    entries = quilt_series(quilt / "series")
    outcome.patches = len(entries)
    outcome.series_options = sorted({" ".join(opts) for _, opts in entries if opts})
    outcome.features = features(quilt, [name for name, _ in entries])
    outcome.components = {
        name: [p for p, _ in entries if touches(quilt / p, name)] for name in source.components
    }
    upstream = upstream_archive(source, here)
    if upstream != source.orig:
        outcome.upstream = {"archive": upstream.name, "sha256": sha256_file(upstream)}
    _pipeline(outcome, upstream, quilt, here / "project")
    outcome.seconds = round(time.monotonic() - started, 2)  # quilt's run not included
    outcome.quilt = quilt_push(upstream, here / "debian", here / "quilt")
    outcome.timings = timings(outcome)
    return outcome
