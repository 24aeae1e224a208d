"""Notifications from a real rsupd through Apprise json:// to a local HTTP server."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.conftest import running_rsupd, wait_for, write_spec

FAIL = [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]
QUICK = [sys.executable, "-c", "print('fine')"]


@contextlib.contextmanager
def hook() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """A local webhook that keeps every JSON body Apprise posts to it."""
    received: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            received.append(json.loads(self.rfile.read(size)))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], received
    finally:
        server.shutdown()
        server.server_close()


def config(folder: Path, urls: list[str], on: list[str]) -> list[str]:
    path = folder / "rsupd.toml"
    path.write_text(
        f'[web]\nlisten = ""\n[notify]\nurls = {json.dumps(urls)}\non = {json.dumps(on)}\n'
    )
    return ["--config", str(path)]


def test_failed_and_succeeded_jobs_notify(tmp_path: Path) -> None:
    with hook() as (port, received):
        args = config(
            tmp_path, [f"json://127.0.0.1:{port}/hook"], ["failed", "succeeded", "gave_up"]
        )
        with running_rsupd(tmp_path, args=args) as daemon:
            bad = write_spec(tmp_path, "crasher", FAIL, restart={"max_attempts": 1})
            assert daemon.cli("start", str(bad)).returncode == 0
            assert daemon.cli("start", str(write_spec(tmp_path, "fine", QUICK))).returncode == 0
            daemon.wait_state("crasher", "failed")
            daemon.wait_state("fine", "succeeded")

            def about(job: str, what: str) -> list[dict[str, Any]]:
                return [m for m in received if job in m["title"] and what in m["title"]]

            wait_for(lambda: about("crasher", "failed") and about("fine", "succeeded"), 20,
                     lambda: f"both notifications (got {received})")  # fmt: skip
            failed = about("crasher", "failed")[0]
            reason = daemon.status("crasher")["reason"]
            assert "attempt 1" in failed["title"] and "job crasher, attempt 1" in failed["message"]
            assert reason in failed["message"]  # what rsup decided, as `rsup events` says it
            fine = about("fine", "succeeded")[0]
            assert "attempt 1" in fine["message"] and "rsup:" in fine["message"]


@contextlib.contextmanager
def silent_server() -> Iterator[int]:
    """Accepts connections (the kernel does) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def test_a_hanging_endpoint_does_not_block_rsupd(tmp_path: Path) -> None:
    with silent_server() as port:
        args = config(tmp_path, [f"json://127.0.0.1:{port}/hook"], ["succeeded", "failed"])
        with running_rsupd(tmp_path, args=args) as daemon:
            for i in range(4):
                spec = write_spec(tmp_path, f"quick{i}", QUICK)
                assert daemon.cli("start", str(spec)).returncode == 0
            for i in range(4):
                daemon.wait_state(f"quick{i}", "succeeded")
            for _ in range(5):  # while four sends hang on the silent endpoint
                began = time.monotonic()
                assert daemon.cli("status", "--json").returncode == 0
                assert time.monotonic() - began < 3.0
            sleeper = write_spec(tmp_path, "after", QUICK)
            assert daemon.cli("start", str(sleeper)).returncode == 0
            daemon.wait_state("after", "succeeded", timeout=15)
