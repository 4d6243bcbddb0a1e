"""A ``Report`` as one self-contained HTML file (``report -o report.html``): plots inlined, every text escaped."""

from __future__ import annotations

import html

from planner.reports.document import Plot, Report, Section

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:72rem;color:#222;
padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem;border-bottom:1px solid #ddd;padding-bottom:.2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{border:1px solid #ddd;padding:.25rem .5rem;
text-align:right}th:first-child,td:first-child{text-align:left}th{background:#f4f4f4}
td.fail{color:#b00020;font-weight:600}th.text,td.text{text-align:left}dl.meta{display:grid;grid-template-columns:max-content auto;gap:.2rem 1rem}
dt{font-weight:600}.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(30rem,1fr));gap:1rem}
figure{margin:0}figure img{max-width:100%}figcaption{font-size:.8rem;color:#555}
"""


FAIL_TD = '<td class="fail">'
LEFT = ' class="text"'  # a column of sentences reads from the left; numbers line up on the right


def to_html(report: Report) -> str:
    e = html.escape
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(report.title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{e(report.title)}</h1>",
        f"<p><strong>{e(report.headline)}</strong></p>",
    ]
    for section in report.sections[: report.lead]:
        out += _section(section)
    if report.plots:  # the decision's evidence in pictures, before the tables that hold it in numbers
        out.append('<h2>Plots</h2><div class="plots">')
        for plot in report.plots:
            out.append(
                f'<figure id="{e(plot.name)}"><img alt="{e(plot.caption)}" src="{plot.data_uri}"{_mark_attrs(plot)}>'
                f"<figcaption>{e(plot.caption)}</figcaption></figure>"
            )
        out.append("</div>")
    out.append('<dl class="meta">' + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>" for k, v in report.meta) + "</dl>")
    for section in report.body:
        out += _section(section)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _section(section: Section) -> list[str]:
    """One section: its title, paragraphs, table (a FAIL cell marked) and bullets, every text escaped."""
    e = html.escape
    out = [f"<h2>{e(section.title)}</h2>"]
    out += [f"<p>{e(p)}</p>" for p in section.paragraphs]
    if section.table is not None:
        table = section.table
        left = [k > 0 and text for k, text in enumerate(table.text_columns())]  # the first: the CSS's own rule
        out.append(
            "<table><thead><tr>"
            + "".join(f"<th{LEFT if lf else ''}>{e(c)}</th>" for c, lf in zip(table.columns, left))
            + "</tr></thead><tbody>"
        )
        for row in table.rows:
            cells = "".join(
                (FAIL_TD if c.startswith("FAIL") else f"<td{LEFT if lf else ''}>") + f"{e(c)}</td>"
                for c, lf in zip(row, left)
            )
            out.append(f"<tr>{cells}</tr>")
        out.append("</tbody></table>")
    if section.bullets:
        out.append("<ul>" + "".join(f"<li>{e(b)}</li>" for b in section.bullets) + "</ul>")
    return out


def _mark_attrs(plot: Plot) -> str:
    """A plot's reference lines as data attributes (``data-knee="24" data-knee-px="310.5"``), so a browser
    test can check each is drawn where the numbers say."""
    return "".join(
        f' data-{html.escape(name)}="{value:g}" data-{html.escape(name)}-px="{px:.1f}"'
        for name, (value, px) in plot.marks.items()
    )
