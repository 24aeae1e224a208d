"""The staged GPU probe end to end on the CPU: real child processes, real timeouts, real kills.

On the ``cpu`` device every stage runs and the verdict is always ``cpu`` (a verdict of
``gpu`` needs a GPU); the remedy ladder still tries and records remedies there.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from rsup.supervisor.probe.ladder import ProbeSetup, VerdictCache, probe_device, run_ladder
from rsup.supervisor.probe.run import (
    FAILED,
    OK,
    SKIPPED,
    TIMEOUT,
    ProbeReport,
    StageResult,
    group_alive,
    load_timeouts,
    parse_timeout_overrides,
    run_probe,
    run_probe_sync,
)
from rsup.supervisor.recognize.remedies import RemedyError, load_remedies, remedies_for_stage
from rsup.workers.probe import BUILTIN_STAGES

from tests.conftest import pid_alive

LIMIT = 3.0  # seconds each misbehaving stage gets
AFTER = "def stage_after(ctx):\n    return {'ran': True}\n"


def group_gone(pgid: int | None) -> bool:
    """No living member (zombies wait for init, which may reap them late)."""
    assert pgid is not None
    return not group_alive(pgid)


# --- the real probe on the CPU ------------------------------------------------------


@pytest.fixture(scope="module")
def cpu_report() -> ProbeReport:
    return run_probe_sync("cpu")


def test_cpu_probe_runs_every_stage(cpu_report: ProbeReport) -> None:
    assert [s.name for s in cpu_report.stages] == list(BUILTIN_STAGES)
    assert all(s.status == OK for s in cpu_report.stages), cpu_report.to_json(indent=1)
    assert cpu_report.verdict == "cpu" and cpu_report.env == {}
    assert cpu_report.info["vendor"] == "cpu" and cpu_report.info["torch"]
    memory = cpu_report.stage("memory")
    assert memory is not None and memory.details["where"] == "host"
    conv = cpu_report.stage("conv2d")
    assert conv is not None and "44x44 3->16 k3" in conv.details["cases"]
    loader = cpu_report.stage("dataloader")
    assert loader is not None and loader.details["context"] == "spawn"
    assert cpu_report.pid is not None
    assert group_gone(cpu_report.pid)  # run_probe returns once the group is dead


def test_report_json_round_trip(cpu_report: ProbeReport) -> None:
    data = json.loads(cpu_report.to_json())
    assert data["verdict"] == "cpu" and data["device"] == "cpu" and data["env"] == {}
    assert {"name", "status", "seconds", "error"} <= set(data["stages"][0])
    assert ProbeReport.from_dict(data) == cpu_report


# --- stages that hang, spin, segfault, abort and raise -----------------------------

MISBEHAVING = {
    # The hang also starts a grandchild: killing the process group must take it too.
    "hang": "import subprocess\n"
    "def stage_hang(ctx):\n"
    "    started()\n"
    "    child = subprocess.Popen(['sleep', '3600'])\n"
    "    open(FOLDER + '/hang.pid', 'w').write(str(child.pid))\n"
    "    time.sleep(3600)\n",
    "spin": "def stage_spin(ctx):\n    started()\n    while True:\n        pass\n",
    "segfault": "import os, signal\n"
    "def stage_segfault(ctx):\n    started()\n    os.kill(os.getpid(), signal.SIGSEGV)\n",
    "abort": "import os\ndef stage_abort(ctx):\n    started()\n    os.abort()\n",
    "raise": "def stage_raise(ctx):\n    started()\n    raise ValueError('kernel said no')\n",
}
# Each stage first notes (wall clock) when it started, to time the report from outside.
HEADER = """import time
FOLDER = {folder!r}
def started():
    with open(FOLDER + '/' + {name!r} + '.started', 'w') as f:
        f.write(repr(time.time()))
"""


def _stage_file(folder: Path, name: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(HEADER.format(folder=str(folder), name=name) + MISBEHAVING[name] + AFTER)
    return path


@pytest.fixture(scope="module")
def misbehaving(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """All five run at once, while a ticker checks that the event loop never stalls."""
    folder = tmp_path_factory.mktemp("stages")

    async def one(name: str) -> tuple[ProbeReport, float]:
        report = await run_probe("cpu", stage_files=[_stage_file(folder, name)],
                                 only=[name, "after"], overrides={name: LIMIT})  # fmt: skip
        return report, time.time()

    async def ticker(gaps: list[float], stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(0.02)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    async def main() -> dict[str, Any]:
        gaps: list[float] = []
        stop = asyncio.Event()
        tick = asyncio.create_task(ticker(gaps, stop))
        results = await asyncio.gather(*(one(name) for name in MISBEHAVING))
        stop.set()
        await tick
        return {"gaps": gaps, "folder": folder, **dict(zip(MISBEHAVING, results, strict=True))}

    return asyncio.run(main())


def _check(misbehaving: dict[str, Any], name: str, status: str) -> StageResult:
    report, ended = misbehaving[name]
    started = float((misbehaving["folder"] / f"{name}.started").read_text())
    assert ended - started <= LIMIT + 1.0, f"{name}: reported {ended - started:.2f} s after start"
    assert [s.name for s in report.stages] == ["import", "detect", name, "after"]
    stage = report.stage(name)
    assert stage is not None and stage.status == status, report.to_json(indent=1)
    assert report.verdict == "cpu" and not report.ok
    assert group_gone(report.pid), f"{name}: the probe's process group outlived the report"
    return stage


@pytest.mark.parametrize("name", ["hang", "spin"])
def test_stage_that_never_returns_is_killed(misbehaving: dict[str, Any], name: str) -> None:
    stage = _check(misbehaving, name, TIMEOUT)
    assert LIMIT <= stage.seconds <= LIMIT + 1.0
    assert f"within {LIMIT:g} s" in (stage.error or "")
    after = misbehaving[name][0].stage("after")
    assert after is not None and after.status == SKIPPED
    assert "ended in stage" in (after.error or "")


def test_hang_grandchild_is_killed_with_the_group(misbehaving: dict[str, Any]) -> None:
    _check(misbehaving, "hang", TIMEOUT)
    grandchild = int((misbehaving["folder"] / "hang.pid").read_text())
    assert not pid_alive(grandchild), "the stage's grandchild outlived the report"


@pytest.mark.parametrize(("name", "signal_name"), [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_crashing_stage_names_the_signal(
    misbehaving: dict[str, Any], name: str, signal_name: str
) -> None:
    stage = _check(misbehaving, name, FAILED)
    assert stage.crashed and stage.how == "crash"
    assert signal_name in (stage.error or "")
    assert f"stage_{name}" in (stage.error or "")  # the faulthandler traceback from stderr
    assert misbehaving[name][0].stage("after").status == SKIPPED


def test_raising_stage_fails_and_the_probe_goes_on(misbehaving: dict[str, Any]) -> None:
    stage = _check(misbehaving, "raise", FAILED)
    assert stage.error == "ValueError: kernel said no" and not stage.crashed
    assert misbehaving["raise"][0].stage("after").status == OK


def test_a_hung_probe_never_blocks_the_loop(misbehaving: dict[str, Any]) -> None:
    assert max(misbehaving["gaps"]) < 0.5


def test_probe_that_never_starts_times_out(tmp_path: Path) -> None:
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\nexec sleep 3600\n")
    python.chmod(0o755)
    started = time.monotonic()
    report = run_probe_sync("cpu", python=str(python), overrides={"startup": 1})
    assert time.monotonic() - started < 1 + 1.0
    first = report.stages[0]
    assert first.name == "import" and first.status == TIMEOUT
    assert "did not start within 1 s" in (first.error or "")
    assert all(s.status == SKIPPED for s in report.stages[1:])
    assert group_gone(report.pid)


def _imports_torch(python: str) -> bool:
    return subprocess.run([python, "-c", "import torch"], capture_output=True).returncode == 0


def test_interpreter_without_rsup_still_runs_the_probe(tmp_path: Path) -> None:
    """The job's interpreter gets rsup.workers through PYTHONPATH, not an install."""
    python = os.path.join(sys.base_prefix, "bin", "python3")
    if not os.path.exists(python) or _imports_torch(python):
        pytest.skip("needs a base interpreter without torch")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    report = run_probe_sync("cpu", python=python, env=env)
    first = report.stages[0]
    assert first.status == FAILED and "No module named 'torch'" in (first.error or "")
    assert [s.status for s in report.stages[1:]] == [SKIPPED] * (len(BUILTIN_STAGES) - 1)


# --- remedies and the ladder --------------------------------------------------------

NEEDS_FIX = """
import os
def stage_needs_fix(ctx):
    with open(COUNTER, "a") as f:
        f.write("x")
    if os.environ.get("RSUP_TEST_FIX") != "1":
        raise RuntimeError("this kernel needs RSUP_TEST_FIX=1")
    return {"fixed": True}
"""

TEST_REMEDIES = """
version: 1
remedies:
  - id: other-stage
    match: {stage: conv2d}
    env: {RSUP_TEST_OTHER: "1"}
  - id: wrong-fix
    match: {stage: needs_fix, how: failed}
    env: {RSUP_TEST_FIX: "0"}
  - id: only-for-timeouts
    match: {stage: needs_fix, how: timeout}
    env: {RSUP_TEST_FIX: "1"}
  - id: right-fix
    match: {stage: needs_fix, how: failed, error: "needs RSUP_TEST_FIX"}
    env: {RSUP_TEST_FIX: "1"}
    flags: {test_fixed: true}
"""


def _needs_fix(tmp_path: Path) -> tuple[ProbeSetup, Path]:
    stage = tmp_path / "needs_fix.py"
    counter = tmp_path / "counter"
    stage.write_text(f"COUNTER = {str(counter)!r}\n" + NEEDS_FIX)
    (tmp_path / "remedies.yaml").write_text(TEST_REMEDIES)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSUP_TEST")}
    return ProbeSetup("cpu", env=env, stage_files=(str(stage),), only=("needs_fix",)), counter


@pytest.fixture(scope="module")
def ladder_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The ladder and two cached probes, side by side to save time."""
    ladder_dir, cache_dir = tmp_path_factory.mktemp("ladder"), tmp_path_factory.mktemp("cache")
    ladder_setup, ladder_counter = _needs_fix(ladder_dir)
    cache_setup, cache_counter = _needs_fix(cache_dir)
    cache_setup = replace(cache_setup, env={**(cache_setup.env or {}), "RSUP_TEST_FIX": "1"})
    state, now = cache_dir / "state", time.time()

    async def cached_twice() -> list[tuple[ProbeReport, str]]:
        runs = []
        for later in (0, 60):
            report = await probe_device(cache_setup, state, remedies=[], now=now + later)
            runs.append((report, cache_counter.read_text()))
        return runs

    async def main() -> tuple[ProbeReport, list[tuple[ProbeReport, str]]]:
        remedies = load_remedies(ladder_dir / "remedies.yaml")
        return await asyncio.gather(run_ladder(ladder_setup, remedies), cached_twice())

    ladder, cached = asyncio.run(main())
    return {"ladder": ladder, "ladder_counter": ladder_counter.read_text(),
            "cached": cached, "state": state}  # fmt: skip


def test_ladder_picks_and_records_the_right_remedy(ladder_runs: dict[str, Any]) -> None:
    report = ladder_runs["ladder"]
    assert report.ok and report.verdict == "cpu", report.to_json(indent=1)
    assert report.env == {"RSUP_TEST_FIX": "1"} and report.remedies == ["right-fix"]
    assert report.flags == {"test_fixed": True}
    tried = [(r["remedy"], r["kept"]) for r in report.rungs]
    assert tried == [(None, True), ("wrong-fix", False), ("right-fix", True)]
    assert ladder_runs["ladder_counter"] == "xxx"  # one stage run per probe


def test_cached_verdict_skips_the_probe_until_invalidated(ladder_runs: dict[str, Any]) -> None:
    (first, count_first), (second, count_second) = ladder_runs["cached"]
    assert first.ok and not first.cached and count_first == "x"
    assert second.cached and second.stages == first.stages and count_second == "x"
    state = ladder_runs["state"]
    assert (state / "miopen" / "userdb").is_dir() and (state / "pylib" / "rsup").is_dir()
    assert VerdictCache(state).invalidate("cpu") == 1
    assert json.loads((state / "probe-cache.json").read_text())["entries"] == {}


def test_verdict_cache_ttl_and_invalidation(tmp_path: Path) -> None:
    cache = VerdictCache(tmp_path, ttl=100)
    report = ProbeReport("cuda:0", [StageResult("import", OK, 1.0)], "gpu_with_remedies",
                         env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"})  # fmt: skip
    cache.put("k0", report, now=1000.0)
    cache.put("k1", ProbeReport("cuda:1", [], "gpu"), now=1000.0)
    hit = cache.get("k0", now=1099.0)
    assert hit is not None and hit.cached and hit.env == report.env
    assert cache.get("k0", now=1101.0) is None  # expired
    assert cache.invalidate("0") == 1  # "0" names cuda:0
    assert cache.get("k0", now=1001.0) is None and cache.get("k1", now=1001.0) is not None
    data = json.loads((tmp_path / "probe-cache.json").read_text())
    assert data["version"] == 1 and set(data["entries"]) == {"k1"}


def test_seed_remedies_match_known_failures() -> None:
    seed = load_remedies()

    def first(stage: str, how: str, text: str, arch: str) -> str | None:
        found = remedies_for_stage(seed, stage, how, text, "amd", arch)
        return found[0].id if found else None

    no_binary = "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!"
    assert first("detect", "crash", no_binary, "gfx1031") == "gfx-override-rdna2"
    assert first("alloc", "failed", "HIP error: invalid device function", "gfx1102") == (
        "gfx-override-rdna3"
    )
    assert first("alloc", "crash", no_binary, "gfx1012") == "gfx-override-rdna1-gfx1010"
    assert first("conv2d", "timeout", "", "gfx1010") == "rdna1-conv-implicit-gemm"
    assert first("conv2d", "timeout", "", "gfx1030") == "miopen-find-fast"
    assert first("grad_checkpoint", "crash", "", "gfx1030") == "grad-checkpoint-unsafe"
    assert first("dataloader", "timeout", "", "gfx1030") == "dataloader-spawn-persistent"
    assert first("matmul", "failed", "wrong numbers", "gfx1030") is None


def test_bad_remedy_entry_names_its_place(tmp_path: Path) -> None:
    path = tmp_path / "remedies.yaml"
    path.write_text("remedies:\n  - id: ok\n    match: {stage: conv2d}\n"
                    "  - id: bad\n    match: {stage: conv2d, how: sometimes}\n")  # fmt: skip
    with pytest.raises(RemedyError, match=r"remedies\[1\].*how"):
        load_remedies(path)


def test_timeouts_from_config_and_overrides() -> None:
    timeouts = load_timeouts()
    assert timeouts.for_stage("conv2d") >= 600 and timeouts.for_stage("my_kernel") == 300
    custom = timeouts.with_overrides(parse_timeout_overrides(["conv2d=15m", "startup=5"]))
    assert custom.for_stage("conv2d") == 900 and custom.startup == 5
    with pytest.raises(ValueError):
        parse_timeout_overrides(["conv2d"])


def test_daemon_side_never_imports_torch() -> None:
    code = (
        "import sys, rsup.supervisor.probe.run, rsup.supervisor.probe.ladder\n"
        "import rsup.supervisor.recognize.remedies\n"
        "print(sorted({'torch', 'numpy'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
