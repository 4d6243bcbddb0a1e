"""Every file a docstring, comment or doc cites is one the repository has (issue 69: 18 docstrings cited a
design document that lived outside it)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CITED = re.compile(r"(?<![\w/.])((?:docs|profiles|benchmarks)/[\w./-]+\.(?:md|yaml|py))")
PLACEHOLDER = re.compile(r"/[A-Z]+\.")  # profiles/NAME.yaml: a pattern, not a file


def texts() -> list[Path]:
    """The repository's sources and docs (read when a test runs: a file renamed meanwhile is not listed)."""
    tops = ("loadgen", "planner", "tests", "benchmarks", "docs")
    return [p for top in tops for p in (ROOT / top).rglob("*") if p.suffix in (".py", ".pyx", ".md")] + [
        ROOT / "README.md"
    ]


def test_every_cited_file_exists() -> None:
    missing = sorted(
        f"{path.relative_to(ROOT)} cites {name}"
        for path in texts()
        for name in CITED.findall(path.read_text())
        if not PLACEHOLDER.search(name) and not (ROOT / name).exists()
    )
    assert not missing, missing


def test_nothing_cites_a_document_outside_the_repository() -> None:
    outside = [str(p.relative_to(ROOT)) for p in texts() if p != Path(__file__) and "DESIGN.md" in p.read_text()]
    assert not outside, outside
