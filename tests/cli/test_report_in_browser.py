"""The HTML report as people read it: opened in headless Chromium, every plot a real picture, the SLO line
and the knee drawn where the numbers say.

Chromium is Debian's ``chromium`` package (``.ci/run`` installs it), driven by Playwright; without it the
test skips and says so. One screenshot of the page is kept per run: in ``$LOADGEN_SCREENSHOT_DIR`` (the CI
log directory) when set.
"""

from __future__ import annotations

import io
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from loadgen.cli import app
from loadgen.cli.plan_inputs import PlanFlags, assemble
from loadgen.results import load
from planner import plan as answer
from planner.evidence.verdicts import judge

pytestmark = pytest.mark.slow
runner = CliRunner()
RED = np.array([0xD6, 0x27, 0x28]) / 255  # matplotlib's C3: the SLO line and the knee


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        pytest.skip(
            "HTML REPORT NOT CHECKED IN A BROWSER: no chromium here (apt-get install chromium, as .ci/run does)"
        )
    return path


def pixels(png: bytes) -> np.ndarray:
    from matplotlib import image  # here: every xdist worker collects this (real-time) file

    return np.asarray(image.imread(io.BytesIO(png), format="png"))[..., :3]


def top(locator: Any) -> float:
    """Where an element starts on the page, in CSS pixels from the top."""
    box = locator.bounding_box()
    assert box is not None, "not drawn"
    return float(box["y"])


PURPLE = np.array([0x94, 0x67, 0xBD]) / 255  # matplotlib's C4, the chosen batch's line
TAB_COLOURS = np.array([[0x1F, 0x77, 0xB4], [0xFF, 0x7F, 0x0E]]) / 255  # C0, C1: a chosen mix's two kinds


def red_share(strip: np.ndarray, axis: int, color: np.ndarray = RED) -> float:
    """The largest share of ``color``'s pixels (red) along one row (axis 1) or column (axis 0) of the strip."""
    return float(np.max(np.mean(np.all(np.abs(strip - color) < 0.15, axis=-1), axis=axis)))


def test_the_html_report_renders_its_plots_and_marks_where_the_json_says(tmp_path: Path) -> None:
    browser_path = chromium()
    from playwright.sync_api import sync_playwright

    profile = tmp_path / "knee.yaml"
    profile.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "name": "knee",
                "target": {"sim": {"base_ms": 25, "per_seq_ms": 0.4, "max_num_seqs": 24}},
                "workload": {"prompt_tokens": 32, "output_tokens": 16},
                "load": {"mode": "closed", "levels": [2, 4, 8, 16, 24, 32, 48], "duration_s": 3, "warmup_s": 1},
                "slo": {"tpot_p95_ms": 32},
                "stop": {"stop_on_saturation": False},
                "seed": 1,
            }
        )
    )
    sweep, html = tmp_path / "sweep.json", tmp_path / "report.html"
    result = runner.invoke(app, ["sweep", "--profile", str(profile), "--virtual-time", "-o", str(sweep), "--quiet"])
    assert sweep.exists(), result.output
    assert runner.invoke(app, ["report", str(sweep), "-o", str(html)]).exit_code == 0
    results = load(sweep)
    states = judge(results.levels).saturation.states
    assert "knee" in states, states
    knee = results.levels[states.index("knee")].achieved_concurrency

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        assert not errors, errors
        shots = Path(os.environ.get("LOADGEN_SCREENSHOT_DIR") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "report.png"), full_page=True)
        # issue 55: the decision and the first plot are in the first screen, the evidence below them
        assert top(page.locator("h2", has_text="Decision")) < 400
        assert top(page.locator("figure img").first) < 1000
        assert top(page.locator("h2", has_text="Levels")) > 1000

        figures = page.query_selector_all("figure img")
        assert len(figures) == 5
        drawn = {}
        for img in figures:
            natural = img.evaluate("i => [i.naturalWidth, i.naturalHeight, i.complete]")
            assert natural[0] > 100 and natural[1] > 100 and natural[2], natural
            img.scroll_into_view_if_needed()
            seen = pixels(img.screenshot())
            assert seen.std() > 0.05 and len(np.unique(seen.reshape(-1, 3), axis=0)) > 50  # a picture, not a blank
            marks = img.evaluate(
                "i => Object.fromEntries([...i.attributes].filter(a => a.name.startsWith('data-'))"
                ".map(a => [a.name.slice(5), Number(a.value)]))"
            )
            drawn[img.evaluate("i => i.parentElement.id")] = (seen, seen.shape[1] / natural[0], marks)
        browser.close()

    # the SLO line: a red dashed row at the value the profile promised, and only there
    tpot, scale, marks = drawn["tpot_vs_batch"]
    assert marks["slo-tpot_p95_ms"] == 32
    row = round(marks["slo-tpot_p95_ms-px"] * scale)
    assert red_share(tpot[row - 2 : row + 3], axis=1) > 0.3
    assert red_share(tpot[row + 15 : row + 18], axis=1) < 0.05
    # issue 73: the decision drawn: a purple dotted column at the batch the plan chose, and only there
    chosen = answer(assemble(PlanFlags(), [("sweep", results)])).capacity
    assert chosen is not None and marks["chosen-batch"] == chosen.max_batch
    column = round(marks["chosen-batch-px"] * scale)
    assert red_share(tpot[:, column - 2 : column + 3], axis=0, color=PURPLE) > 0.15
    assert red_share(tpot[:, column + 15 : column + 18], axis=0, color=PURPLE) < 0.05
    # the knee: a red dotted column at the concurrency of the level the verdicts call the knee
    ttft, scale, marks = drawn["ttft_vs_load"]
    assert marks["knee"] == pytest.approx(knee, rel=1e-3)
    column = round(marks["knee-px"] * scale)
    assert red_share(ttft[:, column - 2 : column + 3], axis=0) > 0.15
    assert red_share(ttft[:, column + 15 : column + 18], axis=0) < 0.05


def test_the_fleet_report_reads_in_hours_with_a_column_per_variant(tmp_path: Path) -> None:
    """Issue 55: the fleet report gave time in seconds (0-82,800) and one count for a mix of two GPU types.
    Now hours of the day, each variant of a mix its own column and line, the plot right under the answer."""
    browser_path = chromium()
    from playwright.sync_api import sync_playwright

    sweep, faster, html = tmp_path / "sweep.json", tmp_path / "faster.json", tmp_path / "fleet.html"
    swept = runner.invoke(app, ["sweep", "--profile", "quickstart", "--virtual-time", "-o", str(sweep), "--quiet"])
    assert swept.exit_code == 0, swept.output
    # a second kind, three times the capacity at a little over twice the price: a mix of the two is cheapest
    profile = yaml.safe_load((Path(__file__).parents[2] / "profiles" / "quickstart.yaml").read_text())
    profile["target"] = {"sim": {"base_ms": 12, "per_seq_ms": 0.2, "max_num_seqs": 128}}
    (tmp_path / "faster.yaml").write_text(yaml.safe_dump(profile))
    args = ["sweep", "--profile", str(tmp_path / "faster.yaml"), "--virtual-time", "-o", str(faster), "--quiet"]
    assert runner.invoke(app, args).exit_code == 0
    day = tmp_path / "day.csv"
    day.write_text(
        "time_s,qps\n" + "".join(f"{h * 3600},{5 + 15 * np.sin(np.pi * h / 24) ** 2:.2f}\n" for h in range(24))
    )
    args = ["report", "--variant", f"a={sweep},cost=1.1", "--variant", f"b={faster},cost=1.2,gpus=2", "--mix"]
    args += ["--traffic", str(day), "--bucket", "1h", "--slo", "tpot_p95<40ms", "--slo", "ttft_p95<1s"]
    assert runner.invoke(app, [*args, "-o", str(html)]).exit_code == 0
    text = html.read_text()
    assert "bucket start (h:mm)" in text and "<td>23:00</td>" in text and "a + b: b" in text

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(html.as_uri())
        page.wait_for_load_state("load")
        shots = Path(os.environ.get("LOADGEN_SCREENSHOT_DIR") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "fleet-report.png"), full_page=True)
        assert top(page.locator("figure img").first) < 1000  # the day's replicas in the first screen
        img = page.query_selector("figure#fleet_over_time img")
        assert img is not None
        marks = img.evaluate(
            "i => Object.fromEntries([...i.attributes].filter(a => a.name.startsWith('data-'))"
            ".map(a => [a.name.slice(5), Number(a.value)]))"
        )
        img.scroll_into_view_if_needed()
        seen = pixels(img.screenshot())
        scale = seen.shape[1] / img.evaluate("i => i.naturalWidth")
        browser.close()
    # issue 73: the chosen mix (a + b, asserted above) drawn: each of its kinds' peak a dotted row in its colour
    assert {k for k in marks if not k.endswith("-px")} == {"peak-0", "peak-1"}, marks
    for k in range(2):
        row = round(marks[f"peak-{k}-px"] * scale)
        assert red_share(seen[row - 2 : row + 3], axis=1, color=TAB_COLOURS[k]) > 0.1, (k, marks)
