"""State in SQLite (WAL): jobs, attempts, events. The daemon's memory across restarts.

Every change that belongs together commits together: `with store.tx():` nests, and only
the outermost block commits. A state move is its row and its `state_changed` event; the
end of an attempt is its attempt row, the job row (plan, counters, state) and its events
(effects.engine). Listeners (journald, metrics, tests) hear an event only once it is
committed, so nothing is announced that a crash could take back.

Crash injection (tests only): RSUP_CRASH_AT=<label>:<k> kills this process with SIGKILL
just before the k-th write of a transaction labelled <label>, or, with k = `commit`,
right after it commits and before anything is carried out.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import structlog
from rsup.supervisor.core.errors import StateError
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.plan import Plan
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import JobState, check_transition

log = structlog.get_logger("rsupd")
CRASH_ENV = "RSUP_CRASH_AT"

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
    plan TEXT NOT NULL DEFAULT '{}',
    drills TEXT NOT NULL DEFAULT '[]',
    hang_timeout REAL,
    resume_to TEXT,
    run_from INTEGER NOT NULL DEFAULT 0
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
    "plan",
    "drills",
    "hang_timeout",
    "resume_to",
    "run_from",
]
JSON_JOB_COLUMNS = {"progress", "drills"}
# Columns added since the first release: (name, declaration), added to an older state.db.
ADDED_COLUMNS = (
    ("plan", "TEXT NOT NULL DEFAULT '{}'"),
    ("resume_to", "TEXT"),
    ("run_from", "INTEGER NOT NULL DEFAULT 0"),
)
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


EventListener = Callable[[dict[str, Any]], None]


class Store:
    """All reads and writes of state.db. Single-threaded: used from the daemon's loop."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.listeners: list[EventListener] = []
        self._depth = 0  # nesting of tx(); only the outermost commits
        self._label: str | None = None
        self._writes = 0
        self._pending: list[dict[str, Any]] = []  # events heard once their tx commits
        self._crash = _crash_point(os.environ.get(CRASH_ENV))
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(path), isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
            self._migrate()
        except (sqlite3.Error, OSError) as exc:
            raise StateError(
                f"cannot use state database {path}: {exc}. Nothing was changed. "
                f"Fix its permissions or free disk space; if the file is damaged, move it "
                f"aside (the job folders next to it keep every attempt's output) and start again."
            ) from exc

    def _migrate(self) -> None:
        have = {row[1] for row in self.db.execute("PRAGMA table_info(jobs)")}
        for name, declaration in ADDED_COLUMNS:
            if name not in have:
                self.db.execute(f"ALTER TABLE jobs ADD COLUMN {name} {declaration}")
                if name == "plan" and "overrides" in have:  # the untyped dict before it
                    self.db.execute("UPDATE jobs SET plan = overrides")

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def tx(self, label: str | None = None) -> Iterator[sqlite3.Connection]:
        """One transaction; nested blocks join the outermost, which commits (or not) all."""
        if self._depth:
            self._depth += 1
            try:
                yield self.db
            finally:
                self._depth -= 1
            return
        self.db.execute("BEGIN IMMEDIATE")
        self._depth, self._label, self._writes = 1, label, 0
        try:
            yield self.db
        except BaseException:
            self._depth, self._pending = 0, []
            self.db.execute("ROLLBACK")
            raise
        self._depth = 0
        self.db.execute("COMMIT")
        self._crash_if(label, "commit")
        pending, self._pending = self._pending, []
        for record in pending:
            self._announce(record)

    def _write(self, sql: str, params: Any = ()) -> None:
        """Every write goes through here, inside a tx (the crash-injection points)."""
        self._writes += 1
        self._crash_if(self._label, str(self._writes))
        self.db.execute(sql, params)

    def _crash_if(self, label: str | None, point: str) -> None:
        if self._crash is not None and label is not None and self._crash == (label, point):
            os.kill(os.getpid(), signal.SIGKILL)

    # jobs ---------------------------------------------------------------

    def add_job(self, job: Job) -> None:
        values = [_dump_job_value(c, getattr(job, c)) for c in JOB_COLUMNS]
        marks = ",".join("?" for _ in JOB_COLUMNS)
        with self.tx():
            self._write(f"INSERT INTO jobs ({','.join(JOB_COLUMNS)}) VALUES ({marks})", values)

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
        with self.tx():
            self._write(f"UPDATE jobs SET {sets} WHERE name=?", [*values, name])

    def delete_job(self, name: str) -> None:
        with self.tx():
            for table, column in (("jobs", "name"), ("attempts", "job"), ("events", "job")):
                self._write(f"DELETE FROM {table} WHERE {column}=?", (name,))

    def move(self, name: str, new: JobState, reason: str, attempt: int | None = None) -> Job:
        """The one way a job changes state: checked, then its row and its `state_changed`
        event in one transaction (joining the caller's, when there is one)."""
        job = self.get_job(name)
        if job is None:
            raise KeyError(name)
        old = job.state
        check_transition(name, old, new)
        with self.tx("move"):
            self._write(
                "UPDATE jobs SET state=?, reason=?, updated=? WHERE name=?",
                (new.value, reason, time.time(), name),
            )
            self.emit(name, attempt, "state_changed", old=old.value, new=new.value, reason=reason)
        job.state, job.reason = new, reason
        return job

    # attempts -----------------------------------------------------------

    def add_attempt(self, attempt: Attempt) -> None:
        values = [_dump_attempt_value(c, getattr(attempt, c)) for c in ATTEMPT_COLUMNS]
        marks = ",".join("?" for _ in ATTEMPT_COLUMNS)
        with self.tx():
            self._write(
                f"INSERT INTO attempts ({','.join(ATTEMPT_COLUMNS)}) VALUES ({marks})", values
            )

    def update_attempt(self, job: str, n: int, **fields: Any) -> None:
        sets = ",".join(f"{k}=?" for k in fields)
        values = [_dump_attempt_value(k, v) for k, v in fields.items()]
        with self.tx():
            self._write(f"UPDATE attempts SET {sets} WHERE job=? AND n=?", [*values, job, n])

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

    def first_started(self, job: str, after: int = 0) -> float | None:
        """When the first attempt numbered above `after` started (a run's budget counts
        from its own first attempt)."""
        row = self.db.execute(  # the first by number: the primary key, not a scan
            "SELECT started FROM attempts WHERE job=? AND n>? ORDER BY n LIMIT 1", (job, after)
        ).fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def attempts(self, job: str) -> list[Attempt]:
        rows = self.db.execute(
            f"SELECT {','.join(ATTEMPT_COLUMNS)} FROM attempts WHERE job=? ORDER BY n", (job,)
        )
        return [_attempt_from_row(r) for r in rows]

    # events -------------------------------------------------------------

    def emit(self, job: str, attempt: int | None, event: str, **fields: Any) -> dict[str, Any]:
        """Store one event; log it and hand it to the listeners once it is committed."""
        ts = time.time()
        record = {"ts": ts, "job": job, "attempt": attempt, "event": event, **fields}
        with self.tx():
            self._write(
                "INSERT INTO events (ts, job, attempt, event, fields) VALUES (?,?,?,?,?)",
                (ts, job, attempt, event, json.dumps(fields, default=str)),
            )
            self._pending.append(record)
        return record

    def _announce(self, record: dict[str, Any]) -> None:
        fields = {k: v for k, v in record.items() if k not in ("ts", "job", "attempt", "event")}
        log.info(record["event"], job=record["job"], attempt=record["attempt"], **fields)
        for listener in self.listeners:
            listener(record)

    def prune_events(self, job: str, below: int, kept: tuple[str, ...]) -> None:
        """Delete the events of attempts 2..below-1 except those of the `kept` kinds."""
        marks = ",".join("?" * len(kept))
        with self.tx():
            self._write(
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


def _crash_point(value: str | None) -> tuple[str, str] | None:
    if not value or ":" not in value:
        return None
    label, point = value.split(":", 1)
    return label, point


def _dump_job_value(column: str, value: Any) -> Any:
    if isinstance(value, JobState):
        return value.value
    if column == "spec":
        return value.model_dump_json() if isinstance(value, JobSpec) else json.dumps(value)
    if column == "plan":
        return json.dumps(value.to_json() if isinstance(value, Plan) else (value or {}))
    if column in JSON_JOB_COLUMNS:
        return None if value is None else json.dumps(value)
    return value


def _job_from_row(row: tuple[Any, ...]) -> Job:
    values = dict(zip(JOB_COLUMNS, row, strict=True))
    for column in JSON_JOB_COLUMNS:
        if values[column] is not None:
            values[column] = json.loads(values[column])
    values["spec"] = JobSpec.model_validate_json(values["spec"])
    values["plan"] = Plan.from_json(json.loads(values["plan"] or "{}"))
    values["state"] = JobState(values["state"])
    values["resume_to"] = JobState(values["resume_to"]) if values["resume_to"] else None
    return Job(**values)


def _dump_attempt_value(column: str, value: Any) -> Any:
    return json.dumps(value) if column == "exit" and value is not None else value


def _attempt_from_row(row: tuple[Any, ...]) -> Attempt:
    values = dict(zip(ATTEMPT_COLUMNS, row, strict=True))
    if values["exit"] is not None:
        values["exit"] = json.loads(values["exit"])
    return Attempt(**values)
