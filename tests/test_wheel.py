"""From a wheel, not a checkout: the shipped profiles travel with the package.

A user who runs ``pip install loadgen`` has no ``profiles/`` folder; ``profile list`` and
``sweep --profile quickstart`` must still work from any directory. The wheel is built from this
tree without a download (``--no-build-isolation``: setuptools comes from the dev extra) and
installed into a fresh virtual environment outside the repo; its dependencies are borrowed from
the test environment by a path entry, so nothing is fetched.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_carries_the_profiles_and_runs_the_quickstart_from_elsewhere(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    env_dir = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True, capture_output=True, text=True,
        ).stdout.strip()
    )  # fmt: skip
    # the wheel's loadgen goes first in site-packages; httpx, numpy... come from this environment
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(wheels.glob("loadgen-*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    for package in ("loadgen", "planner"):  # PEP 561: type hints shipped, and every wing of the planner
        assert (site / package / "py.typed").is_file(), package
    assert all((site / "planner" / wing / "__init__.py").is_file() for wing in ("evidence", "capacity", "reports"))
    work = tmp_path / "elsewhere"
    work.mkdir()

    def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(python), "-m", "loadgen", *args], cwd=work, capture_output=True, text=True,
                              timeout=300)  # fmt: skip

    where = subprocess.run([str(python), "-c", "import loadgen; print(loadgen.__file__)"], cwd=work,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert where.startswith(str(site)), where  # the installed wheel, not this checkout
    listed = loadgen("profile", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert "quickstart" in {r["name"] for r in rows} and all(str(site) in r["path"] for r in rows)
    swept = loadgen("sweep", "--profile", "quickstart", "--levels", "2", "--duration", "1", "--warmup", "0.5",
                    "--min-requests", "4", "-o", "s.json", "--quiet")  # fmt: skip
    assert swept.returncode == 0, swept.stderr
    assert json.loads((work / "s.json").read_text())["levels"][0]["completed"] >= 4
