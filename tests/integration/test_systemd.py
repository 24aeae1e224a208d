"""rsupd under systemd: the unit files, `rsup service install`, and sd_notify with a real rsupd.

systemd is not PID 1 on the build machines, so the units are checked with
`systemd-analyze verify`, and systemd's side of sd_notify is a datagram socket the test binds.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from rsup.supervisor import daemon
from rsup.supervisor.core.states import JobState
from rsup.supervisor.surfaces import notify, service

from tests.conftest import Rsupd, wait_for, write_spec

ROOT = Path(__file__).resolve().parents[2]
UNITS = {
    "system": ROOT / "systemd" / "rsupd.service",
    "user": ROOT / "systemd" / "rsupd.user.service",
}
WATCHDOG_USEC = 1_000_000  # pings every 0.5 s


# helpers -------------------------------------------------------------------------


class NotifySocket:
    """systemd's end of NOTIFY_SOCKET: collects every datagram with its arrival time."""

    def __init__(self, address: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address.replace("@", "\0", 1) if address.startswith("@") else address)
        self.address = address
        self.got: list[tuple[float, str]] = []

    def collect(self, until: float) -> list[tuple[float, str]]:
        """Datagrams that arrive before the monotonic deadline `until`."""
        new: list[tuple[float, str]] = []
        while (left := until - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                break
            new.append((time.monotonic(), data.decode()))
        self.got += new
        return new

    def wait(self, pred: Callable[[str], bool], timeout: float, what: str) -> tuple[float, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for item in self.collect(min(deadline, time.monotonic() + 0.1)):
                if pred(item[1]):
                    return item
        raise AssertionError(f"timed out after {timeout} s waiting for {what}; got {self.got[-5:]}")

    def close(self) -> None:
        self.sock.close()


def status_of(message: str) -> str | None:
    lines = [ln for ln in message.splitlines() if ln.startswith("STATUS=")]
    return lines[0].removeprefix("STATUS=") if lines else None


def status_is(want: str) -> Callable[[str], bool]:
    return lambda message: status_of(message) == want


def pings(items: list[tuple[float, str]]) -> list[float]:
    return [t for t, m in items if m == "WATCHDOG=1"]


class ServiceRsupd(Rsupd):
    """A real rsupd started as systemd would: extra environment, a --config file."""

    def __init__(self, root: Path, env: dict[str, str], config: Path | None = None) -> None:
        super().__init__(root)
        self.env = {**os.environ, **env}
        self.config = config

    def start(self, wait: bool = True) -> None:
        extra = ["--config", str(self.config)] if self.config else []
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rsup.supervisor.daemon", "--state-dir", str(self.state),
                 "--socket", str(self.socket), *extra],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=self.env,
            )  # fmt: skip
        if wait:
            wait_for(lambda: self.cli("status", "--json").returncode == 0, 15, "rsupd to answer")

    def shutdown(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a test may have stopped its loop
        super().shutdown()


@pytest.fixture
def notify_socket(tmp_path: Path) -> Iterator[NotifySocket]:
    listener = NotifySocket(str(tmp_path / "notify"))
    yield listener
    listener.close()


def waiting_job(folder: Path, name: str, release: Path, code: int, **extra: object) -> Path:
    script = (
        "import os, pathlib, sys, time\n"
        "print('NOTIFY_SOCKET=' + repr(os.environ.get('NOTIFY_SOCKET')), flush=True)\n"
        f"while not pathlib.Path({str(release)!r}).exists(): time.sleep(0.05)\n"
        f"sys.exit({code})\n"
    )
    return write_spec(folder, name, [sys.executable, "-c", script], **extra)


# the unit files ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["system", "user"])
def test_units_pass_systemd_analyze_verify(kind: str, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "rsupd.service"
    unit.write_text(service.render_unit(kind == "user"))
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    cmd = [analyze, "verify", *(["--user"] if kind == "user" else []), str(unit)]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    # verify exits 0 on unknown keys too, so any message at all is a failure.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result


@pytest.mark.parametrize("kind", ["system", "user"])
def test_every_setting_sits_under_a_comment(kind: str) -> None:
    # A setting follows a comment, or another setting of the same commented group.
    previous = ""
    for number, line in enumerate(UNITS[kind].read_text().splitlines(), 1):
        if line and not line.startswith(("#", "[")):
            where = f"{UNITS[kind].name}:{number}: {line!r} has no comment above it"
            assert previous and not previous.startswith("["), where
        previous = line


def test_system_unit_keeps_jobs_and_gpus() -> None:
    settings = [ln for ln in UNITS["system"].read_text().splitlines() if not ln.startswith("#")]
    for needed in ("Type=notify", "NotifyAccess=main", "KillMode=process", "Delegate=yes",
                   "DevicePolicy=closed", "DeviceAllow=/dev/kfd rw", "DeviceAllow=char-drm rw",
                   "DeviceAllow=char-nvidia-frontend rw", "DeviceAllow=char-nvidia-uvm rw",
                   "SupplementaryGroups=video render", "Restart=on-failure",
                   "OOMPolicy=continue"):  # fmt: skip
        assert needed in settings
    assert not any(ln.startswith("PrivateDevices=") for ln in settings)


def test_install_system_unit_into_a_staging_root(tmp_path: Path) -> None:
    stage = tmp_path / "root"
    (stage / "etc" / "rsup").mkdir(parents=True)
    (stage / "etc" / "rsup" / "rsupd.toml").write_text("[status]\ndebounce = 1\n")
    assert service.install(user=False, dry_run=False, prefix=stage) == 0
    unit = (stage / "etc/systemd/system/rsupd.service").read_text()
    assert f"ExecStart={service.rsupd_command()} --socket %t/rsup/rsupd.sock" in unit
    assert service.PLACEHOLDER not in unit
    assert (stage / "etc/rsup/rsupd.toml").read_text() == "[status]\ndebounce = 1\n", "kept"
    sysusers, tmpfiles = shutil.which("systemd-sysusers"), shutil.which("systemd-tmpfiles")
    if sysusers is None or tmpfiles is None or os.geteuid() != 0:
        pytest.skip("systemd-sysusers/systemd-tmpfiles or root missing: snippets not applied")
    for name in ("passwd", "group"):
        shutil.copy(f"/etc/{name}", stage / "etc" / name)
    subprocess.run([sysusers, f"--root={stage}"], check=True, capture_output=True, timeout=60)
    assert "\nrsup:" in "\n" + (stage / "etc/group").read_text()
    subprocess.run([tmpfiles, f"--root={stage}", "--create"], check=True, capture_output=True,
                   timeout=60)  # fmt: skip
    assert oct((stage / "run/rsup").stat().st_mode & 0o777) == "0o750"


def test_install_user_unit_and_dry_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    parser = argparse.ArgumentParser()
    service.add_parser(parser.add_subparsers(dest="command"))
    assert service.run(parser.parse_args(["service", "install", "--user", "--dry-run"])) == 0
    assert not (tmp_path / "cfg").exists(), "a dry run writes nothing"
    assert f"# {tmp_path}/cfg/systemd/user/rsupd.service" in capsys.readouterr().out
    assert service.run(parser.parse_args(["service", "install", "--user"])) == 0
    unit = (tmp_path / "cfg/systemd/user/rsupd.service").read_text()
    assert "ExecStart=" + service.rsupd_command() in unit and "WantedBy=default.target" in unit
    config = daemon.load_config(tmp_path / "cfg/rsup/rsupd.toml")
    assert config == daemon.Config(), "the shipped rsupd.toml holds the built-in defaults"


def test_bad_config_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "rsupd.toml"
    bad.write_text('[journal]\nforward_output = "sometimes"\n')
    result = subprocess.run([sys.executable, "-m", "rsup.supervisor.daemon", "--config", str(bad),
                             "--state-dir", str(tmp_path / "s"), "--socket", str(tmp_path / "x")],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert "[journal] forward_output" in result.stderr and "sometimes" in result.stderr
    bad.write_text("[journal]\nforward = true\n")
    with pytest.raises(daemon.ConfigError, match="unknown key 'forward'"):
        daemon.load_config(bad)


def test_status_line_and_watchdog_interval() -> None:
    states = [JobState.RUNNING] * 3 + [JobState.BACKOFF, JobState.STARTING, JobState.SUCCEEDED]
    assert notify.status_line(states) == "3 running, 1 backoff, 0 failed, 1 starting"
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert notify.watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert notify.watchdog_interval({}) is None
    assert "NOTIFY_SOCKET" not in notify.job_environment({"NOTIFY_SOCKET": "/x", "A": "1"})


def test_nothing_is_sent_without_notify_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    monkeypatch.setenv("WATCHDOG_USEC", "1000000")

    async def scenario() -> None:
        link = notify.SystemdLink(notify.Notifier(), lambda: [], 0.0)
        link.start()
        link.ready()
        link.changed()
        assert link.interval is None and len(asyncio.all_tasks()) == 1, "no task was started"
        await link.close()

    asyncio.run(scenario())


# sd_notify with a real rsupd -------------------------------------------------------


def test_ready_only_once_socket_answers_and_jobs_are_recovered(tmp_path: Path) -> None:
    listener = NotifySocket(f"@rsup-test-{os.getpid()}-{time.monotonic_ns()}")  # abstract name
    first = ServiceRsupd(tmp_path, {})
    second = ServiceRsupd(tmp_path, {"NOTIFY_SOCKET": listener.address})
    try:
        first.start()
        spec = waiting_job(tmp_path, "adopted", tmp_path / "never", 0)
        assert first.cli("start", str(spec)).returncode == 0
        first.wait_state("adopted", "running")
        first.kill(signal.SIGKILL)  # the socket file stays behind, with nobody listening
        second.start(wait=False)
        _, ready = listener.wait(lambda m: "READY=1" in m, 20, "READY=1")
        assert second.proc is not None
        os.kill(second.proc.pid, signal.SIGSTOP)  # from here on, rsupd cannot change anything
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.settimeout(20)
        client.connect(str(second.socket))  # refused unless rsupd was already listening
        client.sendall(b'{"op": "ping"}\n')
        os.kill(second.proc.pid, signal.SIGCONT)
        assert json.loads(client.makefile().readline())["ok"] is True
        client.close()
        assert status_of(ready) == "1 running, 0 backoff, 0 failed", "recovered before READY"
    finally:
        listener.close()
        second.shutdown()
        first.shutdown()


def test_watchdog_pings_from_the_loop_and_stop_while_it_is_stopped(
    tmp_path: Path, notify_socket: NotifySocket
) -> None:
    rsupd = ServiceRsupd(tmp_path, {"NOTIFY_SOCKET": notify_socket.address,
                                    "WATCHDOG_USEC": str(WATCHDOG_USEC)})  # fmt: skip
    try:
        rsupd.start()
        notify_socket.wait(lambda m: m.startswith("READY=1"), 10, "READY=1")
        times = pings(notify_socket.collect(time.monotonic() + 3.0))
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert 4 <= len(times) <= 7, times
        assert all(0.3 < gap < 0.9 for gap in gaps), gaps
        assert rsupd.proc is not None
        os.kill(rsupd.proc.pid, signal.SIGSTOP)
        assert not pings(notify_socket.collect(time.monotonic() + 2.0)), "pings while stopped"
        os.kill(rsupd.proc.pid, signal.SIGCONT)
        notify_socket.wait(lambda m: m == "WATCHDOG=1", 1.5, "pings to resume")
    finally:
        rsupd.shutdown()


def test_a_blocked_event_loop_stops_the_pings(tmp_path: Path, notify_socket: NotifySocket) -> None:
    # rsupd reads its config inside the loop on SIGHUP. A FIFO makes that read block until
    # the test writes, so the loop itself is blocked while the process keeps running.
    fifo = tmp_path / "rsupd.toml"
    os.mkfifo(fifo)
    feed = threading.Thread(target=fifo.write_text, args=("[status]\ndebounce = 0.1\n",))
    feed.start()
    rsupd = ServiceRsupd(tmp_path, {"NOTIFY_SOCKET": notify_socket.address,
                                    "WATCHDOG_USEC": str(WATCHDOG_USEC)}, config=fifo)  # fmt: skip
    try:
        rsupd.start()
        feed.join(10)
        notify_socket.wait(lambda m: m == "WATCHDOG=1", 5, "the first ping")
        assert rsupd.proc is not None
        rsupd.proc.send_signal(signal.SIGHUP)
        notify_socket.wait(lambda m: m.startswith("RELOADING=1\nMONOTONIC_USEC="), 5, "RELOADING")
        assert not pings(notify_socket.collect(time.monotonic() + 2.0)), "pings while blocked"
        assert rsupd.proc.poll() is None
        feed = threading.Thread(target=fifo.write_text, args=("[status]\ndebounce = 0.2\n",))
        feed.start()
        notify_socket.wait(lambda m: m.startswith("READY=1"), 5, "READY=1 after the reload")
        notify_socket.wait(lambda m: m == "WATCHDOG=1", 1.5, "pings to resume")
        feed.join(10)
    finally:
        if feed.is_alive():  # never leave the writer blocked on the FIFO
            with open(fifo, "rb"):
                pass
        rsupd.shutdown()


def test_status_follows_job_states(tmp_path: Path, notify_socket: NotifySocket) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text("[status]\ndebounce = 0.05\n")
    rsupd = ServiceRsupd(tmp_path, {"NOTIFY_SOCKET": notify_socket.address}, config=config)
    release = tmp_path / "release"
    try:
        rsupd.start()
        notify_socket.wait(status_is("0 running, 0 backoff, 0 failed"), 10, "the empty status")
        slow = waiting_job(tmp_path, "slow", release, 1, restart={"max_attempts": 3,
                           "backoff": {"initial": 60}})  # fmt: skip
        assert rsupd.cli("start", str(slow)).returncode == 0
        notify_socket.wait(status_is("1 running, 0 backoff, 0 failed"), 20, "1 running")
        release.write_text("go")
        notify_socket.wait(status_is("0 running, 1 backoff, 0 failed"), 20, "1 backoff")
        doomed = waiting_job(tmp_path, "doomed", release, 1, restart={"max_attempts": 1})
        assert rsupd.cli("start", str(doomed)).returncode == 0
        notify_socket.wait(status_is("0 running, 1 backoff, 1 failed"), 20, "1 failed")
        assert rsupd.cli("stop", "slow").returncode == 0
        notify_socket.wait(status_is("0 running, 0 backoff, 1 failed"), 20, "the stop")
        assert "NOTIFY_SOCKET=None" in rsupd.cli("logs", "slow").stdout, "jobs must not inherit it"
        assert rsupd.proc is not None
        rsupd.proc.terminate()
        notify_socket.wait(lambda m: m.startswith("STOPPING=1"), 10, "STOPPING=1")
        assert rsupd.proc.wait(15) == 0
    finally:
        rsupd.shutdown()
