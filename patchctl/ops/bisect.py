"""`patchctl bisect-upstream ID --good PIN --bad PIN`: the first upstream commit a patch stops
applying on (git upstreams).

The commits from GOOD to BAD (first parents, oldest first) are searched by halves: on each
one tried, the patch is applied to that commit's tree (under the upstream's subdir and the
series root) in a temporary index, as `cleanroom apply` would (offsets allowed, no fuzz).
GOOD must take the patch and BAD must not. The answer is the first commit that does not, with
the hunks that no longer apply there. Nothing is checked out and nothing in the series or
its clean room changes; the commits are fetched into patchctl's git cache when missing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from patchctl.errors import NotFound, PatchctlError
from patchctl.gitlayer.git import Git
from patchctl.gitlayer.index import Index, temp_index
from patchctl.series.gitapply import apply_to_index, failing_hunks
from patchctl.series.model import Series, read_patch_file
from patchctl.txn.session import series_session
from patchctl.upstream.sources import fetch_git, git_url


@dataclass(frozen=True)
class BisectReport:
    """The first commit the patch does not apply on, and why."""

    patch: str
    good: str
    bad: str
    first_bad: str
    subject: str
    last_good: str
    hunks: tuple[tuple[str, int | None], ...]
    tried: int  # commits on which the patch was applied
    commits: int  # commits between GOOD (excluded) and BAD (included)

    def to_json(self) -> dict[str, object]:
        """Plain data for --json."""
        return {
            "patch": self.patch,
            "good": self.good,
            "bad": self.bad,
            "first_bad": self.first_bad,
            "subject": self.subject,
            "last_good": self.last_good,
            "hunks": [{"file": f, "hunk": h} for f, h in self.hunks],
            "tried": self.tried,
            "commits": self.commits,
        }


def bisect_upstream(series_path: Path, patch_id: str, good: str, bad: str) -> BisectReport:
    """Search the upstream commits from `good` to `bad` for the first one `patch_id` does not
    apply on."""
    with series_session(series_path, op="bisect-upstream") as session:
        series = session.series
        if series.upstream.kind != "git":
            raise PatchctlError(
                f"bisect-upstream needs a git upstream; {series.path} pins "
                f"{series.upstream.describe()}",
                hint="bisect between releases by rebasing onto each (`patchctl rebase --onto`)",
            )
        patch = series.patch(patch_id)
        data = read_patch_file(series.patch_path(patch))
        cache = fetch_git(series)
        good_id, bad_id = _commit(cache, series, good), _commit(cache, series, bad)
        commits = cache.text(
            "rev-list", "--first-parent", "--reverse", "--end-of-options", f"{good_id}..{bad_id}"
        ).split()
        if not commits or commits[-1] != bad_id:
            raise PatchctlError(
                f"--bad {bad} is not a descendant of --good {good} (first parents)",
                hint="give an older --good or a newer --bad",
            )
        with temp_index(cache) as index:
            tried = 0

            def applies(commit: str) -> bool:
                nonlocal tried
                tried += 1
                index.read_tree(_tree(cache, series, commit))
                return apply_to_index(index, data, series.root).ok

            if not applies(good_id):
                raise PatchctlError(
                    f"{patch_id} does not apply on --good {good} ({good_id[:12]})",
                    hint="give a --good commit the patch applies to (e.g. the series' pin)",
                )
            if applies(bad_id):
                raise PatchctlError(
                    f"{patch_id} still applies on --bad {bad} ({bad_id[:12]}): nothing to find",
                    hint="give a --bad commit the patch no longer applies to",
                )
            lo, hi = -1, len(commits) - 1  # commits[lo] applies (-1: good), commits[hi] not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if applies(commits[mid]):
                    lo = mid
                else:
                    hi = mid
            first = commits[hi]
            hunks = _hunks(index, cache, series, first, data)
        subject = cache.text("log", "-1", "--format=%s", "--end-of-options", first, "--")
        return BisectReport(
            patch_id,
            good_id,
            bad_id,
            first,
            subject,
            commits[lo] if lo >= 0 else good_id,
            hunks,
            tried,
            len(commits),
        )


def _commit(cache: Git, series: Series, pin: str) -> str:
    """The commit `pin` names (an id, tag or branch), fetched from the upstream when the cache
    does not have it."""
    found = cache.maybe_rev(f"{pin}^{{commit}}")
    if found is None:
        try:
            cache.fetch(git_url(series), pin)
        except PatchctlError:
            raise NotFound(
                f"{pin!r} is not a commit, tag or branch of {series.upstream.describe()}",
                hint="give a commit id, tag or branch of the upstream repository",
            ) from None
        found = cache.rev_parse("FETCH_HEAD^{commit}")
    return found


def _tree(cache: Git, series: Series, commit: str) -> str:
    subdir = (series.upstream.subdir or "").strip("/")
    return cache.rev_parse(f"{commit}:{subdir}" if subdir else f"{commit}^{{tree}}")


def _hunks(
    index: Index, cache: Git, series: Series, commit: str, data: bytes
) -> tuple[tuple[str, int | None], ...]:
    index.read_tree(_tree(cache, series, commit))
    return failing_hunks(index, data, series.root)


def report_lines(report: BisectReport) -> list[str]:
    """The human form."""
    lines = [
        f"{report.patch}: first upstream commit it does not apply on:",
        f"  {report.first_bad} {report.subject}",
        f"  (last that takes it: {report.last_good[:12]}; {report.tried} tried of"
        f" {report.commits} commit(s) after --good)",
    ]
    for file, hunk in report.hunks:
        lines.append(f"  {file}: " + (f"hunk #{hunk} no longer applies" if hunk else "refused"))
    return lines
