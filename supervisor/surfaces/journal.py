"""journald: daemon events and job output as native journal entries, and reading them back.

The native protocol is a datagram of `KEY=value` lines; a value holding a newline is sent as
`KEY`, a newline, its length (64-bit little endian), the bytes and a newline. Sending never
raises and never blocks: without journald the entries are dropped and counted, and nothing
else changes, because the attempt files stay the source of truth.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from rsup.workers import constants as C

log = structlog.get_logger("rsupd")

DEFAULT_SOCKET = "/run/systemd/journal/socket"
ENV_SOCKET = "RSUP_JOURNAL_SOCKET"
DAEMON_IDENTIFIER = "rsupd"
JOB_IDENTIFIER = "rsup-job"
MAX_LINE = 64 * 1024  # a partial line is held back until its newline, up to this size

# syslog priorities (journald's PRIORITY field)
ERR, WARNING, INFO = 3, 4, 6

FieldValue = str | bytes | int
FIELD_NAME = re.compile(r"[A-Z0-9][A-Z0-9_]{0,63}")
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL


def encode_entry(fields: Mapping[str, FieldValue]) -> bytes:
    """One journal entry in the native protocol. Raises ValueError on a bad field name."""
    parts: list[bytes] = []
    for key, value in fields.items():
        if not FIELD_NAME.fullmatch(key):
            raise ValueError(f"not a journal field name: {key!r}")
        data = value if isinstance(value, bytes) else str(value).encode("utf-8", "replace")
        name = key.encode("ascii")
        if b"\n" in data:
            parts.append(name + b"\n" + struct.pack("<Q", len(data)) + data + b"\n")
        else:
            parts.append(name + b"=" + data + b"\n")
    return b"".join(parts)


class JournalSender:
    """Datagrams to journald's native socket ($RSUP_JOURNAL_SOCKET overrides the path)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path or os.environ.get(ENV_SOCKET) or DEFAULT_SOCKET
        self.sent = 0
        self.dropped = 0
        self._sock: socket.socket | None = None

    def send(self, fields: Mapping[str, FieldValue]) -> bool:
        """Send one entry; False (and one more drop counted) when journald did not take it."""
        try:
            self._send(encode_entry(fields))
        except (OSError, ValueError):
            self.dropped += 1
            if self.dropped == 1:
                log.warning("journald did not take an entry; further ones may be dropped "
                            "(the attempt files keep everything)", socket=self.path)  # fmt: skip
            return False
        self.sent += 1
        return True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _send(self, payload: bytes) -> None:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)  # a busy journald costs an entry, never the loop
        try:
            self._sock.sendto(payload, self.path)
        except OSError as exc:
            if exc.errno not in (errno.EMSGSIZE, errno.ENOBUFS):
                raise
            self._send_memfd(self._sock, payload)

    def _send_memfd(self, sock: socket.socket, payload: bytes) -> None:
        # Too big for one datagram: journald also takes the entry in a sealed memfd.
        fd = os.memfd_create("rsup-journal", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.write(fd, payload)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
            rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))]
            sock.sendmsg([b""], rights, 0, self.path)  # socket.send_fds ignores the address
        finally:
            os.close(fd)


# daemon events -----------------------------------------------------------------


def event_priority(record: Mapping[str, Any]) -> int:
    """Faults and hangs are warnings; giving up on a job is an error; the rest is info."""
    event = record.get("event")
    if event in ("fault_detected", "hang_detected"):
        return WARNING
    if event == "decision" and record.get("action") == "fail":
        return ERR
    if event == "state_changed" and record.get("new") == "failed":
        return ERR
    return INFO


def event_message(record: Mapping[str, Any]) -> str:
    """A sentence for people: what happened to which job (and attempt)."""
    job, n, event = record.get("job"), record.get("attempt"), str(record.get("event"))
    who = f"job {job}" if n is None else f"job {job} attempt {n}"
    describe = MESSAGES.get(event)
    text = describe(record) if describe is not None else _generic(record)
    return f"{who}: {text}"


def _generic(record: Mapping[str, Any]) -> str:
    skip = {"ts", "job", "attempt", "event", "id"}
    details = ", ".join(f"{k}={_short(v)}" for k, v in record.items() if k not in skip)
    event = str(record.get("event", "event")).replace("_", " ")
    return f"{event} ({details})" if details else event


def _short(value: Any, limit: int = 200) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _fault(r: Mapping[str, Any]) -> str:
    where = f" at output.log:{r['line']}" if r.get("line") else ""
    return f"{r.get('category')} detected ({r.get('signature')}{where}): {_short(r.get('text'))}"


def _ended(r: Mapping[str, Any]) -> str:
    exit_data: dict[str, Any] = r["exit"] if isinstance(r.get("exit"), dict) else {}
    if exit_data.get("exit_code") is not None:
        how = f"exit status {exit_data['exit_code']}"
    elif exit_data.get("signal_name") or exit_data.get("signal"):
        how = f"killed by {exit_data.get('signal_name') or exit_data.get('signal')}"
    else:
        how = "no exit status recorded"
    return f"ended ({how}); failure category {r.get('category')}"


MESSAGES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "state_changed": lambda r: f"{r.get('old')} -> {r.get('new')} ({r.get('reason')})",
    "attempt_started": lambda r: f"started on {r.get('device')} (shim pid {r.get('shim_pid')})",
    "attempt_ended": _ended,
    "fault_detected": _fault,
    "hang_detected": lambda r: f"hang detected: {r.get('message')}",
    "decision": lambda r: f"decision {r.get('action')}: {r.get('reason')}",
    "checkpoint_saved": lambda r: f"checkpoint saved ({_short(r.get('path', r))})",
    "job_submitted": lambda r: f"submitted by uid {r.get('owner_uid')}",
}


def event_fields(record: Mapping[str, Any]) -> dict[str, FieldValue]:
    """The journal entry for one stored event."""
    fields: dict[str, FieldValue] = {
        "MESSAGE": event_message(record),
        "PRIORITY": event_priority(record),
        "SYSLOG_IDENTIFIER": DAEMON_IDENTIFIER,
        "RSUP_JOB": str(record.get("job")),
        "RSUP_EVENT": str(record.get("event")),
    }
    if record.get("attempt") is not None:
        fields["RSUP_ATTEMPT"] = int(record["attempt"])
    optional = {"category": "RSUP_CATEGORY", "signature": "RSUP_SIGNATURE",
                "action": "RSUP_ACTION", "new": "RSUP_STATE"}  # fmt: skip
    for key, field in optional.items():
        if record.get(key) is not None:
            fields[field] = str(record[key])
    return fields


# job output --------------------------------------------------------------------


def final_text(line: bytes) -> bytes:
    """What a terminal would show: the text after the last carriage return (progress bars)."""
    line = line.rstrip(b"\r")
    return line[line.rfind(b"\r") + 1 :]


class OutputForwarder:
    """Job output to the journal line by line; partial lines wait for their end."""

    def __init__(self, sender: JournalSender) -> None:
        self.sender = sender
        self.pending: dict[tuple[str, int], bytes] = {}

    def feed(self, job: str, attempt: int, data: bytes) -> None:
        *lines, rest = (self.pending.pop((job, attempt), b"") + data).split(b"\n")
        for line in lines:
            self._line(job, attempt, line)
        # Keep only the latest progress update of an unfinished line (the last \r may be
        # the first half of \r\n, so it stays).
        cut = rest.rfind(b"\r", 0, len(rest) - 1)
        rest = rest[cut + 1 :] if cut >= 0 else rest
        while len(rest) >= MAX_LINE:  # a line that never ends goes out in MAX_LINE pieces
            self._line(job, attempt, rest[:MAX_LINE])
            rest = rest[MAX_LINE:]
        if rest:
            self.pending[(job, attempt)] = rest

    def finish(self, job: str, attempt: int) -> None:
        """The attempt ended: send what is left of its last line."""
        rest = self.pending.pop((job, attempt), b"")
        if rest:
            self._line(job, attempt, rest)

    def _line(self, job: str, attempt: int, line: bytes) -> None:
        text = final_text(line)
        for start in range(0, len(text), MAX_LINE):
            piece = text[start : start + MAX_LINE]
            if piece.strip():
                self.sender.send({
                    "MESSAGE": piece.decode("utf-8", "replace"), "PRIORITY": INFO,
                    "SYSLOG_IDENTIFIER": JOB_IDENTIFIER, "RSUP_JOB": job, "RSUP_ATTEMPT": attempt,
                })  # fmt: skip


class JournalBridge:
    """The engine's listeners for journald; the switches can change on reload."""

    def __init__(self, sender: JournalSender, events: bool, output: bool) -> None:
        self.sender = sender
        self.forwarder = OutputForwarder(sender)
        self.events = events
        self.output = output

    def on_event(self, record: dict[str, Any]) -> None:
        if record.get("event") == "attempt_ended" and record.get("attempt") is not None:
            key = (str(record["job"]), int(record["attempt"]))
            if self.output:
                self.forwarder.finish(*key)
            self.forwarder.pending.pop(key, None)
        if not self.events:
            return
        try:
            self.sender.send(event_fields(record))
        except Exception:  # an odd field must never break Store.emit, which called us
            self.sender.dropped += 1

    def on_output(self, job: str, attempt: int, data: bytes) -> None:
        if self.output:
            self.forwarder.feed(job, attempt, data)


def under_systemd(environ: Mapping[str, str] | None = None) -> bool:
    """True when systemd started this process (its stdout may be a journal stream)."""
    env = os.environ if environ is None else environ
    return bool(env.get("INVOCATION_ID") or env.get("JOURNAL_STREAM"))


# reading back ------------------------------------------------------------------


def journal_command(name: str, follow: bool, lines: int | None) -> list[str]:
    """journalctl for one job: rsupd's events and the job's output, oldest first."""
    idents = [f"SYSLOG_IDENTIFIER={i}" for i in (DAEMON_IDENTIFIER, JOB_IDENTIFIER)]
    cmd = ["journalctl", "--no-pager", "-o", "short-iso", f"RSUP_JOB={name}", *idents]
    if lines is not None:
        cmd += ["-n", str(lines)]
    if follow:
        cmd.append("-f")
    return cmd


def read_journal(name: str, follow: bool, lines: int | None) -> int:
    """`rsup logs NAME --journal`: what journald holds for the job, through journalctl."""
    cmd = journal_command(name, follow, lines)
    exe = shutil.which(cmd[0])
    if exe is None:
        print("rsup: journalctl not found, so the journal cannot be read here; "
              f"`rsup logs {name}` reads the attempt files instead", file=sys.stderr)  # fmt: skip
        return C.EXIT_FAILED
    try:
        return subprocess.run([exe, *cmd[1:]], check=False).returncode
    except KeyboardInterrupt:
        return C.EXIT_OK
