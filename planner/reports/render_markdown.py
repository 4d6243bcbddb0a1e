"""A ``Report`` as Markdown (``report -o report.md``); text from outside is escaped (``md_text``)."""

from __future__ import annotations

from planner.reports.document import Report, Section
from planner.reports.markdown import md_text


def to_markdown(report: Report) -> str:
    """The headline, the decision, the run's particulars, then the evidence and the appendix."""
    out = [f"# {md_text(report.title)}", "", f"**{md_text(report.headline)}**"]
    for section in report.sections[: report.lead]:
        out += _section(section)
    out += [""] + [f"- **{k}**: {md_text(v)}" for k, v in report.meta]
    for section in report.body:
        out += _section(section)
    return "\n".join(out).rstrip() + "\n"


def _section(section: Section) -> list[str]:
    out = ["", f"## {section.title}", ""]
    out += [md_text(p) + "\n" for p in section.paragraphs]
    if section.table is not None:
        t = section.table
        out.append("| " + " | ".join(md_text(c) for c in t.columns) + " |")
        out.append("|" + "|".join("---" if text else "---:" for text in t.text_columns()) + "|")
        out += ["| " + " | ".join(md_text(c) for c in row) + " |" for row in t.rows]
    return out + [f"- {md_text(b)}" for b in section.bullets]
