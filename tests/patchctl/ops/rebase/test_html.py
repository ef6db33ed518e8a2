"""html: the rebase report page, loaded in a real headless browser (Debian's chromium, fetched
and checked by tests/support/chromium.py; never skipped), shows every patch, its status and its
range-diff, and shows hostile names as text."""

from __future__ import annotations

from dataclasses import replace
from html import escape
from pathlib import Path

import pytest
from support.chromium import chromium, seen
from support.drift import rebase_ready, resolve_conflicts

from patchctl.ops.rebase.html import CSP, render
from patchctl.ops.rebase.rebase import rebase, rebase_continue
from patchctl.ops.rebase.report import build, report_names
from patchctl.room.rebasestate import Done
from patchctl.series.model import load_series, save_series

HOSTILE = "<script>document.title='pwned'</script><img src=x onerror=\"document.title='img'\">&amp;"


@pytest.fixture(scope="module")
def browser_root() -> Path:
    return chromium().root


def test_a_finished_rebase_page_in_a_real_browser(tmp_path: Path, browser_root: Path) -> None:
    from support.chromium import Browser

    series_dir, onto = rebase_ready(tmp_path)
    series = load_series(series_dir)
    hostile = tuple(
        replace(p, title=f"{p.title} {HOSTILE}") if p.id == "0004-c-10" else p
        for p in series.patches
    )
    save_series(replace(series, patches=hostile))
    rebase(series_dir, onto)
    resolve_conflicts(series_dir.parent.parent / "cleanroom" / "demo" / "src" / "c.c", "C <10>")
    done = rebase_continue(series_dir)
    assert done.range_diff is not None
    page = series_dir / report_names(done.range_diff.name)[1]
    dom = Browser(browser_root).dump_dom(page)
    view = seen(dom)
    text = "".join(view.text)
    for pid, status in (("0001-readme", "clean"), ("0002-louder-a", "offset"),
                        ("0003-b-30", "clean"), ("0004-c-10", "conflict")):  # fmt: skip
        row = next(line for line in text.splitlines() if line.startswith(pid))
        assert status in row, (pid, row)
    assert "+C <10>" in text  # the range-diff, its `<` shown as text
    assert HOSTILE in text  # the hostile title, as a reader sees it: text, nothing run
    assert "script" not in view.tags and "img" not in view.tags
    assert view.title.startswith("rebase demo:") and "pwned" not in view.title
    assert "state: done" in text


def test_hostile_report_fields_stay_text(tmp_path: Path, browser_root: Path) -> None:
    from support.chromium import Browser

    done = (Done("0001-a", "c", "t", "applied", "s", False, 0.5),)
    report = build(
        state="done",
        series_dir=tmp_path / "demo",
        old=HOSTILE,
        new='"><style>body{display:none}</style>',
        ids=["0001-a"],
        done=done,
        range_diff_text=f"1:  1111111 ! 1:  2222222 0001-a: {HOSTILE}\n    +{HOSTILE}\n",
    )
    page = tmp_path / "page.html"
    page.write_bytes(render(report))
    view = seen(Browser(browser_root).dump_dom(page))
    text = "".join(view.text)
    assert text.count(HOSTILE) >= 3 and '"><style>body{display:none}</style>' in text
    assert view.tags.count("style") == 1 and "script" not in view.tags and "img" not in view.tags
    assert view.title.startswith(f"rebase demo: {HOSTILE}")  # text: no script ran to set it


def test_the_page_is_self_contained() -> None:
    report = build(state="done", series_dir=Path("/x/demo"), old="a", new="b", ids=[], done=[])
    page = render(report).decode()
    assert f'content="{escape(CSP, quote=True)}"' in page and "default-src 'none'" in CSP
    for outside in ("http://", "https://", "<script", "<link", "src=", "@import"):
        assert outside not in page
