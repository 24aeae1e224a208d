"""State in SQLite (WAL): jobs, attempts, events. The daemon's memory across restarts."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.core.states import JobState, check_transition

log = structlog.get_logger("rsupd")

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    owner_uid INTEGER NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    restarts INTEGER NOT NULL DEFAULT 0,
    stalled INTEGER NOT NULL DEFAULT 0,
    failures INTEGER NOT NULL DEFAULT 0,
    same_fault INTEGER NOT NULL DEFAULT 0,
    next_start_at REAL,
    device TEXT,
    last_fault TEXT,
    progress TEXT,
    overrides TEXT NOT NULL DEFAULT '{}',
    drills TEXT NOT NULL DEFAULT '[]',
    hang_timeout REAL
);
CREATE TABLE IF NOT EXISTS attempts (
    job TEXT NOT NULL,
    n INTEGER NOT NULL,
    dir TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    shim_pid INTEGER,
    shim_start_time INTEGER,
    job_pid INTEGER,
    exit TEXT,
    outcome TEXT,
    fault TEXT,
    processed INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, n)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    job TEXT NOT NULL,
    attempt INTEGER,
    event TEXT NOT NULL,
    fields TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_job ON events (job, id);
CREATE INDEX IF NOT EXISTS events_attempt ON events (job, attempt);
"""

JOB_COLUMNS = [
    "name",
    "owner_uid",
    "spec",
    "state",
    "reason",
    "created",
    "updated",
    "attempts",
    "restarts",
    "stalled",
    "failures",
    "same_fault",
    "next_start_at",
    "device",
    "last_fault",
    "progress",
    "overrides",
    "drills",
    "hang_timeout",
]
JSON_JOB_COLUMNS = {"spec", "progress", "overrides", "drills"}
ATTEMPT_COLUMNS = [
    "job",
    "n",
    "dir",
    "started",
    "ended",
    "shim_pid",
    "shim_start_time",
    "job_pid",
    "exit",
    "outcome",
    "fault",
    "processed",
]


class StateError(RuntimeError):
    """state.db cannot be opened or used; the message says how to recover."""


@dataclass
class Job:
    name: str
    owner_uid: int
    spec: dict[str, Any]
    state: JobState
    reason: str = ""
    created: float = 0.0
    updated: float = 0.0
    attempts: int = 0
    restarts: int = 0
    stalled: int = 0
    failures: int = 0
    same_fault: int = 0
    next_start_at: float | None = None
    device: str | None = None
    last_fault: str | None = None
    progress: dict[str, Any] | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    drills: list[dict[str, Any]] = field(default_factory=list)
    hang_timeout: float | None = None


@dataclass
class Attempt:
    job: str
    n: int
    dir: str
    started: float
    ended: float | None = None
    shim_pid: int | None = None
    shim_start_time: int | None = None
    job_pid: int | None = None
    exit: dict[str, Any] | None = None
    outcome: str | None = None
    fault: str | None = None
    processed: int = 0


EventListener = Callable[[dict[str, Any]], None]


class Store:
    """All reads and writes of state.db. Single-threaded: used from the daemon's loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listeners: list[EventListener] = []
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(path), isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except (sqlite3.Error, OSError) as exc:
            raise StateError(
                f"cannot use state database {path}: {exc}. Nothing was changed. "
                f"Fix its permissions or free disk space; if the file is damaged, move it "
                f"aside (the job folders next to it keep every attempt's output) and start again."
            ) from exc

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    # jobs ---------------------------------------------------------------

    def add_job(self, job: Job) -> None:
        values = [_dump_job_value(c, getattr(job, c)) for c in JOB_COLUMNS]
        marks = ",".join("?" for _ in JOB_COLUMNS)
        with self.tx() as db:
            db.execute(f"INSERT INTO jobs ({','.join(JOB_COLUMNS)}) VALUES ({marks})", values)

    def get_job(self, name: str) -> Job | None:
        row = self.db.execute(
            f"SELECT {','.join(JOB_COLUMNS)} FROM jobs WHERE name=?", (name,)
        ).fetchone()
        return _job_from_row(row) if row else None

    def jobs(self) -> list[Job]:
        rows = self.db.execute(f"SELECT {','.join(JOB_COLUMNS)} FROM jobs ORDER BY created")
        return [_job_from_row(r) for r in rows]

    def update_job(self, name: str, **fields: Any) -> None:
        if "state" in fields:
            raise ValueError("state changes go through Store.move()")
        fields["updated"] = time.time()
        sets = ",".join(f"{k}=?" for k in fields)
        values = [_dump_job_value(k, v) for k, v in fields.items()]
        with self.tx() as db:
            db.execute(f"UPDATE jobs SET {sets} WHERE name=?", [*values, name])

    def delete_job(self, name: str) -> None:
        with self.tx() as db:
            for table, column in (("jobs", "name"), ("attempts", "job"), ("events", "job")):
                db.execute(f"DELETE FROM {table} WHERE {column}=?", (name,))

    def move(self, name: str, new: JobState, reason: str, attempt: int | None = None) -> Job:
        """The one way a job changes state: checked, stored, logged and emitted as an event."""
        job = self.get_job(name)
        if job is None:
            raise KeyError(name)
        old = job.state
        check_transition(name, old, new)
        now = time.time()
        with self.tx() as db:
            db.execute(
                "UPDATE jobs SET state=?, reason=?, updated=? WHERE name=?",
                (new.value, reason, now, name),
            )
        self.emit(name, attempt, "state_changed", old=old.value, new=new.value, reason=reason)
        job.state, job.reason = new, reason
        return job

    # attempts -----------------------------------------------------------

    def add_attempt(self, attempt: Attempt) -> None:
        values = [_dump_attempt_value(c, getattr(attempt, c)) for c in ATTEMPT_COLUMNS]
        marks = ",".join("?" for _ in ATTEMPT_COLUMNS)
        with self.tx() as db:
            db.execute(
                f"INSERT INTO attempts ({','.join(ATTEMPT_COLUMNS)}) VALUES ({marks})", values
            )

    def update_attempt(self, job: str, n: int, **fields: Any) -> None:
        sets = ",".join(f"{k}=?" for k in fields)
        values = [_dump_attempt_value(k, v) for k, v in fields.items()]
        with self.tx() as db:
            db.execute(f"UPDATE attempts SET {sets} WHERE job=? AND n=?", [*values, job, n])

    def attempt(self, job: str, n: int) -> Attempt | None:
        row = self.db.execute(
            f"SELECT {','.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job=? AND n=?", (job, n)
        ).fetchone()
        return _attempt_from_row(row) if row else None

    def last_attempt(self, job: str) -> Attempt | None:
        row = self.db.execute(
            f"SELECT {','.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job=? ORDER BY n DESC LIMIT 1",
            (job,),
        ).fetchone()
        return _attempt_from_row(row) if row else None

    def first_started(self, job: str) -> float | None:
        """When the job's first attempt started (what a budget counts from)."""
        row = self.db.execute(  # the first by number: the primary key, not a scan
            "SELECT started FROM attempts WHERE job=? ORDER BY n LIMIT 1", (job,)
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def attempts(self, job: str) -> list[Attempt]:
        rows = self.db.execute(
            f"SELECT {','.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job=? ORDER BY n", (job,)
        )
        return [_attempt_from_row(r) for r in rows]

    # events -------------------------------------------------------------

    def emit(self, job: str, attempt: int | None, event: str, **fields: Any) -> dict[str, Any]:
        """Store one event, log it, and hand it to the listeners (journald, tests)."""
        ts = time.time()
        with self.tx() as db:
            db.execute(
                "INSERT INTO events (ts, job, attempt, event, fields) VALUES (?,?,?,?,?)",
                (ts, job, attempt, event, json.dumps(fields, default=str)),
            )
        record = {"ts": ts, "job": job, "attempt": attempt, "event": event, **fields}
        log.info(event, job=job, attempt=attempt, **fields)
        for listener in self.listeners:
            listener(record)
        return record

    def prune_events(self, job: str, below: int, kept: tuple[str, ...]) -> None:
        """Delete the events of attempts 2..below-1 except those of the `kept` kinds."""
        marks = ",".join("?" * len(kept))
        with self.tx() as db:
            db.execute(
                f"DELETE FROM events WHERE job = ? AND attempt > 1 AND attempt < ? "
                f"AND event NOT IN ({marks})",
                (job, below, *kept),
            )

    def events(self, job: str, after_id: int = 0) -> list[dict[str, Any]]:
        rows = self.db.execute(
            "SELECT id, ts, job, attempt, event, fields FROM events "
            "WHERE job=? AND id>? ORDER BY id",
            (job, after_id),
        )
        return [
            {"id": i, "ts": ts, "job": j, "attempt": a, "event": e, **json.loads(f)}
            for i, ts, j, a, e, f in rows
        ]


def _dump_job_value(column: str, value: Any) -> Any:
    if column == "state" and isinstance(value, JobState):
        return value.value
    if column in JSON_JOB_COLUMNS:
        return None if value is None else json.dumps(value)
    return value


def _job_from_row(row: tuple[Any, ...]) -> Job:
    values = dict(zip(JOB_COLUMNS, row, strict=True))
    for column in JSON_JOB_COLUMNS:
        if values[column] is not None:
            values[column] = json.loads(values[column])
    values["state"] = JobState(values["state"])
    return Job(**values)


def _dump_attempt_value(column: str, value: Any) -> Any:
    return json.dumps(value) if column == "exit" and value is not None else value


def _attempt_from_row(row: tuple[Any, ...]) -> Attempt:
    values = dict(zip(ATTEMPT_COLUMNS, row, strict=True))
    if values["exit"] is not None:
        values["exit"] = json.loads(values["exit"])
    return Attempt(**values)
