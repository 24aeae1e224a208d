"""Prometheus metrics of the jobs and GPUs, in the text exposition format (0.0.4).

The format is a few lines of text, so it is written here: rsupd gains no dependency.
Served over HTTP on a loopback address, or kept in a file for node exporter's textfile
collector; both are off unless rsupd.toml asks for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.core.errors import UsageError
from rsup.supervisor.core.job import Job
from rsup.supervisor.core.states import JobState
from rsup.supervisor.effects import devices
from rsup.supervisor.effects.procwait import wait_event
from rsup.supervisor.effects.store import Store
from rsup.supervisor.surfaces import listen

log = structlog.get_logger("rsupd")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_PORT = 9464  # the port the OpenTelemetry Prometheus exporter made common
GPU_TTL = 5.0  # telemetry may run rocm-smi: frequent scrapes share one reading
REQUEST_TIMEOUT = 10.0  # a client that sends half a request is dropped
MAX_HEAD = 16 * 1024
TEXTFILE_INTERVAL = 15.0

Telemetry = Callable[[], list[dict[str, Any]]]
Labels = dict[str, str]


class MetricsError(UsageError, ValueError):
    """A metrics setting rsupd refuses; the message says what to change."""


@dataclass
class Family:
    name: str
    kind: str  # gauge | counter
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, value: float | None, **labels: str) -> None:
        if value is not None:
            self.samples.append((labels, float(value)))


# collecting -------------------------------------------------------------------


def render_metrics(store: Store, gpus: list[dict[str, Any]] | None = None) -> str:
    """Every metric as exposition text; `gpus` defaults to reading telemetry now."""
    families = job_families(store) + gpu_families(devices.telemetry() if gpus is None else gpus)
    return "".join(_family_text(f) for f in families if f.samples)


def job_families(store: Store) -> list[Family]:
    f = {
        "state": Family("rsup_job_state", "gauge", "1 for the state the job is in, else 0."),
        "attempts": Family("rsup_job_attempts_total", "counter", "Attempts started."),
        "faults": Family(
            "rsup_job_faults_total", "counter", "Attempts that ended in a fault, by category."
        ),
        "epoch": Family("rsup_job_epoch", "gauge", "Epoch of the last progress report."),
        "epochs": Family("rsup_job_epochs", "gauge", "Epochs the run is set to train."),
        "step": Family("rsup_job_step", "gauge", "Step of the last progress report."),
        "eta": Family("rsup_job_eta_seconds", "gauge", "Estimated seconds left in the run."),
        "map50": Family("rsup_job_map50", "gauge", "Last validation mAP at IoU 0.5."),
        "map": Family("rsup_job_map50_95", "gauge", "Last validation mAP at IoU 0.5:0.95."),
        "loss": Family("rsup_job_loss", "gauge", "Last training losses, by name."),
        "seen": Family(
            "rsup_job_progress_timestamp_seconds", "gauge", "When the job last reported progress."
        ),
    }
    for job in store.jobs():
        _job_samples(f, job, store)
    return list(f.values())


def _job_samples(f: dict[str, Family], job: Job, store: Store) -> None:
    name = job.name
    for state in JobState:
        f["state"].add(1.0 if job.state == state else 0.0, job=name, state=state.value)
    f["attempts"].add(job.attempts, job=name)
    faults = Counter(a.fault for a in store.attempts(name) if a.fault)
    for category, count in sorted(faults.items()):
        f["faults"].add(count, job=name, category=str(category))
    progress = job.progress or {}
    for key, family in (("epoch", "epoch"), ("epochs", "epochs"), ("step", "step"),
                        ("eta_s", "eta"), ("mAP50", "map50"), ("mAP50-95", "map"),
                        ("at", "seen")):  # fmt: skip
        f[family].add(_number(progress.get(key)), job=name)
    losses = progress.get("losses")
    for loss, value in sorted(losses.items() if isinstance(losses, dict) else []):
        f["loss"].add(_number(value), job=name, name=str(loss))


def gpu_families(gpus: list[dict[str, Any]]) -> list[Family]:
    util = Family("rsup_gpu_utilization", "gauge", "GPU busy fraction (0 to 1).")
    used = Family("rsup_gpu_memory_used_bytes", "gauge", "GPU memory in use.")
    total = Family("rsup_gpu_memory_total_bytes", "gauge", "GPU memory in all.")
    for gpu in gpus:
        index = str(gpu.get("index"))
        percent = _number(gpu.get("util"))
        util.add(None if percent is None else percent / 100.0, gpu=index)
        used.add(_number(gpu.get("mem_used")), gpu=index)
        total.add(_number(gpu.get("mem_total")), gpu=index)
    return [util, used, total]


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


# the text format --------------------------------------------------------------


def _family_text(family: Family) -> str:
    lines = [f"# HELP {family.name} {_escape_help(family.help)}", f"# TYPE {family.name} "
             f"{family.kind}"]  # fmt: skip
    for labels, value in family.samples:
        pairs = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
        lines.append(f"{family.name}{{{pairs}}} {_value(value)}" if pairs else
                     f"{family.name} {_value(value)}")  # fmt: skip
    return "\n".join(lines) + "\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


# GPU readings, shared and off the loop -----------------------------------------


class GpuCache:
    """The last telemetry reading, refreshed in a thread at most every `ttl` seconds."""

    def __init__(self, read: Telemetry = devices.telemetry, ttl: float = GPU_TTL) -> None:
        self.read, self.ttl = read, ttl
        self.value: list[dict[str, Any]] = []
        self.at = -math.inf
        self.lock = asyncio.Lock()

    async def get(self) -> list[dict[str, Any]]:
        async with self.lock:
            if time.monotonic() - self.at >= self.ttl:
                try:
                    self.value = await asyncio.to_thread(self.read)
                except Exception as exc:  # telemetry is best effort, never a failed scrape
                    log.warning("gpu telemetry failed", error=repr(exc))
                    self.value = []
                self.at = time.monotonic()
            return self.value


# HTTP ------------------------------------------------------------------------


def check_host(host: str, allow_remote: bool = False) -> None:
    """Refuse a listener reachable from the network unless it was asked for explicitly."""
    if not allow_remote and not listen.is_loopback(host):
        raise MetricsError(
            f"refusing to serve metrics on {host}: job names, states and GPU use would be "
            f"readable from the network. Listen on 127.0.0.1 (or ::1) and scrape from this "
            f"machine, or allow a remote listener explicitly"
        )


def parse_listen(value: str) -> tuple[str, int]:
    """HOST:PORT -> (host, port): 127.0.0.1:9464, [::1]:9464, or :9464 for 127.0.0.1."""
    found = listen.split(value)
    if found is None:
        raise MetricsError(
            f"metrics listen address {value!r} is not HOST:PORT (e.g. 127.0.0.1:9464)"
        )
    return found


async def serve_metrics(
    store: Store,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    allow_remote: bool = False,
    gpus: GpuCache | None = None,
) -> asyncio.Server:
    """Answer GET /metrics on host:port; close the returned server to stop."""
    check_host(host, allow_remote)
    cache = gpus or GpuCache()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), REQUEST_TIMEOUT)
            status, body = await _answer(head, store, cache)
            writer.write(_response(status, body, head.startswith(b"HEAD ")))
            await writer.drain()
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ConnectionError):  # fmt: skip
            pass  # a broken or slow client: drop it
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, host, port, limit=MAX_HEAD)


async def _answer(head: bytes, store: Store, cache: GpuCache) -> tuple[str, bytes]:
    parts = head.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return "400 Bad Request", b"not an HTTP request\n"
    method, path = parts[0], parts[1].split(b"?", 1)[0]
    if method not in (b"GET", b"HEAD"):
        return "405 Method Not Allowed", b"only GET and HEAD\n"
    if path == b"/":
        return "200 OK", b"rsup metrics: see /metrics\n"
    if path != b"/metrics":
        return "404 Not Found", b"rsup serves /metrics only\n"
    gpus = await cache.get()
    try:
        return "200 OK", render_metrics(store, gpus).encode("utf-8")
    except Exception as exc:
        log.exception("metrics could not be read")
        return "500 Internal Server Error", f"rsup metrics failed: {exc}\n".encode()


def _response(status: str, body: bytes, head_only: bool) -> bytes:
    allow = "Allow: GET, HEAD\r\n" if status.startswith("405") else ""
    header = (f"HTTP/1.1 {status}\r\nContent-Type: {CONTENT_TYPE}\r\n"
              f"Content-Length: {len(body)}\r\n{allow}Connection: close\r\n\r\n")  # fmt: skip
    return header.encode("ascii") + (b"" if head_only else body)


# node exporter's textfile collector ------------------------------------------------


def write_textfile(store: Store, path: Path, gpus: list[dict[str, Any]] | None = None) -> None:
    """Write the metrics to `path` atomically (the collector never reads half a file)."""
    text = render_metrics(store, gpus)
    # not *.prom: the collector skips it while it is being written
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.chmod(0o644)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


class TextfileWriter:
    """Keeps `path` current: rewritten when a job changes (`changed`, an Engine listener)
    and every `interval` seconds for progress and GPU readings."""

    def __init__(self, store: Store, path: Path, interval: float = TEXTFILE_INTERVAL,
                 gpus: GpuCache | None = None) -> None:  # fmt: skip
        self.store, self.path, self.interval = store, path, interval
        self.gpus = gpus or GpuCache()
        self.wake = asyncio.Event()
        self.last_error: str | None = None
        self.writes = 0

    def changed(self) -> None:
        self.wake.set()

    async def run(self) -> None:
        """Write until cancelled; a failed write is logged (once per distinct error)."""
        while True:
            self.wake.clear()
            self.write_once(await self.gpus.get())
            await wait_event(self.wake, self.interval)

    def write_once(self, gpus: list[dict[str, Any]]) -> None:
        try:
            write_textfile(self.store, self.path, gpus)
        except OSError as exc:
            error = f"{exc.strerror or exc} ({self.path})"
            if error != self.last_error:
                log.warning("metrics textfile not written; will retry", error=error,
                            fix="create the folder or let rsupd's user write to it")  # fmt: skip
            self.last_error = error
        else:
            self.last_error = None
            self.writes += 1


class Exporter:
    """What rsupd runs when rsupd.toml asks for metrics: the HTTP endpoint, the textfile,
    both or neither. `changed` is an Engine listener; `close` stops both."""

    def __init__(self) -> None:
        self.server: asyncio.Server | None = None
        self.writer: TextfileWriter | None = None
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, store: Store, listen: str | None = None, textfile: Path | None = None,
                    allow_remote: bool = False) -> Exporter:  # fmt: skip
        self = cls()
        gpus = GpuCache()
        if listen:
            host, port = parse_listen(listen)
            self.server = await serve_metrics(store, host, port, allow_remote=allow_remote,
                                              gpus=gpus)  # fmt: skip
            log.info("serving metrics on /metrics", host=host, port=port)
        if textfile is not None:
            self.writer = TextfileWriter(store, textfile, gpus=gpus)
            self.task = asyncio.create_task(self.writer.run())
        return self

    def changed(self) -> None:
        if self.writer is not None:
            self.writer.changed()

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
