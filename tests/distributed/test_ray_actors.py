"""``--ray``: a level split across Ray actors is the level ``--workers`` measures (local Ray, 2 CPUs)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from typer.testing import CliRunner

from loadgen.api import Api
from loadgen.choices import Arrival
from loadgen.cli import app
from loadgen.cli.session_flags import local_ray_environment
from loadgen.histogram import LatencyHistogram
from loadgen.lengths import Lengths
from loadgen.load import LevelPlan, Load, open_loop_offsets
from loadgen.quantity import Metric
from loadgen.results import load
from loadgen.run.observe import NullObserver
from loadgen.run.ray_workers import RayOptions, connect, require_ray, run_level_on_ray
from loadgen.run.requests import Workload
from loadgen.run.split import SplitTarget
from loadgen.sim.server import SimProcess
from loadgen.wire.client import HttpOptions

pytestmark = pytest.mark.slow


def split_target(sim: SimProcess) -> SplitTarget:
    return SplitTarget(base_url=sim.base_url + "/", headers={}, http=HttpOptions(timeout_s=30), workers=2, scrape=False)


WORKLOAD = Workload(api=Api.COMPLETIONS, model="sim-model", prompt_tokens=Lengths(8), output_tokens=Lengths(16))


@pytest.fixture(scope="module")
def local_ray() -> Iterator[ModuleType]:
    """Ray, started as ``--ray local`` starts it (this machine's 2 CPUs), waiting out its start-up.

    Imported here, not at the top: every xdist worker collects this file, and importing Ray takes ~0.5 s.
    """
    local_ray_environment()  # before Ray is imported, as --ray local does: one host, loopback only, no usage report
    ray = require_ray()
    connect(RayOptions("local"))
    yield ray
    ray.shutdown()


def test_a_local_instance_listens_on_loopback_only(local_ray: ModuleType) -> None:
    assert {node["NodeManagerAddress"] for node in local_ray.nodes()} == {"127.0.0.1"}
    ours = _listening_inodes()
    assert ours, "no listening socket found for the Ray processes"
    assert all(_loopback(address) for address in ours.values()), ours


def _loopback(text: str) -> bool:
    import ipaddress

    address = ipaddress.ip_address(text)
    mapped = getattr(address, "ipv4_mapped", None)
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


def _listening_inodes() -> dict[str, str]:
    """Listening TCP sockets held by Ray's processes (gcs_server, raylet, workers): inode -> local address."""
    import ipaddress

    mine = set()
    for entry in Path("/proc").iterdir():
        try:
            name = (entry / "comm").read_text().strip()
            if not (name in ("gcs_server", "raylet") or name.startswith("ray::")):
                continue
            for fd in (entry / "fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    mine.add(link[8:-1])
        except OSError:
            continue
    found = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in mine:  # LISTEN
                raw = bytes.fromhex(fields[1].split(":")[0])
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))  # host-order words
                found[fields[9]] = str(ipaddress.ip_address(words))
    return found


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess() as server:
        yield server


def _run(sim: SimProcess, out: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    args = ["run", "--url", sim.base_url, "--api", "completions", "--concurrency", "4", "--max-tokens", "16"]
    args += ["--prompt-tokens", "8", "--duration", "3", "--warmup", "1", "--workers", "2", "-o", str(out), "--quiet"]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    doc: dict = json.loads(out.read_text())  # type: ignore[type-arg]
    return doc


def test_two_actors_measure_what_two_processes_do(local_ray: ModuleType, sim: SimProcess, tmp_path: Path) -> None:
    on_ray = _run(sim, tmp_path / "ray.json", "--ray", "local", "--ray-placement", "pack")
    local = _run(sim, tmp_path / "local.json")
    assert set(on_ray) == set(local)
    assert set(on_ray["levels"][0]) == set(local["levels"][0])
    assert set(on_ray["settings"]) == set(local["settings"])
    assert on_ray["settings"]["ray"]["placement"] == "pack" and local["settings"]["ray"] is None
    clocks = on_ray["settings"]["ray"]["clocks"]["c=4"]
    assert [c["worker"] for c in clocks] == [0, 1] and all(abs(c["offset_ms"]) < 50 for c in clocks)
    # Ray starts workers at nice 15 (a busy neighbour then takes the generator's core first): ours run at 0
    assert [c["niceness"] for c in clocks] == [0, 0]
    a, b = load(tmp_path / "ray.json").levels[0], load(tmp_path / "local.json").levels[0]
    assert a.load == b.load == Load(kind="concurrency", value=4) and a.workers == b.workers == 2
    if not (a.client_bound or b.client_bound):  # a busy machine's verdict: then neither measures the server
        assert a.output_tokens_per_s == pytest.approx(b.output_tokens_per_s, rel=0.05)


@pytest.mark.asyncio
async def test_the_merged_level_is_the_sum_of_the_actors_and_the_open_loop_is_one_schedule(
    local_ray: ModuleType, sim: SimProcess
) -> None:
    plan = LevelPlan(load=Load(kind="rate", value=12.0, arrival=Arrival.POISSON), duration_s=2.0, warmup_s=0.5, seed=7)
    on_ray = await run_level_on_ray(
        plan,
        WORKLOAD,
        split_target(sim),
        stop=asyncio.Event(),
        options=RayOptions(),
        observer=NullObserver(),
    )
    merged, parts = on_ray.outcome.result, on_ray.outcome.parts
    # each share runs on the loop --event-loop chose (auto: uvloop, installed here), not on Ray's own
    assert on_ray.loops == ("uvloop", "uvloop")
    assert len(parts) == 2 and not on_ray.outcome.lost_workers and merged.complete
    assert merged.completed == sum(p.completed for p in parts) > 0
    assert merged.output_tokens == sum(p.output_tokens for p in parts)
    for metric in (Metric.TTFT, Metric.TPOT, Metric.ITL, Metric.E2E):
        union = LatencyHistogram()
        for p in parts:
            union.merge(p.histograms[metric])
        assert merged.histograms[metric] == union
    schedule = open_loop_offsets(plan)  # what one process would have sent, from the same seed
    in_window = int(np.count_nonzero((schedule >= plan.warmup_s) & (schedule < plan.warmup_s + 2.0)))
    assert merged.offered == in_window


@pytest.mark.asyncio
async def test_a_killed_actor_leaves_the_others_data(local_ray: ModuleType, sim: SimProcess) -> None:
    task = asyncio.create_task(
        run_level_on_ray(
            LevelPlan(load=Load(kind="concurrency", value=4), duration_s=4.0),
            WORKLOAD,
            split_target(sim),
            stop=asyncio.Event(),
            options=RayOptions(),
            observer=NullObserver(),
        )
    )
    victim = await _running_actor(local_ray, worker=1, deadline_s=60)
    local_ray.kill(victim)
    on_ray = await asyncio.wait_for(task, timeout=60)
    assert len(on_ray.outcome.lost_workers) == 1 and "worker 1" in on_ray.outcome.lost_workers[0]
    result = on_ray.outcome.result
    assert not result.complete and result.completed > 0 and result.workers == 1


async def _running_actor(ray: ModuleType, worker: int, deadline_s: float) -> object:
    """The actor of ``worker`` once it has completed a request (a readiness signal, not a sleep)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline_s
    while loop.time() < end:
        for entry in ray.util.list_named_actors(all_namespaces=True):
            name = entry["name"]
            if name.startswith("loadgen-") and name.endswith(f"-{worker}"):
                actor = ray.get_actor(name, namespace=entry["namespace"])
                live = await actor.live.remote()
                if live is not None and live.completed > 0:
                    return actor
        await asyncio.sleep(0.1)
    raise AssertionError(f"worker {worker}'s actor never completed a request")


def test_without_ray_nothing_imports_it_and_without_the_package_ray_is_one_line() -> None:
    code = "import sys\nimport loadgen.cli.run_cmd, loadgen.cli.sweep_cmd, loadgen.run.session\nprint('ray' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
    code = (
        "import sys\nsys.modules['ray'] = None\nfrom loadgen.cli import main\n"
        "sys.argv = ['loadgen', 'run', '--url', 'http://127.0.0.1:9/v1', '--concurrency', '1', '--requests', '1',"
        " '--ray', 'local']\nmain()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "pip install 'loadgen[ray]'" in done.stderr and "Traceback" not in done.stderr
