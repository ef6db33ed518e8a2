"""Objects shared between repositories: loose objects hard-linked from one repository into
another (`share_objects`), checked by hashing them (`unsound_objects`), and throwaway bare
repositories that read objects through alternates (`scratch_repo`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from patchctl.errors import NotFound, PatchctlError
from patchctl.gitlayer.batch import read_record
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.pipes import Pipe
from patchctl.gitlayer.runner import OBJECT_ID, object_id, temp_prefix


def objects_dir(source: Path) -> Path:
    """The object directory of a repository given as work tree, git dir or objects dir."""
    for candidate in (source / ".git" / "objects", source / "objects", source):
        if (candidate / "info").is_dir() or (candidate / "pack").is_dir():
            return candidate.resolve()
    raise NotFound(f"{source} is not a git repository", hint="run patchctl cleanroom apply first")


def share_objects(
    source: Git, target: Git, oids: Iterable[str] | None = None, *, replace: bool = False
) -> set[str]:
    """Give `target` the loose objects of `source` (`oids`, or all of them) as hard links.

    A loose object is an immutable file named by its id: git writes a new object to a
    temporary file and renames it into place, and never writes to an existing one, so two
    repositories can share the file (removing it from one, as gc does, unlinks only that
    name). Where a link cannot be made (another file system) the file is copied to a
    temporary name and renamed, so a concurrent reader never sees half an object. Objects
    `target` already has as loose files are skipped, unless `replace` (the caller trusts
    `source`'s copies over `target`'s: a damaged object in `target` is mended). Returns the
    ids asked for that `source` does not hold as loose files (packed ones: the caller
    fetches those instead).
    """
    src, dst = objects_dir(source.git_dir()), objects_dir(target.git_dir())
    wanted = _loose_ids(src) if oids is None else {object_id(o) for o in oids}
    missing: set[str] = set()
    fans: set[str] = set()
    for oid in sorted(wanted):
        fan, rest = oid[:2], oid[2:]
        if fan not in fans:
            os.makedirs(dst / fan, exist_ok=True)
            fans.add(fan)
        source_name, target_name = f"{src}/{fan}/{rest}", f"{dst}/{fan}/{rest}"
        try:
            os.link(source_name, target_name)  # the common case: one system call
            continue
        except FileNotFoundError:
            if replace or not os.path.isfile(target_name):
                missing.add(oid)  # not a loose object of `source`
            continue
        except FileExistsError:
            if not replace:
                continue
        except OSError:
            pass  # another file system: copied below
        if os.path.isfile(source_name):
            _link_or_copy(Path(source_name), Path(target_name))
        else:
            missing.add(oid)
    return missing


def loose_missing(target: Git, oids: Iterable[str]) -> list[str]:
    """The ids among `oids` that `target` does not hold as loose object files, in order (an
    object it holds only packed counts as missing): what `share_objects` would give it."""
    dst = objects_dir(target.git_dir())
    return [o for o in oids if not os.path.isfile(f"{dst}/{o[:2]}/{o[2:]}")]


def _loose_ids(objects: Path) -> set[str]:
    found: set[str] = set()
    for fan in os.listdir(objects):
        if len(fan) == 2 and (objects / fan).is_dir():
            found.update(fan + name for name in os.listdir(objects / fan))
    return {oid for oid in found if OBJECT_ID.fullmatch(oid)}


def _link_or_copy(source: Path, target: Path) -> None:
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    os.replace(tmp, target)


@contextmanager
def scratch_repo(sources: Sequence[Path]) -> Iterator[Git]:
    """A temporary bare repository that reads objects from `sources` (via alternates).

    Bare and empty, it reads no .gitattributes: diffs made here (capture and verify's
    re-export alike) never depend on a work tree's `diff=`/`-diff`/`binary` attributes.
    Its own index files (`Index(git, git.repo / "<name>.index")`) die with it.
    """
    with tempfile.TemporaryDirectory(prefix=temp_prefix("scratch")) as tmp:
        git = Git.init(Path(tmp) / "scratch.git", bare=True)
        # A throwaway repository: nothing in it needs to survive a crash, so no fsync.
        with (git.repo / "config").open("a", encoding="utf-8") as config:
            # index v4 (prefix-compressed paths) makes each apply/write-tree read less.
            config.write("[core]\n\tfsync = none\n[index]\n\tversion = 4\n")
        found = [objects_dir(s) for s in sources]
        if any("\n" in str(f) or "\r" in str(f) for f in found):
            raise PatchctlError("an object directory path contains a line break; not using it")
        alternates = "".join(f"{f}\n" for f in found)
        (git.repo / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (git.repo / "objects" / "info" / "alternates").write_text(alternates)
        yield git


def unsound_objects(
    git: Git, oids: Sequence[str], chunk: int = 256, *, known: Path | None = None
) -> list[str]:
    """The ids among `oids` that `git` lacks, or whose bytes do not hash to the id.

    Every object is read and hashed as git names it: `<type> <size>\\0<bytes>`. A loose
    object file is read and inflated here (its inflated bytes are exactly what the id hashes,
    header included; the stream must end where the header's size says); the others (packed,
    or absent) are read through `cat-file --batch`, `chunk` ids at a time, so neither pipe
    can fill while the other waits. Order is kept.

    `known` (a file of the caller's, e.g. beside a cache) remembers the loose files found
    sound, each by its identity (inode, size, modification time in ns, as read): a file
    still so is not read again, and the sound ones are added to it (written whole, by a
    rename). git never writes to an object file in place (it writes a new file and renames
    it), so any rewrite, truncation or replacement of a file changes its identity and gets
    it hashed again; a damaged `known` file only costs the reads it would have saved.
    """
    objects = objects_dir(git.git_dir())
    seen = _read_known(known) if known is not None else {}
    verdicts: dict[str, bool | None] = {}
    sound: dict[str, tuple[int, int, int]] = {}
    for oid in oids:
        name = object_id(oid)
        if name in verdicts:
            continue
        found, identity = _loose_check(objects, name, seen.get(name))
        verdicts[name] = found
        if found and identity is not None:
            sound[name] = identity
    rest = [oid for oid, verdict in verdicts.items() if verdict is None]
    bad = set(_unsound_read(git, rest, chunk)) if rest else set()
    if known is not None and any(seen.get(o) != i for o, i in sound.items()):
        _write_known(known, {**seen, **sound})
    return [oid for oid in oids if verdicts[object_id(oid)] is False or object_id(oid) in bad]


def _read_known(path: Path) -> dict[str, tuple[int, int, int]]:
    """The identities `known` holds (`<id> <inode> <size> <mtime ns>` lines; a line that
    does not read so is passed over, a missing or unreadable file is empty)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return {}
    found: dict[str, tuple[int, int, int]] = {}
    for line in raw.decode("ascii", "replace").splitlines():
        parts = line.split(" ")
        if len(parts) != 4 or not OBJECT_ID.fullmatch(parts[0]):
            continue
        if all(p.isdigit() for p in parts[1:]):
            found[parts[0]] = (int(parts[1]), int(parts[2]), int(parts[3]))
    return found


def _write_known(path: Path, entries: dict[str, tuple[int, int, int]]) -> None:
    """`entries` as the file `path`, replaced whole (a cache that cannot be written is left
    as it is: the objects are hashed again next time)."""
    text = "".join(f"{o} {i} {s} {m}\n" for o, (i, s, m) in sorted(entries.items()))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="ascii")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


# The longest loose-object header git writes: `commit <20 digits>\0`.
HEADER_MAX = 32
KINDS = (b"blob", b"tree", b"commit", b"tag")


def _loose_check(
    objects: Path, oid: str, known: tuple[int, int, int] | None = None
) -> tuple[bool | None, tuple[int, int, int] | None]:
    """Whether the loose object file of `oid` holds an object that hashes to `oid` (None
    when there is no such file: the object may be packed), and the identity of the file
    read (inode, size, mtime ns). A file whose identity is `known` is not read again."""
    try:
        with open(f"{objects}/{oid[:2]}/{oid[2:]}", "rb") as handle:
            info = os.fstat(handle.fileno())
            identity = (info.st_ino, info.st_size, info.st_mtime_ns)
            if known is not None and identity == known:
                return True, identity
            raw = handle.read()
    except FileNotFoundError:
        return None, None
    except OSError:
        return False, None
    return _sound_bytes(raw, oid), identity


def _sound_bytes(raw: bytes, oid: str) -> bool:
    """Whether `raw`, a loose object file's bytes, holds an object that hashes to `oid`."""
    inflate = zlib.decompressobj()
    try:
        head = inflate.decompress(raw, HEADER_MAX)
        nul = head.find(b"\0")
        kind, _space, size_text = head[: max(nul, 0)].partition(b" ")
        if nul < 0 or kind not in KINDS or not size_text.isdigit():
            return False
        size = int(size_text)
        body = head[nul + 1 :]
        body += inflate.decompress(inflate.unconsumed_tail, size - len(body) + 1)
    except zlib.error:
        return False
    if len(body) != size or not inflate.eof or inflate.unconsumed_tail or inflate.unused_data:
        return False
    digest = (hashlib.sha1 if len(oid) == 40 else hashlib.sha256)(head[: nul + 1])
    digest.update(body)
    return digest.hexdigest() == oid


def _unsound_read(git: Git, oids: Sequence[str], chunk: int) -> list[str]:
    """`unsound_objects` for objects read through one `cat-file --batch`."""
    pipe = Pipe(git, "cat-file", "--batch")
    bad = []
    try:
        for start in range(0, len(oids), chunk):
            batch = [object_id(o) for o in oids[start : start + chunk]]
            pipe.ask("".join(f"{o}\n" for o in batch).encode("ascii"))
            for oid in batch:
                found = read_record(pipe.line, pipe.exactly)
                if found is None:
                    bad.append(oid)  # "<oid> missing"
                    continue
                kind, data = found
                digest = (hashlib.sha1 if len(oid) == 40 else hashlib.sha256)(kind)
                digest.update(b" %d\0" % len(data))
                digest.update(data)  # not joined first: no copy of each object's bytes
                if digest.hexdigest() != oid:
                    bad.append(oid)
    finally:
        pipe.close()
    return bad
