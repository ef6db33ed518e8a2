"""patchctl on real quilt series nobody here wrote: Debian bookworm source packages.

    nice -n 10 .venv/bin/python scripts/series_corpus.py \
        --out results/series-corpus/2026-12-01/series-corpus.json [PACKAGE ...]

For each package (default: DEFAULT_PACKAGES), tests/support/corpus.py fetches the source package
once (cached in $PATCHCTL_TEST_CACHE/debian-src/bookworm/<package>/, sha256-checked against its
.dsc on every use) and runs init (orig tarball as `archive` upstream), import of
debian/patches/series, verify --all, strict cleanroom apply (refresh --all and apply again on
drift) and verify --all again through the real CLI, then, for comparison, `quilt push -a
--fuzz=0` on the same series and upstream tree (`quilt` and `timings` per package). The JSON
keeps every step's command, exit code, wall seconds and error. Exit status 1 when a package
failed a step (quilt's exit code is recorded, not judged).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.corpus import Outcome, run_package

# Varied patch styles, small sources (docs/benchmarks/series-corpus.md: what each adds).
DEFAULT_PACKAGES = (
    "less",  # the first series tried (tests/test_integration_debian.py)
    "openssh",  # 53 gbp-pq (git format-patch) patches with DEP-3 headers
    "curl",  # comments and blank lines in series, Index: headers, CRLF, new files
    "rsync",  # 63 patches, most in subdirectories, new and deleted files
    "vim",  # patches in a subdirectory, new files
    "sqlite3",  # a component tarball (.orig-www.tar.xz)
    "bash",  # Index: headers, offsets
    "libpng1.6",  # format-patch series, new files
    "tar",  # Index: headers, .diff names, offsets
    "openssl",  # a new executable file (mode 100755)
    "libxml2",  # 39 patches, subdirectories, Index: and format-patch mixed
    "xz-utils",  # new and deleted files
    "procps",  # a 0-byte patch in series: refused, exit 3
    "perl",  # a component tarball its patches change (regen-configure/), 60 in subdirectories
    "git",  # in-tree .gitattributes (*.bat eol=crlf): bytes must stay as they are
    "postgresql-15",  # a diff -U0 patch (zero context), plain diffs kept plain by refresh
    "coreutils",  # Index: headers, offsets
    "grep",  # Index: headers, format-patch, DEP-3, an offset
    "sed",  # one DEP-3 patch, at an offset
    "gzip",  # plain diffs without a header
    "findutils",  # one DEP-3 patch
    "zlib",  # plain diffs without a header
    "sudo",  # format-patch and DEP-3
    "file",  # 18 DEP-3 patches, series comments and blank lines, a new file
    "e2fsprogs",  # one DEP-3 patch
)


def _row(outcome: Outcome) -> str:
    codes = " ".join(f"{s.name}={s.exit_code}" for s in outcome.steps)
    head = f"{outcome.package:<20} {outcome.patches:>4} {outcome.seconds:>7.1f}s"
    times = " ".join(f"{k}={v:.2f}s" for k, v in outcome.timings.items())
    quilt = f" quilt={outcome.quilt.exit_code}" if outcome.quilt else ""
    return f"{head}  {outcome.result}  {codes}{quilt}  {times}"


def _version(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except FileNotFoundError:
        return "not installed"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("packages", nargs="*", default=list(DEFAULT_PACKAGES))
    parser.add_argument("--workdir", type=Path, help="keep the projects here (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="write the JSON result here")
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="patchctl-corpus-"))
    started = time.monotonic()
    outcomes = []
    for package in args.packages:
        outcomes.append(run_package(package, workdir))
        print(_row(outcomes[-1]), flush=True)
    if args.workdir is None:
        shutil.rmtree(workdir)
    result = {
        "command": " ".join(["python scripts/series_corpus.py", *(argv or sys.argv[1:])]),
        "machine": {
            "python": platform.python_version(),
            "git": _version("git", "--version"),
            "quilt": _version("quilt", "--version"),
        },
        "seconds": round(time.monotonic() - started, 2),
        "packages": [o.as_json() for o in outcomes],
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if any(o.result.startswith("failed") for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
