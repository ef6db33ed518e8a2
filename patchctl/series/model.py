"""The series file (patches/<series>/series.yaml): frozen dataclasses, validated once on load.

Errors name the file, the key and the fix (ConfigError, exit 5); a patch file that is listed
but missing is NotFound (exit 15). `save_series` writes the file back in the documented key
order (keys a hand-edited file had keep their position), so it stays readable and diffable.

The file may come from someone else (a shared repository), so loading is bounded: a size
limit, no YAML aliases or merge keys (an alias bomb fails at its first `*`), a nesting limit,
duplicate keys refused at any level, and every value checked against the allow-lists of
`patchctl.allowlists` (URLs, paths, names, ids, one-line text).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.scanner import ScannerError

from patchctl import allowlists
from patchctl.errors import ConfigError, NotFound
from patchctl.fsio import write_if_changed
from patchctl.limits import PATCH_BYTES, SERIES_BYTES, human, read_bounded

SERIES_FILE = "series.yaml"
SCHEMA_VERSION = 1
UPSTREAM_KINDS = ("pypi-sdist", "git", "archive")
MAX_DEPTH = 20  # YAML nesting; the schema needs 4
MAX_MESSAGE = 200  # characters of a YAML library message kept in an error
# Names in the series directory that patchctl writes itself: never a patch file.
RESERVED_FILES = frozenset({SERIES_FILE, "readme.md"})
# `extends.series`: the name of a sibling series directory (no separator, no `.`/`..`).
SERIES_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")

UPSTREAM_KEYS = ("kind", "url", "path", "package", "version", "sha256", "subdir", "tree", "commit")
PATCH_KEYS = (
    "id",
    "file",
    "title",
    "description",
    "upstream_status",
    "origin",
    "markers",
    "pre_tree",
    "post_tree",
    "imported",
    "sha256",
)
SERIES_KEYS = ("version", "upstream", "extends", "root", "patches")
EXTENDS_KEYS = ("series", "root")
# Which upstream keys each kind requires / allows.
KIND_REQUIRED: dict[str, tuple[str, ...]] = {
    "pypi-sdist": ("package", "version", "sha256"),
    "git": ("url", "commit"),
    "archive": ("sha256",),  # and exactly one of path / url (an https URL)
}
KIND_ALLOWED: dict[str, tuple[str, ...]] = {
    "pypi-sdist": ("kind", "package", "version", "sha256", "subdir", "tree", "commit"),
    "git": ("kind", "url", "commit", "subdir", "tree"),
    "archive": ("kind", "path", "url", "sha256", "subdir", "tree", "commit"),
}


@dataclass(frozen=True)
class Upstream:
    """The pinned upstream tree the series applies to."""

    kind: str
    package: str | None = None
    version: str | None = None
    sha256: str | None = None
    subdir: str | None = None
    tree: str | None = None
    commit: str | None = None
    url: str | None = None
    path: str | None = None
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def describe(self) -> str:
        """A short human description, e.g. `pypi-sdist llama-cpp-python==0.3.36`."""
        if self.kind == "pypi-sdist":
            what = f"{self.package}=={self.version}"
        elif self.kind == "git":
            what = f"{allowlists.redacted(self.url or '')}@{(self.commit or '')[:12]}"
        else:
            what = allowlists.redacted(str(self.path or self.url))
        sub = f" [{self.subdir}]" if self.subdir else ""
        return f"{self.kind} {what}{sub}"


@dataclass(frozen=True)
class Extends:
    """`extends:`: another series of the same project whose patches come first in this
    series' stack, applied under `root` (where that series' upstream tree lies in this one's).
    Stack semantics (loading the other series, checks, the combined stack): stack.py."""

    series: str  # a sibling directory of this series' directory, e.g. `llamafile`
    root: str  # a relative directory of this series' upstream tree, e.g. `vendor/llama.cpp`
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Patch:
    """One entry of the series."""

    id: str
    file: str
    title: str = ""
    # The body of the patch header (why the change is made), between the subject and the trailers.
    description: str = ""
    upstream_status: str | None = None
    origin: str | None = None
    markers: tuple[str, ...] = ()
    pre_tree: str | None = None
    post_tree: str | None = None
    imported: bool = False
    sha256: str | None = None  # imported patches: sha256 of the kept bytes, checked by verify
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class Series:
    """A validated series: where it lives, its upstream pin, its ordered patches."""

    path: Path
    upstream: Upstream
    patches: tuple[Patch, ...] = ()
    root: str = "."
    version: int = SCHEMA_VERSION
    key_order: tuple[str, ...] = field(default=(), compare=False, repr=False)
    extends: Extends | None = None
    # The leading comment block of the file, kept on save (other comments are not).
    header: str = field(default="", compare=False, repr=False)

    @property
    def dir(self) -> Path:
        """The series directory (patch files are relative to it)."""
        return self.path.parent

    @property
    def name(self) -> str:
        """The series name: its directory's name (e.g. `llamafile`)."""
        return self.dir.name

    def ids(self) -> tuple[str, ...]:
        """The patch ids in order."""
        return tuple(p.id for p in self.patches)

    def index(self, patch_id: str) -> int:
        """The position of `patch_id` in the series (NotFound if absent)."""
        for i, patch in enumerate(self.patches):
            if patch.id == patch_id:
                return i
        raise NotFound(
            f"no patch with id {patch_id!r} in {self.path}",
            hint=f"known ids: {', '.join(self.ids()) or '(none)'}",
        )

    def patch(self, patch_id: str) -> Patch:
        """The patch with id `patch_id` (NotFound if absent)."""
        return self.patches[self.index(patch_id)]

    def patch_path(self, patch: Patch | str) -> Path:
        """The patch file on disk."""
        entry = self.patch(patch) if isinstance(patch, str) else patch
        return self.dir / entry.file

    def upto(self, patch_id: str | None) -> tuple[Patch, ...]:
        """The patches up to and including `patch_id` (all when None)."""
        if patch_id is None:
            return self.patches
        return self.patches[: self.index(patch_id) + 1]

    def with_patch(self, patch: Patch) -> Series:
        """A copy with `patch` replacing the entry of the same id, or appended."""
        if patch.id in self.ids():
            patches = tuple(patch if p.id == patch.id else p for p in self.patches)
        else:
            patches = (*self.patches, patch)
        return replace(self, patches=patches)

    def without_patch(self, patch_id: str) -> Series:
        """A copy without the entry `patch_id` (NotFound if absent)."""
        self.index(patch_id)
        return replace(self, patches=tuple(p for p in self.patches if p.id != patch_id))

    def with_patches(self, patches: Iterable[Patch]) -> Series:
        """A copy with the patch list replaced."""
        return replace(self, patches=tuple(patches))

    def with_upstream(self, upstream: Upstream) -> Series:
        """A copy with another upstream pin."""
        return replace(self, upstream=upstream)


# ----------------------------------------------------------------------------- loading


def series_file(dir_or_file: Path) -> Path:
    """`dir/series.yaml` for a directory, the path itself for a file."""
    return dir_or_file / SERIES_FILE if dir_or_file.is_dir() else dir_or_file


def series_dir(dir_or_file: Path) -> Path:
    """The series directory `--series` names: the directory itself, or the one holding the
    series file (an existing file, or any path whose name is series.yaml)."""
    path = Path(dir_or_file)
    if path.is_dir() or (path.name != SERIES_FILE and not path.is_file()):
        return path
    return path.parent


def load_series(dir_or_file: Path, *, check_files: bool = True) -> Series:
    """Read and validate a series; `check_files` also requires every patch file to exist."""
    path = series_file(Path(dir_or_file))
    if not path.exists():  # nothing there (or a dangling link)
        raise NotFound(f"no series file at {path}", hint="pass --series DIR")
    raw = read_bounded(path, SERIES_BYTES, "series file")  # a fifo, device, dir: refused
    series = replace(_series_from(_parse_yaml(raw, path), path), header=_header(raw))
    _check_locations(series)
    if check_files:
        _check_files(series)
    return series


def read_patch_file(path: Path) -> bytes:
    """A patch file's bytes, within PATCHCTL_MAX_PATCH_BYTES (load_series checked its size,
    but it may have changed since); an error that names the file when it cannot be read."""
    return read_bounded(path, PATCH_BYTES, "patch file")


def check_patch_size(patch: Patch, data: bytes) -> None:
    """ConfigError (exit 5) when patch bytes about to be written are over
    PATCHCTL_MAX_PATCH_BYTES: every later command would refuse to read the file."""
    limit = PATCH_BYTES.value()
    if len(data) > limit:
        raise ConfigError(
            f"patch {patch.id} would be {human(len(data))}, more than a patch file may hold "
            f"({human(limit)}); nothing was written",
            key=PATCH_BYTES.env,
            hint="leave build output and large generated files out of the clean room's "
            f"changes; {PATCH_BYTES.hint(len(data))}",
        )


def _header(raw: bytes) -> str:
    lines = []
    for line in raw.decode("utf-8", "replace").splitlines(keepends=True):
        if not line.startswith("#"):
            break
        lines.append(line)
    return "".join(lines)


class _Loader(yaml.SafeLoader):
    """yaml.SafeLoader without aliases or merge keys, refusing duplicate keys at any level and
    nesting deeper than MAX_DEPTH: a hostile file fails at its first offending token, so an
    alias bomb costs no memory."""

    def __init__(self, stream: bytes) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self._mark()
            raise ComposerError(None, None, "aliases (*name) are not allowed", mark)
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self._mark()
                raise ComposerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        # Checked in the scanner too: its look-ahead over deep `[[[[...` costs O(depth^2).
        if self.flow_level >= MAX_DEPTH:
            mark = self.get_mark()
            raise ScannerError(None, None, f"nested deeper than {MAX_DEPTH} levels", mark)
        super().fetch_flow_collection_start(token_class)

    def _mark(self) -> Any:
        return self.peek_event().start_mark  # type: ignore[no-untyped-call]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _value in node.value:
            mark = key_node.start_mark
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConstructorError(None, None, "merge keys (<<) are not allowed", mark)
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise ConstructorError(None, None, "a mapping key must be a scalar", mark) from None
            if duplicate:
                raise ConstructorError(None, None, f"duplicate key {allowlists.shown(key)}", mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _parse_yaml(raw: bytes, path: Path) -> dict[str, Any]:
    try:
        loader = _Loader(raw)  # the reader checks the encoding and characters here
        try:
            data = loader.get_single_data()
        finally:
            loader.dispose()
    except yaml.YAMLError as exc:
        raise _yaml_error(exc, path) from None
    if not isinstance(data, dict):
        raise ConfigError("top level must be a mapping", path=path, hint="see docs/architecture.md")
    return data


def _yaml_error(exc: yaml.YAMLError, path: Path) -> ConfigError:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    problem = str(getattr(exc, "problem", None) or exc or "invalid YAML")
    problem = " ".join(problem.split())
    if len(problem) > MAX_MESSAGE:
        problem = problem[: MAX_MESSAGE - 3] + "..."
    return ConfigError(
        f"malformed YAML{where}: {allowlists.printable(problem)}",
        path=path,
        hint="fix the YAML (series.yaml allows no aliases, merge keys or duplicate keys)",
    )


def _series_from(data: dict[str, Any], path: Path) -> Series:
    _reject_unknown(data, SERIES_KEYS, path, "")
    version = data.get("version")
    if version != SCHEMA_VERSION or isinstance(version, bool):
        raise ConfigError(
            f"unsupported value {allowlists.shown(version)}",
            path=path,
            key="version",
            hint="use version: 1",
        )
    upstream = _upstream_from(data.get("upstream"), path)
    root = _root_from(data.get("root", "."), path)
    patches = _patches_from(data.get("patches", []), path)
    extends = _extends_from(data.get("extends"), path) if "extends" in data else None
    return Series(path, upstream, patches, root, SCHEMA_VERSION, tuple(data), extends)


def _reject_unknown(data: Mapping[Any, Any], allowed: Iterable[str], path: Path, at: str) -> None:
    allowed = tuple(allowed)
    for key in data:
        if key not in allowed:
            name = key if isinstance(key, str) and len(key) <= 40 else allowlists.shown(key, 40)
            raise ConfigError(
                "unknown key",
                path=path,
                key=allowlists.printable(f"{at}{name}"),
                hint=f"allowed keys here: {', '.join(allowed)}",
            )


# Which rule checks each string key, and the fix its error suggests.
Rule = Callable[[str], str | None]
OBJECT_ID = (allowlists.object_id_problem, "use the full 40-hex lowercase object id")
RULES: dict[str, tuple[Rule, str]] = {
    "url": (
        allowlists.git_url_problem,
        "use an https/http/ssh/git/file URL, user@host:path or a path",
    ),
    "path": (lambda v: _archive_path_problem(v), "use the path of a .tar.* or .zip file"),
    "package": (allowlists.package_problem, "use the distribution name, e.g. llama-cpp-python"),
    "version": (allowlists.version_problem, "use a PEP 440 version, e.g. 0.3.36 (quote it)"),
    "sha256": (allowlists.sha256_problem, "use the 64-hex lowercase sha256 of the file"),
    "subdir": (
        allowlists.relpath_problem,
        "use a relative path without '..', e.g. vendor/llama.cpp",
    ),
    "tree": OBJECT_ID,
    "commit": OBJECT_ID,
    "pre_tree": OBJECT_ID,
    "post_tree": OBJECT_ID,
    "id": (allowlists.patch_id_problem, "use NNNN-slug, e.g. 0078-dca"),
    "file": (
        allowlists.patch_file_problem,
        "use a relative NAME.patch inside the series directory",
    ),
    "title": (allowlists.text_problem, "use one line of plain text"),
    "upstream_status": (allowlists.text_problem, "use one line, e.g. Pending"),
    "origin": (allowlists.text_problem, "use one line, e.g. a URL or patchctl"),
}


def check_typed_upstream(upstream: Upstream) -> None:
    """ConfigError (exit 5) for an upstream typed on the command line (`init`, `rebase
    --onto`) whose values series.yaml would refuse: the same allow-list (RULES), applied
    before anything is fetched or read."""
    for key in ("url", "path", "package", "version", "subdir"):
        value = getattr(upstream, key)
        if value is None:
            continue
        rule, fix = RULES[key]
        problem = rule(value)
        if problem is not None:
            shown = allowlists.shown(value)
            raise ConfigError(f"{shown} {problem}", key=f"upstream {key}", hint=fix)


def _archive_path_problem(value: str) -> str | None:
    problem = allowlists.text_problem(value, allowlists.MAX_PATH)
    if problem is not None:
        return problem
    if value.startswith("-"):
        return "must not start with '-'"
    if not allowlists.is_archive(Path(value)):
        return "is not a .tar.* or .zip file name"
    return None


def _string(value: Any, path: Path, key: str, *, empty: bool = False) -> str:
    """A string value checked by the rule of its key name (RULES)."""
    if not isinstance(value, str) or (not value and not empty):
        hint = "quote it" if isinstance(value, (int, float)) else "give a non-empty string"
        raise ConfigError(
            f"expected a string, got {allowlists.shown(value)}", path=path, key=key, hint=hint
        )
    rule = RULES.get(key.rsplit(".", 1)[-1])
    if rule is not None:
        problem = rule[0](value)
        if problem is not None:
            shown = allowlists.shown(value)
            raise ConfigError(f"{shown} {problem}", path=path, key=key, hint=rule[1])
    return value


def _optional(value: Any, path: Path, key: str) -> str | None:
    return None if value is None else _string(value, path, key)


def _upstream_from(raw: Any, path: Path) -> Upstream:
    if not isinstance(raw, dict):
        raise ConfigError("missing or not a mapping", path=path, key="upstream", hint="see docs")
    kind = raw.get("kind")
    if not isinstance(kind, str) or kind not in UPSTREAM_KINDS:
        raise ConfigError(
            f"unknown kind {allowlists.shown(kind)}",
            path=path,
            key="upstream.kind",
            hint=f"use one of: {', '.join(UPSTREAM_KINDS)}",
        )
    _reject_unknown(raw, KIND_ALLOWED[kind], path, "upstream.")
    for key in KIND_REQUIRED[kind]:
        if raw.get(key) is None:
            raise ConfigError(
                f"required for kind {kind}", path=path, key=f"upstream.{key}", hint="add it"
            )
    if kind == "archive":
        _check_archive_source(raw, path)
    return _build_upstream(raw, kind, path)


def _check_archive_source(raw: dict[str, Any], path: Path) -> None:
    """An archive is a local `path` or an https `url` (downloaded, checked against sha256)."""
    if (raw.get("path") is None) == (raw.get("url") is None):
        raise ConfigError(
            "an archive needs exactly one of path and url",
            path=path,
            key="upstream.path",
            hint="give the archive's local path, or its https:// URL",
        )
    url = raw.get("url")
    if url is not None and not (isinstance(url, str) and url.startswith("https://")):
        raise ConfigError(
            f"{url!r} is not an https:// URL",
            path=path,
            key="upstream.url",
            hint="archives are downloaded over https only",
        )


def _build_upstream(raw: dict[str, Any], kind: str, path: Path) -> Upstream:
    def get(key: str) -> str | None:
        return _optional(raw.get(key), path, f"upstream.{key}")

    return Upstream(
        kind=kind,
        package=get("package"),
        version=get("version"),
        sha256=get("sha256"),
        subdir=get("subdir"),
        tree=get("tree"),
        commit=get("commit"),
        url=get("url"),
        path=get("path"),
        key_order=tuple(raw),
    )


def _root_from(raw: Any, path: Path, key: str = "root", *, no_slash: bool = False) -> str:
    """A directory of the upstream tree ('.' for all of it); `no_slash`: without a trailing
    '/' (extends.root, compared with tree paths as written)."""
    root = _string(raw, path, key)
    problem = allowlists.root_problem(root)
    if problem is None and no_slash and root.endswith("/"):
        problem = "ends with '/'"
    if problem is not None:
        raise ConfigError(
            f"{allowlists.shown(root)} {problem}",
            path=path,
            key=key,
            hint="use . or a relative path inside the upstream tree, without '..'",
        )
    return root


def _extends_from(raw: Any, path: Path) -> Extends:
    """`extends: {series: NAME, root: DIR}`; NAME is a sibling series directory (never a path,
    so it cannot leave the directory holding the series), DIR a relative path without `..`."""
    if not isinstance(raw, dict):
        raise ConfigError(
            "must be a mapping",
            path=path,
            key="extends",
            hint="use `extends: {series: llamafile, root: vendor/llama.cpp}`",
        )
    _reject_unknown(raw, EXTENDS_KEYS, path, "extends.")
    for key in EXTENDS_KEYS:
        if raw.get(key) is None:
            raise ConfigError("required", path=path, key=f"extends.{key}", hint="add it")
    name = _string(raw["series"], path, "extends.series")
    if not SERIES_NAME.fullmatch(name) or name in (".", ".."):
        raise ConfigError(
            f"{allowlists.shown(name)} is not the name of a series directory",
            path=path,
            key="extends.series",
            hint="name a sibling series directory, e.g. `llamafile` (no path separators)",
        )
    if name == path.parent.name:
        raise ConfigError(
            "a series cannot extend itself", path=path, key="extends.series", hint="remove it"
        )
    root = _root_from(raw["root"], path, "extends.root", no_slash=True)
    return Extends(series=name, root=root, key_order=tuple(raw))


def _patches_from(raw: Any, path: Path) -> tuple[Patch, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("must be a list", path=path, key="patches", hint="use '- id: ...' items")
    patches = tuple(_patch_from(item, path, i) for i, item in enumerate(raw))
    _check_unique(patches, path)
    return patches


def _patch_from(raw: Any, path: Path, i: int) -> Patch:
    at = f"patches[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError("must be a mapping", path=path, key=at, hint="use '- id: ...'")
    _reject_unknown(raw, PATCH_KEYS, path, f"{at}.")
    for key in ("id", "file"):
        if raw.get(key) is None:
            raise ConfigError("required", path=path, key=f"{at}.{key}", hint="add it")

    def get(key: str) -> str | None:
        return _optional(raw.get(key), path, f"{at}.{key}")

    return Patch(
        id=_string(raw["id"], path, f"{at}.id"),
        file=_patch_file(_string(raw["file"], path, f"{at}.file"), path, f"{at}.file"),
        title=_title(raw.get("title"), path, f"{at}.title"),
        description=_description(raw.get("description"), path, f"{at}.description"),
        upstream_status=get("upstream_status"),
        origin=get("origin"),
        markers=_markers(raw.get("markers"), path, f"{at}.markers"),
        pre_tree=get("pre_tree"),
        post_tree=get("post_tree"),
        imported=_bool(raw.get("imported", False), path, f"{at}.imported"),
        sha256=get("sha256"),
        key_order=tuple(raw),
    )


def _patch_file(value: str, path: Path, key: str) -> str:
    if value.lower() in RESERVED_FILES:
        raise ConfigError(
            f"{allowlists.shown(value)} is a file patchctl generates",
            path=path,
            key=key,
            hint="use NNNN-slug.patch",
        )
    return value


def _title(raw: Any, path: Path, key: str) -> str:
    if raw is None:
        return ""
    return _string(raw, path, key, empty=True)


def _description(raw: Any, path: Path, key: str) -> str:
    if raw is None:
        return ""
    if not isinstance(raw, str):
        raise ConfigError(
            f"expected text, got {allowlists.shown(raw)}",
            path=path,
            key=key,
            hint="use a `|` block",
        )
    problem = allowlists.description_problem(raw)
    if problem is not None:
        raise ConfigError(problem, path=path, key=key, hint=allowlists.DESCRIPTION_FIX)
    return raw.strip("\n")


def _markers(raw: Any, path: Path, key: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(m, str) for m in raw):
        raise ConfigError(
            "must be a list of non-empty strings", path=path, key=key, hint='e.g. ["// patchctl"]'
        )
    for n, marker in enumerate(raw):
        problem = allowlists.marker_problem(marker)
        if problem is not None:
            raise ConfigError(
                f"{allowlists.shown(marker)} {problem}",
                path=path,
                key=f"{key}[{n}]",
                hint="a marker is one non-blank line, e.g. // patchctl 0079-fix",
            )
    return tuple(raw)


def _bool(raw: Any, path: Path, key: str) -> bool:
    if not isinstance(raw, bool):
        raise ConfigError(
            f"expected true or false, got {allowlists.shown(raw)}",
            path=path,
            key=key,
            hint="use true or false",
        )
    return raw


def _check_unique(patches: tuple[Patch, ...], path: Path) -> None:
    seen: dict[str, int] = {}
    files: dict[str, int] = {}
    for i, patch in enumerate(patches):
        pid = folded(patch.id)
        if pid in seen:
            raise ConfigError(
                f"duplicate id {patch.id!r} (also patches[{seen[pid]}])",
                path=path,
                key=f"patches[{i}].id",
                hint="give every patch a unique id (ids differing only in case are one)",
            )
        name = folded(patch.file)
        if name in files:
            raise ConfigError(
                f"duplicate file {patch.file!r} (also patches[{files[name]}])",
                path=path,
                key=f"patches[{i}].file",
                hint="give every patch its own file",
            )
        seen[pid] = i
        files[name] = i


def folded(name: str) -> str:
    """`name` as a case-insensitive, normalizing file system compares it: two names that
    differ only in case, or in Unicode normalization (NFC and NFD), are one file on macOS
    and Windows (an id names its patch file, its commit trailer and export file)."""
    return unicodedata.normalize("NFC", name).casefold()


def _check_locations(series: Series) -> None:
    """Every patch file resolves inside the series directory (no symlink leads out of it)."""
    top = series.dir.resolve()
    for i, patch in enumerate(series.patches):
        where = series.dir / patch.file
        if not where.resolve().is_relative_to(top):
            raise ConfigError(
                f"{patch.file} resolves to {where.resolve()}, outside the series directory",
                path=series.path,
                key=f"patches[{i}].file",
                hint="patch files live inside the series directory; remove the symlink",
            )
        if where.is_dir():
            raise ConfigError(
                f"{patch.file} is a directory",
                path=series.path,
                key=f"patches[{i}].file",
                hint="name the patch file itself",
            )


def _check_files(series: Series) -> None:
    limit = PATCH_BYTES.value()
    for i, patch in enumerate(series.patches):
        where = series.patch_path(patch)
        if not where.is_file():
            raise NotFound(
                f"{series.path}: patches[{i}].file: {patch.file} does not exist",
                hint=f"create {where} or remove the entry",
            )
        if where.stat().st_size > limit:
            raise ConfigError(
                f"{patch.file} is larger than {human(limit)}",
                path=series.path,
                key=f"patches[{i}].file",
                hint=PATCH_BYTES.hint(),
            )


# ----------------------------------------------------------------------------- saving


class _Dumper(yaml.SafeDumper):
    """Indents block sequences under their key (`patches:\\n  - id: ...`)."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)

    def ignore_aliases(self, data: Any) -> bool:
        return True  # the loader refuses aliases: never write one


class _Block(str):
    """A patch description is written as a literal block (`description: |`)."""


def _represent_block(dumper: yaml.SafeDumper, data: _Block) -> yaml.Node:
    return dumper.represent_scalar("tag:yaml.org,2002:str", str(data) + "\n", style="|")


_Dumper.add_representer(_Block, _represent_block)


class _Markers(tuple[str, ...]):
    """Markers are written in flow style with double quotes: `markers: ["// patchctl x"]`."""


def _represent_markers(dumper: yaml.SafeDumper, data: _Markers) -> yaml.Node:
    items = [dumper.represent_scalar("tag:yaml.org,2002:str", m, style='"') for m in data]
    return yaml.SequenceNode("tag:yaml.org,2002:seq", items, flow_style=True)


_Dumper.add_representer(_Markers, _represent_markers)


def _ordered(
    values: Mapping[str, Any], canonical: tuple[str, ...], seen: tuple[str, ...]
) -> dict[str, Any]:
    order = [k for k in seen if k in canonical] + [k for k in canonical if k not in seen]
    return {k: values[k] for k in order if k in values}


def _upstream_dict(up: Upstream) -> dict[str, Any]:
    values = {k: getattr(up, k) for k in UPSTREAM_KEYS if getattr(up, k) is not None}
    return _ordered(values, UPSTREAM_KEYS, up.key_order)


def _patch_dict(p: Patch) -> dict[str, Any]:
    values: dict[str, Any] = {"id": p.id, "file": p.file, "title": p.title}
    optional = {
        "description": _Block(p.description) if p.description else None,
        "upstream_status": p.upstream_status,
        "origin": p.origin,
        "markers": _Markers(p.markers) if p.markers else None,
        "pre_tree": p.pre_tree,
        "post_tree": p.post_tree,
        "imported": p.imported if p.imported or "imported" in p.key_order else None,
        "sha256": p.sha256,
    }
    values.update({k: v for k, v in optional.items() if v is not None})
    return _ordered(values, PATCH_KEYS, p.key_order)


def series_to_dict(series: Series) -> dict[str, Any]:
    """The series as plain data, in file order (also used for --json)."""
    values: dict[str, Any] = {
        "version": series.version,
        "upstream": _upstream_dict(series.upstream),
        "patches": [_patch_dict(p) for p in series.patches],
    }
    if series.extends is not None:
        ext = series.extends
        values["extends"] = _ordered(
            {"series": ext.series, "root": ext.root}, EXTENDS_KEYS, ext.key_order
        )
    if series.root != "." or "root" in series.key_order:
        values["root"] = series.root
    return _ordered(values, SERIES_KEYS, series.key_order)


def dump_series(series: Series) -> bytes:
    """The YAML bytes `save_series` writes: block style, a blank line between patches."""
    text = yaml.dump(
        series_to_dict(series),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1_000_000,
    )
    text = re.sub(r"(?<!\npatches:)\n(  - id: )", r"\n\n\1", text)
    return (series.header + text).encode("utf-8")


def check_savable(series: Series) -> None:
    """ConfigError unless the bytes `save_series` would write load back as a valid series.

    Commands that build entries from other inputs (import, capture, new) call this before
    their first write, so a value the loader would refuse is never written.
    """
    _series_from(_parse_yaml(dump_series(series), series.path), series.path)


def save_series(series: Series, path: Path | None = None) -> bool:
    """Write the series atomically (to `path` or series.path); False when bytes were equal."""
    target = series_file(path) if path is not None else series.path
    return write_if_changed(target, dump_series(series))
