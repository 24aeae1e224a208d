"""journald: the native protocol, job output forwarding, and a real systemd-journald.

The real journald runs in a private mount namespace (tmpfs over /run and /var/log/journal),
so nothing on the host is touched; the test drives the scenario inside it through
`python -m tests.integration.test_journal DIR` and reads what it wrote to DIR.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from rsup.supervisor.surfaces import journal

from tests.conftest import kill_leftovers, wait_for, write_spec
from tests.integration.test_systemd import ServiceRsupd

ROOT = Path(__file__).resolve().parents[2]
JOURNALD = next((p for p in ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald")
                 if os.access(p, os.X_OK)), None)  # fmt: skip
BIG = 300_000  # bytes: more than one datagram may carry, so it goes through a memfd


def decode(payload: bytes) -> dict[str, bytes]:
    """The reverse of the native protocol, as journald reads it."""
    fields: dict[str, bytes] = {}
    while payload:
        head, _, rest = payload.partition(b"\n")
        if b"=" in head:
            key, _, value = head.partition(b"=")
            fields[key.decode()], payload = value, rest
            continue
        (size,) = struct.unpack("<Q", rest[:8])
        fields[head.decode()], payload = rest[8 : 8 + size], rest[9 + size :]
    return fields


@pytest.fixture
def fake_journald(tmp_path: Path) -> Any:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(tmp_path / "journal.sock"))
    sock.settimeout(5)
    yield sock
    sock.close()


def received(sock: socket.socket) -> dict[str, bytes]:
    data, fds, _flags, _addr = socket.recv_fds(sock, 1 << 20, 1)
    if fds:  # the big-entry form: an empty datagram carrying a sealed memfd
        with os.fdopen(fds[0], "rb") as memfd:
            memfd.seek(0)  # the offset is shared with the sender, who wrote up to the end
            data = memfd.read()
    return decode(data)


# the protocol ----------------------------------------------------------------------


def test_encoding_is_plain_or_binary_safe() -> None:
    payload = journal.encode_entry({"MESSAGE": "one line", "PRIORITY": 6, "TRACE": "a\nb"})
    assert payload.startswith(b"MESSAGE=one line\nPRIORITY=6\nTRACE\n")
    assert struct.pack("<Q", 3) + b"a\nb\n" in payload
    assert decode(payload) == {"MESSAGE": b"one line", "PRIORITY": b"6", "TRACE": b"a\nb"}
    with pytest.raises(ValueError):
        journal.encode_entry({"_PID": "1"})  # trusted fields are journald's to set


def test_sender_reaches_the_socket_and_never_raises(
    tmp_path: Path, fake_journald: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(journal.ENV_SOCKET, str(tmp_path / "journal.sock"))
    sender = journal.JournalSender()
    assert sender.send({"MESSAGE": "hello", "RSUP_JOB": "j"})
    assert received(fake_journald) == {"MESSAGE": b"hello", "RSUP_JOB": b"j"}
    assert sender.send({"MESSAGE": "big", "RSUP_BLOB": "x" * BIG})
    assert len(received(fake_journald)["RSUP_BLOB"]) == BIG
    missing = journal.JournalSender(str(tmp_path / "nobody-here"))
    assert not missing.send({"MESSAGE": "lost"}) and not missing.send({"MESSAGE": "lost"})
    assert (missing.sent, missing.dropped) == (0, 2)
    assert not sender.send({"bad name": "x"}) and sender.dropped == 1


def test_output_is_forwarded_line_by_line(tmp_path: Path, fake_journald: Any) -> None:
    forwarder = journal.OutputForwarder(journal.JournalSender(str(tmp_path / "journal.sock")))
    forwarder.feed("thermal", 2, b"epoch 1  10%\repoch 1  50%")  # a progress bar, unfinished
    forwarder.feed("thermal", 2, b"\repoch 1 100%\r\nhalf a ")
    forwarder.feed("thermal", 2, b"line\r\n\nlast words")
    forwarder.finish("thermal", 2)
    got = [received(fake_journald) for _ in range(3)]
    assert [g["MESSAGE"] for g in got] == [b"epoch 1 100%", b"half a line", b"last words"]
    assert got[0]["SYSLOG_IDENTIFIER"] == b"rsup-job" and got[0]["RSUP_ATTEMPT"] == b"2"
    assert not forwarder.pending


def test_partial_lines_are_capped(tmp_path: Path, fake_journald: Any) -> None:
    forwarder = journal.OutputForwarder(journal.JournalSender(str(tmp_path / "journal.sock")))
    for _ in range(5):
        forwarder.feed("j", 1, b"y" * 20_000)  # 100 kB without a newline
    assert received(fake_journald)["MESSAGE"] == b"y" * journal.MAX_LINE
    assert len(forwarder.pending[("j", 1)]) == 100_000 - journal.MAX_LINE
    forwarder.finish("j", 1)
    assert len(received(fake_journald)["MESSAGE"]) == 100_000 - journal.MAX_LINE


def test_event_priorities_and_fields() -> None:
    fault = {"ts": 1.0, "job": "thermal", "attempt": 3, "event": "fault_detected",
             "category": "gpu_memory_fault", "signature": "hsa-aperture", "line": 4812,
             "text": "HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"}  # fmt: skip
    fields = journal.event_fields(fault)
    assert fields["PRIORITY"] == 4 and fields["RSUP_CATEGORY"] == "gpu_memory_fault"
    assert fields["RSUP_ATTEMPT"] == 3 and fields["SYSLOG_IDENTIFIER"] == "rsupd"
    assert fields["MESSAGE"] == (
        "job thermal attempt 3: gpu_memory_fault detected (hsa-aperture "
        "at output.log:4812): HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION"
    )
    give_up = {"job": "thermal", "attempt": 3, "event": "decision", "action": "fail", "reason": "x"}
    assert journal.event_fields(give_up)["PRIORITY"] == 3
    failed = {"job": "thermal", "attempt": None, "event": "state_changed", "old": "backoff",
              "new": "failed", "reason": "gave up"}  # fmt: skip
    assert journal.event_fields(failed)[
        "PRIORITY"
    ] == 3 and "RSUP_ATTEMPT" not in journal.event_fields(failed)
    assert (
        journal.event_fields({"job": "t", "attempt": 1, "event": "progress", "epoch": 2})[
            "PRIORITY"
        ]
        == 6
    )


def test_read_journal_without_journalctl(monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", "/nonexistent")
    assert journal.read_journal("thermal", follow=False, lines=5) == 1
    assert "journalctl not found" in capsys.readouterr().err
    cmd = journal.journal_command("thermal", follow=True, lines=20)
    assert cmd[:5] == ["journalctl", "--no-pager", "-o", "short-iso", "RSUP_JOB=thermal"]
    assert "SYSLOG_IDENTIFIER=rsupd" in cmd and "SYSLOG_IDENTIFIER=rsup-job" in cmd
    assert cmd[-3:] == ["-n", "20", "-f"]


def drain(sock: socket.socket, until: float) -> list[dict[str, bytes]]:
    entries: list[dict[str, bytes]] = []
    while (left := until - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            entries.append(received(sock))
        except TimeoutError:
            break
    return entries


def test_rsupd_sends_events_and_output_and_reload_switches_output_off(
    tmp_path: Path, fake_journald: Any
) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text("[journal]\nevents = true\nforward_output = true\n")
    env = {journal.ENV_SOCKET: str(tmp_path / "journal.sock")}
    daemon = ServiceRsupd(tmp_path, env, config)
    job = [sys.executable, "-c", "print('loading'); print('10%\\r100%')"]
    try:
        daemon.start()
        assert daemon.cli("start", str(write_spec(tmp_path, "first", job))).returncode == 0
        daemon.wait_state("first", "succeeded")
        got = drain(fake_journald, time.monotonic() + 1.0)
        lines = [e["MESSAGE"] for e in got if e["SYSLOG_IDENTIFIER"] == b"rsup-job"]
        assert lines == [b"loading", b"100%"]
        assert {b"attempt_started", b"decision"} <= {e.get("RSUP_EVENT") for e in got}
        config.write_text("[journal]\nevents = true\nforward_output = false\n")
        assert daemon.proc is not None
        daemon.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "configuration reloaded" in daemon.log.read_text(), 10, "the reload")
        assert daemon.cli("start", str(write_spec(tmp_path, "second", job))).returncode == 0
        daemon.wait_state("second", "succeeded")
        got = drain(fake_journald, time.monotonic() + 1.0)
        assert got and all(e["SYSLOG_IDENTIFIER"] == b"rsupd" for e in got)
    finally:
        daemon.shutdown()


def test_without_journald_nothing_breaks(tmp_path: Path) -> None:
    config = tmp_path / "rsupd.toml"
    config.write_text("[journal]\nevents = true\nforward_output = true\n")
    daemon = ServiceRsupd(tmp_path, {journal.ENV_SOCKET: str(tmp_path / "none")}, config)
    try:
        daemon.start()
        spec = write_spec(tmp_path, "alone", [sys.executable, "-c", "print('still here')"])
        assert daemon.cli("start", str(spec)).returncode == 0
        daemon.wait_state("alone", "succeeded")
        assert "still here" in daemon.cli("logs", "alone").stdout
    finally:
        daemon.shutdown()
    assert '"journal_sent": 0' in daemon.log.read_text()
    assert '"journal_dropped": 0' not in daemon.log.read_text()


# a real systemd-journald -----------------------------------------------------------

# Runs inside `unshare --mount`: journald gets fresh tmpfs folders, then the scenario runs.
NAMESPACE_SCRIPT = """
set -e
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/journal /run/log/journal
if [ -d /var/log/journal ]; then mount -t tmpfs tmpfs /var/log/journal; fi
"$3" &
journald=$!
trap 'kill $journald; wait $journald || true' EXIT
"$2" -m tests.integration.test_journal "$1"
"""

JOB = (
    "import sys, time\n"
    "print('starting training', flush=True)\n"
    "for pct in (10, 50, 100):\n"
    "    sys.stdout.write(f'\\repoch 1: {pct}%'); sys.stdout.flush(); time.sleep(0.05)\n"
    "print(flush=True)\n"
    "sys.stdout.write('half a '); sys.stdout.flush(); time.sleep(0.3)\n"
    "print('line', flush=True)\n"
    "print('Memory access fault by GPU node-1 (Agent handle: 0x5581c0e6b8a0) on address "
    "0x7f2a8c400000. Reason: Page not present or supervisor privilege.', flush=True)\n"
    "sys.exit(134)\n"
)


def journal_entries(*matches: str) -> list[dict[str, Any]]:
    result = subprocess.run(["journalctl", "--no-pager", "-o", "json", "--all", *matches],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def scenario(root: Path) -> int:
    """Inside the namespace: rsupd with journal forwarding runs a job that faults and dies."""
    wait_for(Path(journal.DEFAULT_SOCKET).exists, 15, "journald's socket")
    config = root / "rsupd.toml"
    config.write_text("[journal]\nevents = true\nforward_output = true\n")
    daemon = ServiceRsupd(root, {}, config)
    try:
        daemon.start()
        spec = write_spec(root, "thermal", [sys.executable, "-c", JOB], restart={"max_attempts": 1})
        assert daemon.cli("start", str(spec)).returncode == 0
        daemon.wait_state("thermal", "failed", timeout=60)

        def decided() -> bool:
            return any(
                e.get("RSUP_EVENT") == "decision" for e in journal_entries("RSUP_JOB=thermal")
            )

        wait_for(decided, 20, "the decision")
        (root / "entries.json").write_text(json.dumps(journal_entries("RSUP_JOB=thermal")))
        (root / "logs.txt").write_text(daemon.cli("logs", "thermal", "--journal").stdout)
    finally:
        daemon.shutdown()
    sender = journal.JournalSender()
    sender.send({"MESSAGE": "big entry", "RSUP_JOB": "bigone", "RSUP_BLOB": "x" * BIG + "\nend"})
    big = wait_for(lambda: journal_entries("RSUP_JOB=bigone"), 20, "the big entry")
    (root / "big.json").write_text(json.dumps(big))
    return 0


def namespace_skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: a private mount namespace and journald's own folders"
    if JOURNALD is None or shutil.which("journalctl") is None or shutil.which("unshare") is None:
        return "needs systemd-journald, journalctl and unshare"
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    if probe.returncode != 0:
        return f"unshare --mount is not allowed here: {probe.stderr.strip()}"
    return None


def test_real_journald_receives_structured_entries(tmp_path: Path) -> None:
    reason = namespace_skip_reason()
    if reason:
        pytest.skip(reason)
    log = (tmp_path / "scenario.log").open("wb")
    proc = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACE_SCRIPT, "sh",
         str(tmp_path), sys.executable, str(JOURNALD)],
        cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        assert proc.wait(240) == 0, (tmp_path / "scenario.log").read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)
        kill_leftovers(tmp_path / "state")
        log.close()
    check_entries(json.loads((tmp_path / "entries.json").read_text()))
    logs = (tmp_path / "logs.txt").read_text()
    assert "rsup-job" in logs and "epoch 1: 100%" in logs and "rsupd" in logs
    (big,) = json.loads((tmp_path / "big.json").read_text())
    assert big["RSUP_BLOB"] == "x" * BIG + "\nend", "the memfd form reached journald"


def check_entries(entries: list[dict[str, Any]]) -> None:
    events = [e for e in entries if e["SYSLOG_IDENTIFIER"] == "rsupd"]
    output = [e["MESSAGE"] for e in entries if e["SYSLOG_IDENTIFIER"] == "rsup-job"]
    by_event = {e["RSUP_EVENT"]: e for e in events}
    assert {"job_submitted", "attempt_started", "fault_detected", "decision"} <= set(by_event)
    fault = by_event["fault_detected"]
    assert (fault["PRIORITY"], fault["RSUP_CATEGORY"], fault["RSUP_ATTEMPT"]) == (
        "4",
        "gpu_memory_fault",
        "1",
    )
    assert fault["MESSAGE"].startswith("job thermal attempt 1: gpu_memory_fault detected")
    assert by_event["attempt_started"]["PRIORITY"] == "6"
    assert (by_event["decision"]["RSUP_ACTION"], by_event["decision"]["PRIORITY"]) == ("fail", "3")
    failed = [e for e in events if e.get("RSUP_STATE") == "failed"]
    assert failed and failed[0]["PRIORITY"] == "3"
    assert all(e["RSUP_JOB"] == "thermal" for e in entries)
    assert output[:3] == ["starting training", "epoch 1: 100%", "half a line"], output
    assert output[3].startswith("Memory access fault by GPU node-1")
    assert not any("10%" in line or "50%" in line for line in output)
    assert all(
        e.get("RSUP_ATTEMPT") == "1" for e in entries if e["SYSLOG_IDENTIFIER"] == "rsup-job"
    )


if __name__ == "__main__":
    sys.exit(scenario(Path(sys.argv[1])))
