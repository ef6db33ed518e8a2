"""The rebase report as one static HTML page: opens from disk in any browser, no server.

Self-contained: the style is inline, there is no script, no image, no font and no link to
anything outside the page, and a Content-Security-Policy forbids loading any (a page a
reviewer opens must not call out). Everything taken from the series (ids, statuses, the
range-diff, upstream names) is hostile input: each piece goes through `html.escape` with
quotes escaped, and the range-diff sits in `<pre>` as text.
"""

from __future__ import annotations

from html import escape

from patchctl.ops.rebase.report import Report

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src 'none'; script-src 'none'"
STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; }
th, td { border: 1px solid #bbb; padding: 0.2em 0.6em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.clean { background: #e6f4e6; } .offset { background: #eef6dd; }
.s3-way { background: #fff3cd; } .replayed { background: #dde8fb; }
.conflict { background: #f8d7da; } .merged, .dropped { background: #eee; }
.empty, .pending { background: #fafafa; }
pre { background: #f6f6f6; padding: 0.6em; overflow-x: auto; }
.add { color: #155724; } .del { color: #721c24; }
"""


def e(text: object) -> str:
    """`text` escaped for HTML text and attribute values."""
    return escape(str(text), quote=True)


def css_class(status: str) -> str:
    """A CSS class for a status (a class may not start with a digit)."""
    return "s3-way" if status == "3-way" else "".join(c for c in status if c.isalnum())


def render(report: Report) -> bytes:
    """The page, as UTF-8 bytes."""
    title = f"rebase {report.series}: {report.old} -> {report.new}"
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{e(CSP)}">',
        f"<title>{e(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p id="state">state: <b>{e(report.state)}</b>; {len(report.patches)} patches;'
        f" {report.total_seconds:.1f} s moving them, {report.total_waited:.0f} s stopped for"
        " hand resolutions</p>",
        '<p id="counts">'
        + ", ".join(f"{n} {e(status)}" for status, n in report.counts().items() if n)
        + "</p>",
        '<table id="patches"><thead><tr><th>patch</th><th>status</th><th>rebase</th>'
        "<th>seconds</th><th>waited (s)</th><th>hot</th><th>range-diff</th></tr></thead><tbody>",
    ]
    for row in report.patches:
        seconds = f"{row.seconds:.2f}" if row.how else "-"
        out.append(
            f'<tr class="{css_class(row.status)}"><td><a href="#p-{e(row.id)}">{e(row.id)}</a></td>'
            f"<td>{e(row.status)}</td><td>{e(row.how or '-')}</td>"
            f'<td class="num">{seconds}</td>'
            f'<td class="num">{f"{row.waited:.0f}" if row.how == "resolved" else "-"}</td>'
            f'<td class="num" title="{row.hot_stored} stored + {row.hot_now} this run">'
            f"{row.hot}</td>"
            f"<td>{e(row.pair or '-')}</td></tr>"
        )
    out.append("</tbody></table>")
    out += _api_html(report)
    if report.stop is not None:
        out.append('<h2 id="stop">stopped</h2>')
        out.append(f"<pre>{e(_stop_text(report.stop))}</pre>")
    out.append("<h2>range-diff, patch by patch</h2>")
    for row in report.patches:
        out.append(f'<section id="p-{e(row.id)}"><h3>{e(row.id)} ({e(row.status)})</h3>')
        if row.range_diff:
            out.append(f"<pre>{_diff_html(row.range_diff)}</pre>")
        else:
            out.append("<p>no range-diff for this patch yet</p>")
        out.append("</section>")
    if report.range_diff:
        out.append(f"<p>the whole range-diff: <code>{e(report.range_diff)}</code></p>")
    out.append("</body></html>")
    return ("\n".join(out) + "\n").encode("utf-8")


def _api_html(report: Report) -> list[str]:
    """The missing-API check: a table of the identifiers each patch's added lines use that
    the old upstream has and the new one lacks (nothing when the check did not run)."""
    if not report.api_checked:
        return []
    rows = [(row, m) for row in report.patches for m in row.missing_api]
    out = ['<h2 id="missing-api">API the new upstream lacks</h2>']
    if not rows:
        out.append("<p>no identifier the moved patches add is gone from the new upstream</p>")
        return out
    out.append(
        "<p>identifiers the patches' added lines use that the old upstream has and the new one"
        " does not: a list to check against the build, not an error</p>"
    )
    out.append(
        '<table id="api"><thead><tr><th>patch</th><th>name</th><th>lines</th><th>first in</th>'
        "<th>line</th><th>old upstream</th></tr></thead><tbody>"
    )
    for row, m in rows:
        scope = " (outside its conflict blocks)" if row.api_scope.startswith("outside") else ""
        out.append(
            f"<tr><td>{e(row.id)}{e(scope)}</td><td><code>{e(m['name'])}</code></td>"
            f'<td class="num">{e(m["uses"])}</td><td>{e(m["file"])}</td>'
            f"<td><code>{e(m['text'])}</code></td><td>{e(m['old_file'])}</td></tr>"
        )
    out.append("</tbody></table>")
    return out


def _diff_html(text: str) -> str:
    """The range-diff part, escaped, its added and removed lines marked."""
    lines = []
    for line in text.splitlines():
        body = line.lstrip()
        kind = "add" if body.startswith(("+", "++")) else "del" if body.startswith("-") else ""
        lines.append(f'<span class="{kind}">{e(line)}</span>' if kind else e(line))
    return "\n".join(lines)


def _stop_text(stop: dict[str, object]) -> str:
    lines = [f"patch {stop.get('patch')}: {stop.get('reason')}"]
    for name in ("files", "messages"):
        value = stop.get(name)
        if isinstance(value, list):
            lines += [f"  {item}" for item in value]
    return "\n".join(lines)
