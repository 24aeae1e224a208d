"""The dashboard of a real rsupd: tokens, cookie, the JSON API, live events, controls."""

from __future__ import annotations

import contextlib
import json
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import requests

from tests.conftest import Rsupd, running_rsupd, wait_for, write_spec

SLEEP = [sys.executable, "-c", "import time; time.sleep(120)"]
QUICK = [sys.executable, "-c", "print('hello from the job')"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def web_config(folder: Path, port: int, *extra: str) -> list[str]:
    path = folder / "rsupd.toml"
    path.write_text("\n".join(["[web]", f'listen = "127.0.0.1:{port}"', *extra]) + "\n")
    return ["--config", str(path)]


@contextlib.contextmanager
def dashboard(folder: Path, *extra: str) -> Iterator[tuple[Rsupd, str]]:
    """A real rsupd with [web] on a free port, and the URL `rsup web` prints."""
    port = free_port()
    with running_rsupd(folder, args=web_config(folder, port, *extra)) as daemon:
        result = daemon.cli("web")
        assert result.returncode == 0, result.stderr
        yield daemon, result.stdout.strip()


def signed_in(url: str) -> tuple[requests.Session, str]:
    """A session that opened the tokened URL once (so it holds the cookie), and the base."""
    session = requests.Session()
    first = session.get(url, allow_redirects=False, timeout=10)
    assert first.status_code == 303
    return session, url.split("/?token=")[0]


def test_token_cookie_and_jobs_match_status(tmp_path: Path) -> None:
    with dashboard(tmp_path) as (daemon, url):
        base, token = url.split("/?token=")
        assert daemon.cli("start", str(write_spec(tmp_path, "sleeper", SLEEP))).returncode == 0
        daemon.wait_state("sleeper", "running")
        for path in ("/", "/api/jobs", "/api/stream", "/jobs/sleeper", "/api/jobs/sleeper/events"):
            assert requests.get(base + path, timeout=10).status_code == 401, path
        wrong = {"Authorization": "Bearer " + "x" * 43}
        assert requests.get(base + "/api/jobs", headers=wrong, timeout=10).status_code == 401
        token_file = daemon.state / "web" / "token-0"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert token_file.read_text().strip() == token

        first = requests.get(url, allow_redirects=False, timeout=10)
        assert first.status_code == 303 and "token" not in first.headers["Location"]
        cookie = first.headers["Set-Cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
        session, _ = signed_in(url)
        page = session.get(base + "/", timeout=10)
        assert page.status_code == 200 and "EventSource" in page.text

        web_jobs = session.get(base + "/api/jobs", timeout=10).json()
        cli_jobs = json.loads(daemon.cli("status", "--json").stdout)
        moving = {"since", "elapsed_s", "cost", "updated"}
        strip = lambda jobs: [{k: v for k, v in j.items() if k not in moving} for j in jobs]  # noqa: E731
        assert strip(web_jobs) == strip(cli_jobs)
        bearer = {"Authorization": f"Bearer {token}"}
        one = requests.get(base + "/api/jobs/sleeper", headers=bearer, timeout=10).json()
        assert one["name"] == "sleeper" and one["state"] == "running"
        missing = session.get(base + "/api/jobs/nope/events", timeout=10)
        assert missing.status_code == 404


def test_events_and_logs_match_the_cli(tmp_path: Path) -> None:
    with dashboard(tmp_path) as (daemon, url):
        session, base = signed_in(url)
        assert daemon.cli("start", str(write_spec(tmp_path, "quick", QUICK))).returncode == 0
        daemon.wait_state("quick", "succeeded")
        events = session.get(base + "/api/jobs/quick/events", timeout=10).json()
        assert events == daemon.events("quick")
        logs = session.get(base + "/api/jobs/quick/logs?lines=5", timeout=10).json()
        assert "hello from the job" in logs["data"]
        report = session.get(base + "/api/jobs/quick/report", timeout=10).json()
        assert report["job"] == "quick" and report["attempts"][0]["n"] == 1


class Stream:
    """Reads /api/stream on a thread; `frames` grows as server-sent events arrive."""

    def __init__(self, session: requests.Session, url: str) -> None:
        self.frames: list[tuple[str, Any]] = []
        self.response = session.get(url, stream=True, timeout=30)
        assert self.response.status_code == 200
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        kind = ""
        with contextlib.suppress(requests.RequestException, AttributeError, ValueError):
            for line in self.response.iter_lines(decode_unicode=True):
                if line.startswith("event: "):
                    kind = line[7:]
                elif line.startswith("data: "):
                    self.frames.append((kind, json.loads(line[6:])))

    def job_state(self, name: str) -> str | None:
        for kind, data in reversed(self.frames):
            if kind == "jobs":
                return next((j["state"] for j in data if j["name"] == name), None)
        return None

    def close(self) -> None:
        """Shut the socket first: the reader thread is blocked in a read, and closing the
        response alone waits for that read's timeout (30 s)."""
        connection = getattr(self.response.raw, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self.response.close()
        self.thread.join(10)


def test_stream_delivers_a_state_change(tmp_path: Path) -> None:
    with dashboard(tmp_path) as (daemon, url):
        session, base = signed_in(url)
        assert daemon.cli("start", str(write_spec(tmp_path, "sleeper", SLEEP))).returncode == 0
        daemon.wait_state("sleeper", "running")
        stream = Stream(session, base + "/api/stream")
        job_stream = Stream(session, base + "/api/stream?job=sleeper")
        try:
            wait_for(lambda: stream.job_state("sleeper") == "running", 10, "the first snapshot")
            assert daemon.cli("stop", "sleeper", "--no-wait").returncode == 0
            wait_for(lambda: stream.job_state("sleeper") == "stopped", 5, "the stop pushed live")
            wait_for(
                lambda: any(
                    k == "event" and d.get("new") == "stopped" for k, d in job_stream.frames
                ),
                5,
                "the state_changed event on the job's stream",
            )
        finally:
            stream.close()
            job_stream.close()


def test_controls_need_csrf_and_post(tmp_path: Path) -> None:
    with dashboard(tmp_path, "control = true") as (daemon, url):
        session, base = signed_in(url)
        assert daemon.cli("start", str(write_spec(tmp_path, "sleeper", SLEEP))).returncode == 0
        daemon.wait_state("sleeper", "running")
        stop = base + "/api/jobs/sleeper/stop"
        assert session.get(stop, timeout=10).status_code == 405  # no state change over GET
        assert session.post(stop, timeout=10).status_code == 403
        bad = {"X-CSRF-Token": "0" * 32}
        assert session.post(stop, headers=bad, timeout=10).status_code == 403
        assert daemon.status("sleeper")["state"] == "running"
        csrf = session.get(base + "/api/me", timeout=10).json()["csrf"]
        done = session.post(stop, headers={"X-CSRF-Token": csrf}, timeout=30)
        assert done.status_code == 200, done.text
        daemon.wait_state("sleeper", "stopped")
        again = session.post(base + "/api/jobs/sleeper/restart", headers={"X-CSRF-Token": csrf},
                             timeout=60)  # fmt: skip
        assert again.status_code == 200, again.text
        daemon.wait_state("sleeper", "running", "starting", "probing")


def test_controls_off_by_default(tmp_path: Path) -> None:
    with dashboard(tmp_path) as (daemon, url):
        session, base = signed_in(url)
        assert daemon.cli("start", str(write_spec(tmp_path, "sleeper", SLEEP))).returncode == 0
        daemon.wait_state("sleeper", "running")
        csrf = session.get(base + "/api/me", timeout=10).json()["csrf"]
        refused = session.post(base + "/api/jobs/sleeper/stop", headers={"X-CSRF-Token": csrf},
                               timeout=10)  # fmt: skip
        assert refused.status_code == 403 and "control = true" in refused.text
        assert daemon.status("sleeper")["state"] == "running"


def test_web_off_says_so(tmp_path: Path) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text('[web]\nlisten = ""\n')
    with running_rsupd(tmp_path, args=["--config", str(config)]) as daemon:
        result = daemon.cli("web")
        assert result.returncode == 1 and "dashboard is off" in result.stderr


def test_remote_listen_needs_allow_remote(tmp_path: Path) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text('[web]\nlisten = "0.0.0.0:18999"\n')
    result = Rsupd(tmp_path, args=["--config", str(config)])
    import subprocess

    done = subprocess.run(
        [sys.executable, "-m", "rsup.supervisor.daemon", "--config", str(config),
         "--state-dir", str(result.state), "--socket", str(result.socket)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert done.returncode == 2 and "allow_remote" in done.stderr
