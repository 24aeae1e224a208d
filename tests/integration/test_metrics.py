"""Prometheus metrics: scraped over real HTTP and parsed; the textfile; a real run's numbers."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects.store import Store
from rsup.supervisor.surfaces import metrics, report

from tests.conftest import FIXTURES, kill_leftovers, write_spec

GPUS: list[dict[str, Any]] = [
    {"index": "0", "util": 87.0, "mem_used": 6.5e9, "mem_total": 8.0e9, "source": "fake"},
    {"index": "1", "util": None, "mem_used": None, "mem_total": None, "source": "fake"},
]
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)",?')

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[Samples, dict[str, str]]:
    """Exposition text -> ({(name, labels): value}, {name: type}); strict about the form."""
    samples: Samples = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            types[name] = kind
            continue
        if line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not an exposition line: {line!r}"
        name, raw, value = match.groups()
        assert name in types, f"{name} has no TYPE line before it"
        labels = LABEL.findall(raw or "")
        assert ",".join(f'{k}="{v}"' for k, v in labels) == (raw or "").rstrip(",")
        unescaped = {
            (k, v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")) for k, v in labels
        }
        samples[(name, frozenset(unescaped))] = float(value)
    return samples, types


def value(samples: Samples, metric: str, /, **labels: str) -> float:
    return samples[(metric, frozenset(labels.items()))]


def fleet(tmp_path: Path) -> Store:
    """thermal: running its 4th attempt after two memory faults and a hang; done: succeeded."""
    store = Store(tmp_path / "state.db")
    progress = {
        "epoch": 37,
        "epochs": 100,
        "losses": {"box_loss": 1.25, "cls_loss": 0.5},
        "mAP50": 0.61,
        "mAP50-95": 0.42,
        "eta_s": 5400.0,
        "at": 1_700_000_000.0,
    }
    store.add_job(
        Job(
            "thermal",
            1000,
            JobSpec(name="thermal", command=["x"]),
            JobState.RUNNING,
            "running",
            1.0,
            2.0,
            attempts=4,
            device="0",
            progress=progress,
        )
    )
    for n, fault in enumerate(["gpu_memory_fault", "hang", "gpu_memory_fault", None], 1):
        store.add_attempt(Attempt("thermal", n, f"/a/{n}", float(n), fault=fault))
    store.add_job(
        Job(
            'odd"name',
            0,
            JobSpec(name="odd", command=["x"]),
            JobState.SUCCEEDED,
            "done",
            3.0,
            4.0,
            attempts=1,
        )
    )
    store.add_attempt(Attempt('odd"name', 1, "/b/1", 3.0))
    return store


def test_render_metrics(tmp_path: Path) -> None:
    samples, types = parse(metrics.render_metrics(fleet(tmp_path), GPUS))
    for state in JobState:
        assert value(samples, "rsup_job_state", job="thermal", state=state.value) == (
            1.0 if state == JobState.RUNNING else 0.0
        )
    assert value(samples, "rsup_job_state", job='odd"name', state="succeeded") == 1.0
    assert value(samples, "rsup_job_attempts_total", job="thermal") == 4
    assert value(samples, "rsup_job_faults_total", job="thermal", category="gpu_memory_fault") == 2
    assert value(samples, "rsup_job_faults_total", job="thermal", category="hang") == 1
    assert not any(n == "rsup_job_faults_total" and ("job", 'odd"name') in ls for n, ls in samples)
    assert value(samples, "rsup_job_epoch", job="thermal") == 37
    assert value(samples, "rsup_job_epochs", job="thermal") == 100
    assert value(samples, "rsup_job_map50", job="thermal") == 0.61
    assert value(samples, "rsup_job_map50_95", job="thermal") == 0.42
    assert value(samples, "rsup_job_loss", job="thermal", name="box_loss") == 1.25
    assert value(samples, "rsup_job_eta_seconds", job="thermal") == 5400
    assert value(samples, "rsup_gpu_utilization", gpu="0") == pytest.approx(0.87)
    assert value(samples, "rsup_gpu_memory_used_bytes", gpu="0") == 6.5e9
    assert not any(labels == frozenset({("gpu", "1")}) for _, labels in samples)  # unreadable
    assert types["rsup_job_attempts_total"] == "counter" and types["rsup_job_epoch"] == "gauge"


def test_nothing_to_report_is_an_empty_page(tmp_path: Path) -> None:
    assert metrics.render_metrics(Store(tmp_path / "state.db"), []) == ""


async def http(url: str, method: str = "GET") -> tuple[int, str, str]:
    def fetch() -> tuple[int, str, str]:
        request = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as reply:
                return reply.status, reply.headers["Content-Type"], reply.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers["Content-Type"], exc.read().decode()

    return await asyncio.to_thread(fetch)


def test_scrape_over_http(tmp_path: Path) -> None:
    store = fleet(tmp_path)
    reads: list[float] = []

    def telemetry() -> list[dict[str, Any]]:
        reads.append(time.monotonic())
        return GPUS

    async def scenario() -> None:
        cache = metrics.GpuCache(telemetry, ttl=60)
        server = await metrics.serve_metrics(store, "127.0.0.1", 0, gpus=cache)
        port = server.sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        try:
            status, kind, body = await http(f"{base}/metrics")
            assert (status, kind) == (200, metrics.CONTENT_TYPE)
            samples, _ = parse(body)
            assert value(samples, "rsup_job_epoch", job="thermal") == 37
            assert value(samples, "rsup_gpu_memory_total_bytes", gpu="0") == 8e9
            # the store is read at each scrape; telemetry at most once per ttl
            store.update_job("thermal", progress={"epoch": 38, "epochs": 100})
            _, _, body = await http(f"{base}/metrics?x=1")
            assert value(parse(body)[0], "rsup_job_epoch", job="thermal") == 38
            assert len(reads) == 1
            assert (await http(f"{base}/nope"))[0] == 404
            assert (await http(f"{base}/metrics", "POST"))[0] == 405
            assert (await http(f"{base}/metrics", "HEAD"))[::2] == (200, "")
            await junk_is_dropped(port)
            assert (await http(f"{base}/metrics"))[0] == 200  # still serving
        finally:
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


async def junk_is_dropped(port: int) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"hello\r\n\r\n")
    await writer.drain()
    assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 400 ")
    writer.close()


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.5", "::", "example.org"])
def test_non_loopback_is_refused(tmp_path: Path, host: str) -> None:
    store = Store(tmp_path / "state.db")
    with pytest.raises(metrics.MetricsError, match="refusing to serve metrics"):
        asyncio.run(metrics.serve_metrics(store, host, 0))
    metrics.check_host(host, allow_remote=True)  # asked for explicitly: allowed
    for ok in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        metrics.check_host(ok)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("127.0.0.1:9464", ("127.0.0.1", 9464)), ("[::1]:9100", ("::1", 9100)),
     (":9464", ("127.0.0.1", 9464)), ("localhost:80", ("localhost", 80))],
)  # fmt: skip
def test_parse_listen(text: str, expected: tuple[str, int]) -> None:
    assert metrics.parse_listen(text) == expected


@pytest.mark.parametrize("text", ["9464", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:0", ":70000"])
def test_parse_listen_refuses(text: str) -> None:
    with pytest.raises(metrics.MetricsError, match="not HOST:PORT"):
        metrics.parse_listen(text)


def test_exporter_serves_and_writes_until_closed(tmp_path: Path) -> None:
    store = fleet(tmp_path)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    textfile = tmp_path / "rsup.prom"

    async def scenario() -> None:
        exporter = await metrics.Exporter.start(store, f"127.0.0.1:{port}", textfile)
        try:
            status, _, body = await http(f"http://127.0.0.1:{port}/metrics")
            assert status == 200 and "rsup_job_attempts_total" in body
            deadline = time.monotonic() + 10
            while not textfile.exists():
                assert time.monotonic() < deadline, "no textfile written"
                await asyncio.sleep(0.01)
            exporter.changed()
        finally:
            await exporter.close()
        with pytest.raises(urllib.error.URLError):
            await http(f"http://127.0.0.1:{port}/metrics")
        assert exporter.task is not None and exporter.task.done()

    asyncio.run(scenario())
    off = asyncio.run(metrics.Exporter.start(store))  # nothing asked for: nothing runs
    assert off.server is None and off.task is None


def test_textfile_is_replaced_atomically(tmp_path: Path) -> None:
    store = fleet(tmp_path)
    path = tmp_path / "prom" / "rsup.prom"
    path.parent.mkdir()
    metrics.write_textfile(store, path, GPUS)
    first = path.stat().st_ino
    assert value(parse(path.read_text())[0], "rsup_job_epoch", job="thermal") == 37
    store.update_job("thermal", progress={"epoch": 40})
    metrics.write_textfile(store, path, GPUS)
    assert path.stat().st_ino != first  # a new file renamed over: never half written
    assert value(parse(path.read_text())[0], "rsup_job_epoch", job="thermal") == 40
    assert [p.name for p in path.parent.iterdir()] == ["rsup.prom"]
    assert path.stat().st_mode & 0o777 == 0o644


def test_textfile_writer_follows_changes_and_survives_a_missing_folder(tmp_path: Path) -> None:
    store = fleet(tmp_path)
    path = tmp_path / "later" / "rsup.prom"

    async def until(cond: Any, what: str) -> None:
        deadline = time.monotonic() + 10
        while not cond():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            await asyncio.sleep(0.01)

    async def scenario() -> None:
        writer = metrics.TextfileWriter(
            store, path, interval=3600, gpus=metrics.GpuCache(lambda: GPUS)
        )
        task = asyncio.create_task(writer.run())
        try:
            await until(lambda: writer.last_error is not None, "the failed write")
            path.parent.mkdir()
            writer.changed()  # an Engine listener call: write now, not in an hour
            await until(path.exists, "the textfile")
            store.update_job("thermal", progress={"epoch": 41})
            writer.changed()
            await until(lambda: 'rsup_job_epoch{job="thermal"} 41' in path.read_text(), "41")
            assert writer.last_error is None and writer.writes == 2
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(scenario())


def test_metrics_and_report_of_a_real_run(tmp_path: Path) -> None:
    """`rsup run` of a job that runs out of memory once: what its state.db yields."""
    spec = write_spec(
        tmp_path,
        "epochs",
        [sys.executable, str(FIXTURES / "report_epochs.py"), str(tmp_path / "marker"), "4"],
        restart={"backoff": {"initial": 0.2, "max": 1}},
    )
    state = tmp_path / "state"
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "rsup.supervisor.cli.main",
                "run",
                str(spec),
                "--state-dir",
                str(state),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        kill_leftovers(state)
    assert result.returncode == 0, result.stderr[-3000:]
    store = Store(state / "state.db")
    samples, _ = parse(metrics.render_metrics(store, []))
    assert value(samples, "rsup_job_state", job="epochs", state="succeeded") == 1
    assert value(samples, "rsup_job_attempts_total", job="epochs") == 2
    assert value(samples, "rsup_job_faults_total", job="epochs", category="oom") == 1
    assert value(samples, "rsup_job_epoch", job="epochs") == 4
    assert value(samples, "rsup_job_map50", job="epochs") == pytest.approx(0.4)
    assert value(samples, "rsup_job_loss", job="epochs", name="box_loss") == 0.5

    data = report.report_data(store, "epochs")
    assert [(a["n"], a["fault"]) for a in data["attempts"]] == [(1, "oom"), (2, None)]
    assert [(f["attempt"], f["label"]) for f in data["faults"]] == [(1, "oom")]
    assert [d["label"] for d in data["decisions"]] == ["restart", "succeed"]
    assert [(p["attempt"], p["value"]) for p in data["progress"]] == [
        (1, 1.0),
        (1, 2.0),
        (2, 3.0),
        (2, 4.0),
    ]
    fault, ended = data["faults"][0]["t"], data["attempts"][0]["end"]
    assert data["progress"][1]["t"] <= fault <= ended < data["attempts"][1]["start"]
    pytest.importorskip("matplotlib")
    report.render_html(store, "epochs", tmp_path / "epochs.html")
    assert "data:image/png;base64," in (tmp_path / "epochs.html").read_text()
