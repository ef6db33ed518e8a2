"""The per-patch report of a rebase: what happened to each patch, its own part of the
range-diff, the time it took, and how often it needed a hand resolution ("hot").

Built from what the rebase knows (each patch's `Done`, the stop, the range-diff text) and from
the series directory (the resolutions stored under `resolutions/<patch id>/`); written beside
the range-diff when the rebase ends, as JSON (`rebase-<old>-<new>.report.json`) and as a static
HTML page (`rebase-<old>-<new>.html`, html.py); shown as text by `rebase` and `rebase
--status`, and read back from the JSON file by `rebase --status` once the rebase has ended.

Statuses (one per patch):
    clean     applied exactly, at its line numbers (`Done.how` applied / unchanged)
    offset    merged, and the range-diff pairs it as equal: only its line numbers moved
    3-way     merged three-way, and its content changed (range-diff `!`)
    replayed  its conflict was resolved by a stored resolution, replayed
    conflict  resolved by hand in this run (or, while stopped, the patch it stopped at)
    merged    the new upstream has it; dropped by --drop-merged
    dropped   dropped by --skip
    empty     stopped at: the new upstream has its changes already
    pending   not moved yet (the rebase is stopped before it)

Each row also carries the identifiers its added lines use that the old upstream has and the
new one lacks (vanished.py), once the check ran (`missing_api_checked`): at the end of a
rebase and on `rebase --status`.

The JSON schema (`"schema": "patchctl-rebase-report/1"`) is documented in
docs/UPSTREAM_SYNC.md; a field is only ever added to it, never renamed.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from patchctl.errors import PatchctlError
from patchctl.limits import JOURNAL_BYTES, read_bounded
from patchctl.room.rebasestate import Done, Journal, Stop
from patchctl.series.model import Upstream, load_series
from patchctl.series.resolutions import is_record_name

if TYPE_CHECKING:
    from patchctl.ops.rebase.rebase import RebaseReport
    from patchctl.ops.rebase.vanished import PatchApi

SCHEMA = "patchctl-rebase-report/1"
STATUSES = (
    "clean", "offset", "3-way", "replayed", "conflict", "merged", "dropped", "empty", "pending",
)  # fmt: skip
RESOLUTIONS = "resolutions"  # `<series dir>/resolutions/<patch id>/`: one file per block
HOW_STATUS = {
    "applied": "clean",
    "unchanged": "clean",
    "replayed": "replayed",
    "resolved": "conflict",
    "upstreamed": "merged",
    "dropped": "dropped",
}
# A pairing line of `git range-diff`: `1:  abc1234 ! 1:  def5678 <subject>` (`-:  -------`
# for a side that has no such commit).
PAIR = re.compile(
    r"^\s*(?:\d+|-):\s+(?:[0-9a-f]+|-+)\s+([=!<>])\s+(?:\d+|-):\s+(?:[0-9a-f]+|-+)\s(.*)$"
)
MAX_HOT_FILES = 100_000  # a resolutions folder larger than this is counted as this many
API_SCOPES = {False: "added lines", True: "outside conflict blocks"}


@dataclass(frozen=True)
class PatchRow:
    """One patch in the report."""

    id: str
    status: str  # one of STATUSES
    how: str  # the rebase's own word (`Done.how`), "" for a patch not moved
    seconds: float  # wall time spent moving it (a hand resolution not counted)
    waited: float  # wall time from its stop to the --continue that took the hand resolution
    hot_stored: int  # resolutions stored for it in the series before this run
    hot_now: int  # conflict blocks resolved by hand for it in this run
    pair: str  # its range-diff pairing mark (`=`, `!`, `<`, `>`), "" when not known
    range_diff: str  # its part of the range-diff: the pairing line and the diff under it
    # identifiers its added lines use that the new upstream lacks (vanished.Missing.to_json)
    missing_api: tuple[dict[str, object], ...] = ()
    api_scope: str = ""  # "added lines", "outside conflict blocks", "" (not checked)

    @property
    def hot(self) -> int:
        """How often the patch needed a hand resolution: stored ones plus this run's."""
        return self.hot_stored + self.hot_now

    def to_json(self) -> dict[str, object]:
        """Plain data for --json and the saved report."""
        return {
            "id": self.id,
            "status": self.status,
            "how": self.how,
            "seconds": self.seconds,
            "waited": self.waited,
            "hot": self.hot,
            "hot_stored": self.hot_stored,
            "hot_now": self.hot_now,
            "range_diff_pair": self.pair,
            "range_diff": self.range_diff,
            "missing_api": [dict(m) for m in self.missing_api],
            "missing_api_scope": self.api_scope,
        }


@dataclass(frozen=True)
class Report:
    """The whole report of one rebase, as it stands."""

    state: str  # "done" | "stopped" | "running" | ...
    series: str  # the series directory's name
    old: str
    new: str
    patches: tuple[PatchRow, ...]
    stop: dict[str, object] | None = None  # the stop, as RebaseReport's JSON gives it
    range_diff: str | None = None  # the path of the whole range-diff, once written
    api_checked: bool = False  # the missing-API check ran (vanished.py)

    @property
    def total_seconds(self) -> float:
        """The time spent moving the patches, all together."""
        return round(sum(p.seconds for p in self.patches), 3)

    @property
    def total_waited(self) -> float:
        """The time the rebase stood stopped until each hand resolution was taken."""
        return round(sum(p.waited for p in self.patches), 1)

    def counts(self) -> dict[str, int]:
        """How many patches have each status (every status named, 0 included)."""
        found = {status: 0 for status in STATUSES}
        for row in self.patches:
            found[row.status] = found.get(row.status, 0) + 1
        return found

    def to_json(self) -> dict[str, object]:
        """The documented schema (docs/UPSTREAM_SYNC.md)."""
        return {
            "schema": SCHEMA,
            "state": self.state,
            "series": self.series,
            "old": self.old,
            "new": self.new,
            "total_seconds": self.total_seconds,
            "total_waited": self.total_waited,
            "counts": self.counts(),
            "patches": [p.to_json() for p in self.patches],
            "stop": self.stop,
            "range_diff": self.range_diff,
            "missing_api_checked": self.api_checked,
        }


# ----------------------------------------------------------------------------- building


def build(
    *,
    state: str,
    series_dir: Path,
    old: str,
    new: str,
    ids: Sequence[str],
    done: Sequence[Done],
    stop: Stop | None = None,
    stop_json: dict[str, object] | None = None,
    range_diff_text: str = "",
    range_diff: Path | None = None,
    api: Sequence[PatchApi] | None = None,
) -> Report:
    """The report from what the rebase knows: every patch of the old series (`ids`, in order),
    the moved ones (`done`), the stop, the range-diff text (empty while it is stopped) and
    the missing-API check (`api`; None when it did not run)."""
    pairs = split_range_diff(range_diff_text)
    checked = {} if api is None else {p.id: p for p in api}
    moved = {d.id: d for d in done}
    rows = []
    for pid in ids:
        mark, text = pairs.get(pid, ("", ""))
        entry = moved.get(pid)
        if entry is not None:
            status, how, seconds = status_of(entry.how, mark), entry.how, entry.seconds
            waited = entry.waited
            now = entry.blocks if entry.how == "resolved" else 0
        elif stop is not None and stop.id == pid:
            status = "empty" if stop.reason == "empty" else "conflict"
            how, seconds, now, waited = "", 0.0, 0, 0.0
        else:
            status, how, seconds, now, waited = "pending", "", 0.0, 0, 0.0
        # records this run wrote are counted in `now`, not again as stored ones
        hot = stored_resolutions(series_dir, pid, () if entry is None else entry.recorded)
        found = checked.get(pid)
        missing = () if found is None else tuple(m.to_json() for m in found.missing)
        scope = "" if found is None else API_SCOPES[found.outside_blocks]
        rows.append(
            PatchRow(pid, status, how, seconds, waited, hot, now, mark, text, missing, scope)
        )
    return Report(
        state, series_dir.name, old, new, tuple(rows), stop_json,
        None if range_diff is None else str(range_diff), api is not None,
    )  # fmt: skip


def status_of(how: str, pair: str) -> str:
    """A patch's status from the rebase's `how` and its range-diff pairing mark: a three-way
    merge whose patch the range-diff finds equal (line numbers aside) only moved: offset."""
    if how == "merged":
        return "offset" if pair == "=" else "3-way"
    return HOW_STATUS.get(how, how)


def split_range_diff(text: str) -> dict[str, tuple[str, str]]:
    """Each patch id's (pairing mark, its part of the range-diff). The rebase titles every
    commit of the range-diff `<id>: <title>`, so the subject names the patch."""
    found: dict[str, tuple[str, list[str]]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        m = PAIR.match(line)
        if m is not None:
            pid = m.group(2).split(":", 1)[0].strip()
            current = [line]
            found[pid] = (m.group(1), current)
        elif current is not None:
            current.append(line)
    return {pid: (mark, "\n".join(lines).rstrip() + "\n") for pid, (mark, lines) in found.items()}


def stored_resolutions(series_dir: Path, pid: str, besides: Sequence[str] = ()) -> int:
    """The records under `<series dir>/resolutions/<pid>/`: regular files named as records
    are (`<file>-<12 hex>.yaml`; symlinks not followed; 0 when there is no such folder), one
    per conflict block once resolved and kept; those named in `besides` (series-relative
    paths, e.g. the records a run just wrote) not counted."""
    top = series_dir / RESOLUTIONS / pid
    if pid in ("", ".", "..") or "/" in pid or not top.is_dir() or top.is_symlink():
        return 0
    skip = {Path(p).name for p in besides if Path(p).parent.name == pid}
    count = 0
    for entry in os.scandir(top):
        try:
            regular = stat.S_ISREG(entry.stat(follow_symlinks=False).st_mode)
        except OSError:
            continue
        count += regular and is_record_name(entry.name) and entry.name not in skip
        if count >= MAX_HOT_FILES:
            break
    return count


# ----------------------------------------------------------------------------- files


def report_names(range_diff_name: str) -> tuple[str, str]:
    """The saved report's file names beside `rebase-<old>-<new>.range-diff`: (JSON, HTML)."""
    stem = range_diff_name.removesuffix(".range-diff")
    return f"{stem}.report.json", f"{stem}.html"


def report_files(
    series_dir: Path, range_diff_name: str, report: Report
) -> list[tuple[Path, bytes]]:
    """The two files the rebase writes beside its range-diff when it ends: (path, bytes)."""
    from patchctl.ops.rebase.html import render

    json_name, html_name = report_names(range_diff_name)
    data = json.dumps(report.to_json(), indent=2, sort_keys=False).encode("utf-8") + b"\n"
    return [(series_dir / json_name, data), (series_dir / html_name, render(report))]


def finish_files(
    series_dir: Path,
    range_diff_name: str,
    journal: Journal,
    range_diff: bytes,
    api: Sequence[PatchApi] | None = None,
) -> list[tuple[Path, bytes]]:
    """What a finishing rebase writes beside its range-diff (`rebase-<old>-<new>.range-diff`):
    the report as JSON and as HTML, every patch of the series in it."""
    report = build(
        state="done",
        series_dir=series_dir,
        old=Upstream(**journal.old_upstream).describe(),
        new=Upstream(**journal.new_upstream).describe(),
        ids=journal.ids,
        done=journal.done,
        range_diff_text=range_diff.decode("utf-8", "replace"),
        range_diff=series_dir / range_diff_name,
        api=api,
    )
    return report_files(series_dir, range_diff_name, report)


def remove_files(series_dir: Path, range_diff_name: str) -> list[Path]:
    """--abort after the series was written: the report files beside the range-diff removed."""
    removed = []
    for name in report_names(range_diff_name):
        path = series_dir / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(path)
    return removed


def of_rebase(result: RebaseReport) -> Report:
    """The report of a rebase run's result (done, or in progress: the patches not moved yet
    are read from the series, which is the old one until the rebase ends)."""
    from patchctl.ops.rebase.rebase import _stop_json

    ids = [d.id for d in result.patches]
    if result.state not in ("done", "aborted"):  # stopped, or a killed run resumed
        rest = load_series(result.series, check_files=False).ids()
        ids += [pid for pid in rest if pid not in ids]
    return build(
        state=result.state,
        series_dir=result.series.parent,
        old=result.old,
        new=result.new,
        ids=ids,
        done=result.patches,
        stop=result.stop,
        stop_json=None if result.stop is None else _stop_json(result.stop),
        range_diff_text=result.range_diff_text,
        range_diff=result.range_diff,
        api=result.api,
    )


def last_saved(series_path: Path) -> Report | None:
    """The report the last rebase of the series left beside its range-diff (None when there
    is none); `series_path` the series file or its directory."""
    directory = series_path if series_path.is_dir() else series_path.parent
    found = saved_reports(directory)
    return load_saved(found[-1]) if found else None


def write_html(report: Report, target: Path) -> None:
    """The report's HTML page written to `target` (whose folder must exist)."""
    from patchctl.fsio import write_atomic
    from patchctl.ops.rebase.html import render

    if not target.parent.is_dir():
        raise PatchctlError(
            f"--html {target}: the folder {target.parent} does not exist",
            hint="name a file in an existing folder",
        )
    write_atomic(target, render(report))


def saved_reports(series_dir: Path) -> list[Path]:
    """The reports rebases left in the series directory, the newest last."""
    found = [p for p in series_dir.glob("rebase-*.report.json") if p.is_file()]
    return sorted(found, key=lambda p: (p.stat().st_mtime_ns, p.name))


def load_saved(path: Path) -> Report:
    """A saved report read back (PatchctlError naming the file when it is not one)."""
    try:
        data = json.loads(read_bounded(path, JOURNAL_BYTES, "rebase report"))
        return from_json(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise PatchctlError(
            f"{path} is not a rebase report patchctl can read: {exc}",
            hint="it is written by `patchctl rebase` when a rebase ends; run the rebase again",
        ) from None


def from_json(data: Any) -> Report:
    """A Report from its JSON form (the schema checked)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} document")
    rows = tuple(
        PatchRow(
            str(p["id"]),
            str(p["status"]),
            str(p["how"]),
            float(p["seconds"]),
            float(p["waited"]),
            int(p["hot_stored"]),
            int(p["hot_now"]),
            str(p["range_diff_pair"]),
            str(p["range_diff"]),
            tuple(_api_entry(m) for m in p.get("missing_api", ())),
            str(p.get("missing_api_scope", "")),
        )
        for p in data["patches"]
    )
    stop = data.get("stop")
    return Report(
        str(data["state"]), str(data["series"]), str(data["old"]), str(data["new"]), rows,
        stop if isinstance(stop, dict) else None,
        None if data.get("range_diff") is None else str(data["range_diff"]),
        bool(data.get("missing_api_checked", False)),
    )  # fmt: skip


API_FIELDS = {"name": str, "file": str, "text": str, "uses": int, "old_file": str}


def _api_entry(raw: Any) -> dict[str, object]:
    """One missing identifier of a saved report, its fields checked (a report written before
    the check existed has none: the schema only grew)."""
    if not isinstance(raw, dict):
        raise TypeError("a missing_api entry is not an object")
    return {key: kind(raw[key]) for key, kind in API_FIELDS.items()}


# ----------------------------------------------------------------------------- text


def text_lines(report: Report, *, diffs: bool = False) -> list[str]:
    """The report as text: one line per patch (status, time, hot count, range-diff mark),
    the totals; with `diffs`, each patch's part of the range-diff under it."""
    lines = [f"report: {report.series} {report.old} -> {report.new} ({report.state})"]
    lines.append(f"  {'status':9} {'seconds':>8} {'waited':>8} {'hot':>4} {'rd':2} patch")
    for row in report.patches:
        seconds = f"{row.seconds:.2f}" if row.how else "-"
        waited = f"{row.waited:.0f}" if row.how == "resolved" else "-"
        lines.append(
            f"  {row.status:9} {seconds:>8} {waited:>8} {row.hot:>4} {row.pair or '-':2} {row.id}"
        )
        if diffs and row.range_diff and row.pair != "=":
            lines += ["      " + line for line in row.range_diff.splitlines()[1:]]
    counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
    total = f"{report.total_seconds:.1f} s moving them, {report.total_waited:.0f} s stopped"
    lines.append(f"  {len(report.patches)} patches: {counts}; {total}")
    hot = [row for row in report.patches if row.hot]
    if hot:
        lines.append("  hot (hand resolutions, stored + this run): "
                     + ", ".join(f"{r.id} {r.hot_stored}+{r.hot_now}" for r in hot))  # fmt: skip
    return lines + api_lines(report)


def api_lines(report: Report) -> list[str]:
    """The missing-API check as text: per patch each name its added lines use that the old
    upstream has and the new one lacks, where, and where the old upstream had it."""
    if not report.api_checked:
        return []
    rows = [row for row in report.patches if row.missing_api]
    if not rows:
        return ["  API check: no identifier the moved patches add is gone from the new upstream"]
    lines = [
        "  API the new upstream lacks (identifiers the added lines use that the old upstream"
        " has; a list to check against the build, not an error):"
    ]
    for row in rows:
        scope = " (outside its conflict blocks)" if row.api_scope == API_SCOPES[True] else ""
        lines.append(f"    {row.id}{scope}:")
        for m in row.missing_api:
            lines.append(
                f"      {m['name']}: {m['uses']} line(s), first in {m['file']}: {m['text']}"
                f" (old upstream: {m['old_file']})"
            )
    return lines
