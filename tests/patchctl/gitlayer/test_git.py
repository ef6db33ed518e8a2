"""git.py: pinned flags and a hermetic environment beat hostile user config and env."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import zlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from support.paths import REPO
from support.repos import Repo, new_repo
from support.series import write_series

from patchctl.errors import ConfigError, GitFailed, PatchctlError
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import Index, temp_index
from patchctl.gitlayer.objects import loose_missing, scratch_repo, share_objects, unsound_objects
from patchctl.gitlayer.pipes import CommitWriter, TreeDiffer, TreeWriter
from patchctl.gitlayer.runner import PINNED_CONFIG, hermetic_env
from patchctl.series.markers import markers_in_tree
from patchctl.series.model import Upstream, load_series
from patchctl.upstream.sources import fetch_git


def test_every_pin_has_a_reason() -> None:
    assert all(why for _key, _value, why in PINNED_CONFIG)
    keys = [key for key, _value, _why in PINNED_CONFIG]
    assert len(keys) == len(set(keys))


def test_hostile_user_config_is_active_for_plain_git(tmp_path: Path) -> None:
    # Sanity check of the seal: plain git sees the hostile ~/.gitconfig...
    out = subprocess.run(
        ["git", "config", "--get", "diff.noprefix"], capture_output=True, cwd=tmp_path
    )
    assert out.stdout.strip() == b"true"


def test_hostile_user_config_is_invisible_to_patchctl(tmp_path: Path) -> None:
    git = Git.init(tmp_path / "r")
    code, out, _ = git.run_full("config", "--get", "diff.noprefix")
    assert out.strip() == b"false"  # the pin, not the user's true
    code, out, _ = git.run_full("config", "--get", "user.name")
    assert code == 1 and out == b""


def test_diff_output_has_prefixes_no_color_and_keeps_crlf(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"f.txt": b"a\r\nb\r\n"})
    (repo.path / "f.txt").write_bytes(b"a\r\nB\r\n")
    diff = repo.git.run("diff", "--no-ext-diff")
    assert b"diff --git a/f.txt b/f.txt" in diff
    assert b"\x1b[" not in diff
    assert b"-b\r\n+B\r\n" in diff
    assert repo.git.run("cat-file", "blob", "HEAD:f.txt") == b"a\r\nb\r\n"


def test_identity_and_dates_are_fixed_so_commits_are_reproducible(tmp_path: Path) -> None:
    ids = []
    for name in ("one", "two"):
        git = Git.init(tmp_path / name)
        (tmp_path / name / "f").write_bytes(b"x\n")
        git.add_all()
        ids.append(git.commit_tree(git.write_tree(), b"msg\n"))
    assert ids[0] == ids[1]
    header = Git(tmp_path / "one").run("cat-file", "commit", ids[0])
    assert b"author patchctl <patchctl@invalid> 0 +0000" in header
    assert b"committer patchctl <patchctl@invalid> 0 +0000" in header


def test_inherited_git_env_is_scrubbed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    git = Git.init(tmp_path / "r")
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(tmp_path / "bogus-index"))
    monkeypatch.setenv("GIT_WORK_TREE", str(tmp_path))
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "false")
    env = hermetic_env(git.repo)
    assert "GIT_DIR" not in env and "GIT_INDEX_FILE" not in env
    assert env["GIT_CONFIG_GLOBAL"] == "/dev/null" and env["LC_ALL"] == "C"
    assert git.text("rev-parse", "--absolute-git-dir") == str((tmp_path / "r" / ".git").resolve())
    assert not (tmp_path / "elsewhere").exists()


def test_ceiling_stops_discovery_of_an_enclosing_repo(tmp_path: Path) -> None:
    Git.init(tmp_path / "outer")
    inner = tmp_path / "outer" / "plain"
    inner.mkdir()
    assert not Git(inner).is_repo()
    with pytest.raises(GitFailed) as info:
        Git(inner).run("rev-parse", "--git-dir")
    assert info.value.exit_code == 9
    assert info.value.returncode == 128


def test_run_accepts_listed_status_codes_and_passes_stdin_bytes(tmp_path: Path) -> None:
    git = Git.init(tmp_path / "r")
    data = b"\x00\xffbytes\r\n"
    oid = git.run("hash-object", "-w", "--stdin", stdin=data).decode().strip()
    assert git.run("cat-file", "blob", oid) == data
    assert git.run("cat-file", "-e", "0" * 40, ok=(0, 1)) == b""
    with pytest.raises(GitFailed):
        git.run("cat-file", "-e", "0" * 40)
    assert git.maybe_rev("HEAD") is None


# ----------------------------------------------------------------------------- option injection

ValueCall = Callable[[Git, str], object]

# Each call hands a value that git would take as an option (writing `sentinel`, deleting a ref,
# emptying the index) to one method of the git layer; the layer must pass it as a value.
HOSTILE_CALLS: dict[str, ValueCall] = {
    "fetch url": lambda git, s: git.fetch(f"--upload-pack=touch {s};://x", "0" * 40),
    "canonical diff trees": lambda git, s: git.canonical_diff(f"--output={s}", "HEAD^{tree}"),
    "backup diff commit": lambda git, s: git.backup_diff(f"--output={s}"),
    "object type": lambda git, s: git.object_type(f"--output={s}"),
    "log revisions": lambda git, s: git.log_records("%H", f"--output={s}"),
    "diff-tree trees": lambda git, s: git.changed_paths(f"--output={s}", "HEAD^{tree}"),
    "update-ref name": lambda git, s: git.update_ref("-d", "refs/heads/main"),
    "read-tree tree": lambda git, s: git.read_tree("--empty"),
    "index read-tree": lambda git, s: Index(git, git.index_path()).read_tree("--empty"),
    "rev-parse": lambda git, s: git.rev_parse("--git-dir"),
    "cat-file": lambda git, s: git.cat_file("commit", "--batch-all-objects"),
    "commit-tree tree": lambda git, s: git.commit_tree("--help", b"m\n"),
    "symbolic-ref branch": lambda git, s: git.set_head("--delete"),
    "reset commit": lambda git, s: git.reset_keep("--hard"),
    "grep tree": lambda git, s: markers_in_tree(git, f"--output={s}", ["x"]),
}


@pytest.mark.parametrize("call", HOSTILE_CALLS.values(), ids=HOSTILE_CALLS.keys())
def test_a_value_starting_with_a_dash_never_reaches_git_as_an_option(
    make_repo: Callable[..., Repo], tmp_path: Path, call: ValueCall
) -> None:
    repo = make_repo({"f.txt": b"x\n"})
    sentinel = tmp_path / "sentinel"
    refs, index = repo.git.run("for-each-ref"), repo.git.index_path().read_bytes()
    with pytest.raises((GitFailed, ValueError)):
        call(repo.git, str(sentinel))
    assert not sentinel.exists()
    assert repo.git.run("for-each-ref") == refs
    assert repo.git.index_path().read_bytes() == index
    assert repo.git.text("symbolic-ref", "HEAD").startswith("refs/heads/")


def test_a_ref_prefix_starting_with_a_dash_is_a_pattern(make_repo: Callable[..., Repo]) -> None:
    git = make_repo({"f.txt": b"x\n"}).git
    assert git.refs("refs/heads/") == ["refs/heads/main"]
    assert git.refs("--format=x") == []  # as an option it would print "x" per ref


def test_an_upstream_url_that_looks_like_an_option_runs_nothing(tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    upstream = Upstream(kind="git", url=f"--upload-pack=touch {sentinel};://x", commit="1" * 40)
    with pytest.raises(ConfigError, match="starts with '-'"):  # refused where it is read
        load_series(write_series(tmp_path / "s", upstream))
    # ...and the git layer would not run it either, were it ever handed such a value.
    plain = Upstream(kind="git", url="../repo", commit="1" * 40)
    series = replace(load_series(write_series(tmp_path / "t", plain)), upstream=upstream)
    with pytest.raises(PatchctlError):
        fetch_git(series)
    assert not sentinel.exists()


@pytest.mark.parametrize("url", ["ext::sh -c touch% {s}", "fd::17", "testhelper::{s}"])
def test_a_transport_outside_the_allow_list_never_runs(
    make_repo: Callable[..., Repo], tmp_path: Path, url: str
) -> None:
    """allowlists.py refuses these urls at load; git itself refuses them too (GIT_ALLOW_PROTOCOL
    and protocol.allow=never), so no caller that skipped the check could run a transport."""
    git = make_repo({"f.txt": b"x\n"}).git
    sentinel = tmp_path / "sentinel"
    with pytest.raises(GitFailed, match=r"not allowed|unsupported|Unable to find remote helper"):
        git.fetch(url.format(s=sentinel), "0" * 40)
    assert not sentinel.exists()


# ----------------------------------------------------------------------------- the vocabulary


def test_status_paths_parses_renames_and_odd_names(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"a.txt": b"a\n" * 20, "sp ace.txt": b"s\n"})
    repo.git.run("mv", "a.txt", "b\u00e4.txt")
    (repo.path / "sp ace.txt").write_bytes(b"t\n")
    (repo.path / "new\tfile").write_bytes(b"n\n")
    assert sorted(repo.git.status_paths()) == ["b\u00e4.txt", "new\tfile", "sp ace.txt"]


def test_temp_index_keeps_the_seed_mtime_and_leaves_the_seed_alone(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"f.txt": b"x\n"})
    seed = repo.git.index_path()
    before = seed.read_bytes(), seed.stat().st_mtime_ns
    with temp_index(repo.git, seed) as index:
        assert index.path.stat().st_mtime_ns == before[1]
        (repo.path / "g.txt").write_bytes(b"g\n")
        index.add_all()
        tree = index.write_tree()
    assert not index.path.exists()
    assert (seed.read_bytes(), seed.stat().st_mtime_ns) == before
    assert repo.git.run("ls-tree", "--name-only", tree) == b"f.txt\ng.txt\n"


def test_snapshot_without_an_index_keeps_tracked_ignored_files(tmp_path: Path) -> None:
    git = Git.init(tmp_path / "r")
    (tmp_path / "r" / ".gitignore").write_bytes(b"*.log\n")
    (tmp_path / "r" / "kept.log").write_bytes(b"tracked although ignored\n")
    git.add_all()
    git.update_ref("HEAD", git.commit_tree(git.write_tree(), b"m\n"))
    head = git.tree_of("HEAD")
    git.index_path().unlink()
    assert git.snapshot_worktree() == head


def test_scratch_repo_reads_objects_through_alternates(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"f.txt": b"x\n"})
    with scratch_repo([repo.path]) as scratch:
        assert scratch.has_tree(repo.tree)
        assert scratch.cat_file("blob", f"{repo.tree}:f.txt") == b"x\n"
        path = scratch.repo
    assert not path.exists()


# Local tuples that hold only options with their values attached or paired (`--relative=x`,
# `-e PATTERN`): the only non-literal arguments allowed before the separator.
OPTION_TUPLES = frozenset({"relative", "patterns"})


def _value_before_separator(call: ast.Call) -> str | None:
    """The first argument of a `.run/.run_full/.text` git call that could be read as an
    option: a non-literal before `--end-of-options` / `--` (None when there is none)."""
    for arg in call.args:
        if isinstance(arg, ast.Constant) and arg.value in ("--end-of-options", "--"):
            return None
        if isinstance(arg, ast.Constant):
            continue
        if isinstance(arg, ast.Starred) and isinstance(arg.value, ast.Name):
            name = arg.value.id
            if name.isupper() or name in OPTION_TUPLES:
                continue
        head = arg.values[0] if isinstance(arg, ast.JoinedStr) else None
        if isinstance(head, ast.Constant) and str(head.value).startswith("-"):
            continue  # --option={value}: the value is attached
        if isinstance(arg, ast.Call) and getattr(arg.func, "id", "") == "object_id":
            continue
        return ast.unparse(arg)
    return None


def _raw_git_calls(path: Path) -> list[ast.Call]:
    """The calls of `<something git>.run/run_full/text/text_in(...)` in the module at `path`."""
    return [
        node
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("run", "run_full", "text", "text_in")
        and "git" in ast.unparse(node.func.value)
    ]


def test_git_runs_only_through_named_methods_of_the_git_layer() -> None:
    # Every git call outside patchctl/gitlayer/ goes through a named method (Git.fetch,
    # Git.canonical_diff, ...), so the pins, the separator and the value checks live in one place.
    root = REPO / "patchctl"
    found = [
        f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)[:80]}"
        for path in sorted(root.rglob("*.py"))
        if "gitlayer" not in path.relative_to(root).parts
        for node in _raw_git_calls(path)
    ]
    assert found == []


def test_no_git_call_in_the_git_layer_passes_a_value_before_the_separator() -> None:
    # The vocabularies (Git in git.py, Index in index.py) separate options from values by
    # construction; this keeps the raw calls of the layer's other modules honest too.
    root = REPO / "patchctl" / "gitlayer"
    found = []
    for path in sorted(root.glob("*.py")):
        if path.name in ("git.py", "index.py"):
            continue
        for node in _raw_git_calls(path):
            bad = _value_before_separator(node)
            if bad is not None:
                found.append(f"{path.name}:{node.lineno}: {bad}")
    assert found == []


def _object_file(git: Git, oid: str) -> Path:
    return git.repo / ".git" / "objects" / oid[:2] / oid[2:]


def test_share_objects_links_loose_objects_and_names_packed_ones(
    tmp_path: Path, make_repo: Callable[..., Repo], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = make_repo({"a.txt": b"a\n", "d/b.txt": b"b\n"})
    objects = source.git.tree_objects(source.tree)
    assert len(objects) == 4 and objects[0] == source.tree  # root, d, a.txt, d/b.txt
    target = Git.init(tmp_path / "target")
    assert share_objects(source.git, target, objects) == set()
    for oid in objects:
        assert os.path.samefile(_object_file(source.git, oid), _object_file(target, oid))
    assert target.has_tree(source.tree)

    # Another file system: copied (then renamed into place), same bytes.
    def cross_device(*_args: object) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(os, "link", cross_device)
    other = Git.init(tmp_path / "other")
    assert share_objects(source.git, other) == set()  # every loose object, the commit too
    copied = _object_file(other, source.commit)
    assert copied.read_bytes() == _object_file(source.git, source.commit).read_bytes()
    assert not os.path.samefile(copied, _object_file(source.git, source.commit))
    # Packed objects are not files to share: their ids come back.
    packed = make_repo({"p.txt": b"p\n"})
    packed.git.run("repack", "-a", "-d", "-q")
    assert share_objects(packed.git, Git.init(tmp_path / "third"), [packed.tree]) == {packed.tree}


def test_unsound_objects_finds_missing_and_mislabelled_objects(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"a.txt": b"a\n", "b.txt": b"b\n"})
    a, b = (repo.git.rev_parse(f"{repo.tree}:{n}") for n in ("a.txt", "b.txt"))
    assert unsound_objects(repo.git, [repo.tree, a, b], chunk=2) == []
    # b's file holds a's (valid, compressed) object: readable, but not what its name says.
    target = _object_file(repo.git, b)
    target.chmod(0o644)
    target.write_bytes(_object_file(repo.git, a).read_bytes())
    missing = "0" * 40
    assert unsound_objects(repo.git, [repo.tree, a, b, missing], chunk=2) == [b, missing]


def test_unsound_objects_remembers_sound_files_until_one_is_written(
    tmp_path: Path, make_repo: Callable[..., Repo], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With `known`, a loose file found sound is not read again while its inode, size and
    mtime stay; a file replaced or rewritten is hashed again (and found), and a `known` file
    that does not read costs only the reads."""
    from patchctl.gitlayer import objects

    repo = make_repo({f"f{i}.txt": b"%d\n" % i * 40 for i in range(4)})
    ids = [repo.git.rev_parse(f"{repo.tree}:f{i}.txt") for i in range(4)]
    known = tmp_path / "sound" / "stamp"
    reads: list[str] = []
    real = objects._sound_bytes

    def counted(raw: bytes, oid: str) -> bool:
        reads.append(oid)
        return real(raw, oid)

    monkeypatch.setattr(objects, "_sound_bytes", counted)
    assert unsound_objects(repo.git, ids, known=known) == [] and sorted(reads) == sorted(ids)
    assert len(known.read_text().splitlines()) == 4
    reads.clear()
    assert unsound_objects(repo.git, ids, known=known) == [] and reads == []
    # f1's file replaced (git's way: a new file renamed in) by f0's bytes; f2's rewritten
    # in place with garbage of the same size
    one, two = _object_file(repo.git, ids[1]), _object_file(repo.git, ids[2])
    size = two.stat().st_size
    one.unlink()
    one.write_bytes(_object_file(repo.git, ids[0]).read_bytes())
    two.chmod(0o644)
    stamp = two.stat().st_mtime_ns
    two.write_bytes(b"x" * size)
    os.utime(two, ns=(stamp + 1_000_000, stamp + 1_000_000))  # a coarse clock still moves
    assert unsound_objects(repo.git, ids, known=known) == ids[1:3]
    assert sorted(reads) == sorted(ids[1:3])
    # a damaged record: everything read again, nothing refused for it
    known.write_bytes(b"\xff garbage\n" + b"%s 1 2\n" % ids[3].encode())
    reads.clear()
    assert unsound_objects(repo.git, [ids[0], ids[3]], known=known) == []
    assert sorted(reads) == sorted([ids[0], ids[3]])


def test_read_patch_names_the_corrupt_line_and_changes_nothing(tmp_path: Path) -> None:
    with scratch_repo([]) as git:
        good = b"diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+y\n"
        assert git.read_patch(good) == (0, b"")
        code, err = git.read_patch(good.replace(b"@@ -1 +1 @@", b"@@ -1,2 +1,2 @@") + b"zz\n")
        assert code != 0 and b"corrupt patch at line 7" in err
        assert git.run("rev-list", "--all") == b""  # no object, no ref written


# ----------------------------------------------------------------------------- rebase plumbing


def test_commit_writer_writes_the_commit_commit_tree_writes(
    make_repo: Callable[..., Repo],
) -> None:
    repo = make_repo({"a.txt": b"one\n"})
    message = b"0001-x: title\n\nPatchctl-Id: 0001-x\n"
    with CommitWriter(repo.git) as writer:
        root = writer.commit(repo.tree, message)
        child = writer.commit(repo.tree, b"two\n", (root, repo.commit))
    assert root == repo.git.commit_tree(repo.tree, message)
    assert child == repo.git.commit_tree(repo.tree, b"two\n", (root, repo.commit))
    assert repo.git.cat_file("commit", child).count(b"\nparent ") == 2  # two parent lines
    with CommitWriter(repo.git) as writer, pytest.raises(ValueError):
        writer.commit("HEAD", b"x\n")  # only full ids reach the object


def test_tree_differ_gives_the_canonical_diff_of_each_pair(
    make_repo: Callable[..., Repo],
) -> None:
    lines = b"".join(b"line %d\n" % n for n in range(30))
    repo = make_repo({"src/f.c": lines, "src/g.bin": b"\0\1\2", "top.txt": b"t\n"})
    one = new_repo(repo.path, {"src/f.c": lines.replace(b"line 7\n", b"~line 7\n"), "src/n.c": b""})
    two = new_repo(repo.path, {"src/g.bin": b"\0\1\3\n~x\n", "top.txt": b"u\n"})
    pairs = [(repo.tree, one.tree), (one.tree, two.tree), (two.tree, two.tree)]
    pairs.append((repo.tree, two.tree))
    for root in (".", "src"):
        with TreeDiffer(repo.git, root) as differ:
            got = [differ.diff(a, b) for a, b in pairs]
        want = [repo.git.canonical_diff(a, b, root) for a, b in pairs]
        assert got == want
        assert got[2] == b"" and b"GIT binary patch" in got[1]
        assert (b"top.txt" in got[1]) == (root == ".")  # the root applies


def test_tree_differ_refuses_what_is_not_a_tree(make_repo: Callable[..., Repo]) -> None:
    repo = make_repo({"a.txt": b"one\n"})
    with TreeDiffer(repo.git) as differ, pytest.raises(ValueError):
        differ.diff("HEAD", repo.tree)  # only full ids reach git
    with TreeDiffer(repo.git) as differ, pytest.raises(GitFailed):
        differ.diff("0" * 40, repo.tree)  # git cannot read it: an error, not a hang


def test_merge_commits_is_the_cherry_pick_merge_trees_makes(
    make_repo: Callable[..., Repo],
) -> None:
    lines = b"".join(b"line %d\n" % n for n in range(30))
    repo = make_repo({"f.c": lines, "g.c": b"g\n"}, name="r")
    git = repo.git
    old_pre = repo.tree
    patched = new_repo(repo.path, {"f.c": lines.replace(b"line 20\n", b"line 20 patched\n")})
    upstream = new_repo(repo.path, {"f.c": b"new top\n" + lines, "g.c": b"g2\n"}).tree
    with CommitWriter(git) as writer:
        ours = writer.commit(upstream, b"side\n", (repo.commit,))
    merged = git.merge_commits(ours, patched.commit)
    expected = git.merge_trees(old_pre, upstream, patched.tree, ("onto-x", "0001-p"))
    assert merged.clean and merged.tree == expected.tree
    text = git.cat_file("blob", git.rev_parse(f"{merged.tree}:f.c"))
    assert text.startswith(b"new top\n") and b"line 20 patched\n" in text


def test_index_move_rewrites_only_what_differs(make_repo: Callable[..., Repo]) -> None:
    first = make_repo({"a": b"a\n", "d/b": b"b\n", "gone": b"x\n"}, name="m")
    second = new_repo(first.path, {"a": b"A\n", "d/c": b"c\n", "gone": None})
    with temp_index(first.git) as index:
        index.read_tree(first.tree)
        index.move(first.tree, second.tree)
        assert index.write_tree() == second.tree
        index.move(second.tree, second.tree)  # nothing to do
        assert index.write_tree() == second.tree


def test_raw_changes_lists_each_pair_in_order(make_repo: Callable[..., Repo]) -> None:
    first = make_repo({"a": b"a\n", "d/b": b"b\n"}, name="c")
    second = new_repo(first.path, {"a": b"A\n", "d/new": b"n\n"})
    changes = first.git.raw_changes(
        [(first.tree, second.tree), (first.tree, first.tree), (second.tree, first.tree)]
    )
    assert len(changes) == 3 and changes[1] == {}
    forward, back = changes[0], changes[2]
    blob = first.git.rev_parse(f"{second.tree}:d/new")
    assert forward[b"d/new"] == (None, ("100644", blob))
    assert back[b"d/new"] == (("100644", blob), None)
    assert set(forward) == {b"a", b"d/new"}


def test_switch_tree_keeps_untouched_files(make_repo: Callable[..., Repo]) -> None:
    first = make_repo({"keep": b"k\n", "change": b"1\n"}, name="s")
    second = new_repo(first.path, {"change": b"2\n"})
    first.git.read_tree(first.tree, reset=True, update=True)
    os.utime(first.path / "keep", ns=(1, 1))
    first.git.refresh_index()
    first.git.switch_tree(first.tree, second.tree)
    assert (first.path / "change").read_bytes() == b"2\n"
    assert os.stat(first.path / "keep").st_mtime_ns == 1  # not rewritten
    assert first.git.write_tree() == second.tree


def test_loose_missing_names_what_target_lacks(make_repo: Callable[..., Repo]) -> None:
    source = make_repo({"a": b"shared\n", "b": b"only here\n"}, name="src")
    target = make_repo({"a": b"shared\n"}, name="dst")
    shared = source.git.rev_parse(f"{source.tree}:a")
    only = source.git.rev_parse(f"{source.tree}:b")
    assert loose_missing(target.git, [shared, only]) == [only]


def test_unmerged_entries_and_intent_to_add_make_a_conflict_state(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r", {"a.c": b"base\n", "-odd name.c": b"x\n"})
    git = repo.git
    ours, theirs = git.write_blob(b"ours\n"), git.write_blob(b"theirs\n")
    base = git.entries_at(repo.tree, ["a.c", "-odd name.c", "missing.c"])
    assert set(base) == {"a.c", "-odd name.c"} and base["a.c"][0] == "100644"
    git.set_unmerged({"a.c": [(1, *base["a.c"]), (2, "100644", ours), (3, "100644", theirs)]})
    assert git.unmerged_paths() == ["a.c"]
    assert git.run("show", ":2:a.c") == b"ours\n" and git.run("show", ":3:a.c") == b"theirs\n"
    (tmp_path / "r" / "new [1].c").write_bytes(b"new\n")
    git.intent_to_add(["new [1].c"])  # a literal path: no glob, no pathspec magic
    assert b"+new" in git.run("diff", "--", "new [1].c")
    with pytest.raises(ValueError, match="merge stage"):
        git.set_unmerged({"a.c": [(4, "100644", ours)]})
    with pytest.raises(ValueError, match="object id"):
        git.set_unmerged({"a.c": [(2, "100644", "HEAD")]})


def test_objects_stored_later_get_the_ids_git_gives_and_a_wrong_one_is_refused(
    make_repo: Callable[..., Repo],
) -> None:
    """`commit_later` and `write_later` hand out the id before git answers; `settle` waits
    for git and refuses an id it did not give (the object is then not to be used)."""
    repo = make_repo({"a.txt": b"one\n"})
    with CommitWriter(repo.git) as writer:
        first = writer.commit_later(repo.tree, b"one\n")  # the first waits: it learns the hash
        later = [writer.commit_later(repo.tree, b"%d\n" % n, (first,)) for n in range(300)]
        writer.settle()
        for n in (0, 150, 299):
            assert later[n] == repo.git.commit_tree(repo.tree, b"%d\n" % n, (first,))
            assert repo.git.cat_file("commit", later[n])
        writer._hash = hashlib.sha256  # what a wrong local hash would give
        writer.commit_later(repo.tree, b"wrong\n")
        with pytest.raises(GitFailed, match="expected"):
            writer.settle()
    with TreeWriter(repo.git) as trees:
        entries = {b"a.txt": ("100644", repo.git.rev_parse(f"{repo.tree}:a.txt"))}
        assert trees.write(entries) == repo.tree
        assert trees.write_later({**entries, b"b": ("100644", entries[b"a.txt"][1])}) != repo.tree
        trees.settle()


def test_unsound_objects_checks_loose_files_and_packed_objects(
    make_repo: Callable[..., Repo],
) -> None:
    """Loose objects are inflated and hashed from their files (a damaged stream, bytes after
    its end, a size the header does not give: each found); packed ones through cat-file."""
    repo = make_repo({f"f{i}.txt": b"%d\n" % i * 50 for i in range(7)})
    ids = [repo.git.rev_parse(f"{repo.tree}:f{i}.txt") for i in range(7)]
    assert unsound_objects(repo.git, ids) == []
    files = [_object_file(repo.git, oid) for oid in ids]
    for path in files:
        path.chmod(0o644)
    raw = [zlib.decompress(path.read_bytes()) for path in files]
    files[0].write_bytes(files[0].read_bytes()[:-6])  # the stream cut short
    files[1].write_bytes(files[1].read_bytes() + b"x")  # something after its end
    files[2].write_bytes(zlib.compress(raw[2] + b"more"))  # longer than its header says
    files[3].write_bytes(zlib.compress(raw[3].replace(b"blob", b"tree", 1)))  # another type
    files[4].write_bytes(b"not zlib at all")
    assert unsound_objects(repo.git, ids) == ids[:5]
    # A packed object (no loose file) is still read and hashed, through cat-file.
    packed = make_repo({"p.txt": b"p\n"})
    packed.git.run("repack", "-a", "-d", "-q")
    blob = packed.git.rev_parse(f"{packed.tree}:p.txt")
    assert unsound_objects(packed.git, [packed.tree, blob, "1" * 40]) == ["1" * 40]
