"""The job lifecycle (every allowed move, illegal ones refused) and the store that moves jobs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from rsup.supervisor.core.job import Attempt, Job
from rsup.supervisor.core.plan import Plan
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.core.states import (
    TERMINAL,
    TRANSITIONS,
    IllegalTransition,
    JobState,
    check_transition,
)
from rsup.supervisor.effects.store import Store

S = JobState
ALLOWED = [(old, new) for old, targets in TRANSITIONS.items() for new in sorted(targets)]
ILLEGAL = [
    (S.QUEUED, S.RUNNING),  # never run without starting
    (S.QUEUED, S.SUCCEEDED),
    (S.SUCCEEDED, S.RUNNING),  # a finished job is started again through queued
    (S.FAILED, S.BACKOFF),
    (S.STOPPED, S.STARTING),
    (S.STOPPING, S.RUNNING),  # a stop is never undone
    (S.STOPPING, S.BACKOFF),
    (S.BACKOFF, S.RUNNING),  # backoff -> starting -> running
    (S.PROBING, S.RUNNING),
    (S.RUNNING, S.RUNNING),
]


def test_every_state_has_its_moves_written_down() -> None:
    assert set(TRANSITIONS) == set(JobState)
    assert {S.SUCCEEDED, S.FAILED, S.STOPPED} == TERMINAL
    for state in TERMINAL:
        assert state.terminal and TRANSITIONS[state] == {S.QUEUED}


@pytest.mark.parametrize(("old", "new"), ALLOWED, ids=lambda s: s.value)
def test_allowed_transition(old: JobState, new: JobState) -> None:
    check_transition("job", old, new)


@pytest.mark.parametrize(("old", "new"), ILLEGAL, ids=lambda s: s.value)
def test_illegal_transition_is_refused(old: JobState, new: JobState) -> None:
    assert new not in TRANSITIONS[old]
    with pytest.raises(IllegalTransition) as caught:
        check_transition("thermal", old, new)
    assert caught.value.old is old and caught.value.new is new
    assert str(caught.value) == f"job thermal: illegal state change {old.value} -> {new.value}"


def test_the_documented_happy_path_is_allowed() -> None:
    path = [S.QUEUED, S.PROBING, S.STARTING, S.RUNNING, S.BACKOFF, S.STARTING, S.RUNNING,
            S.SUCCEEDED]  # fmt: skip
    for old, new in itertools.pairwise(path):
        check_transition("job", old, new)


# --- the store ------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Store:
    store = Store(tmp_path / "state.db")
    store.add_job(Job("thermal", 1000, JobSpec(name="thermal", command=["x"]), S.QUEUED))
    return store


def test_move_stores_the_state_and_reason(store: Store, tmp_path: Path) -> None:
    job = store.move("thermal", S.STARTING, "starting on cpu")
    assert (job.state, job.reason) == (S.STARTING, "starting on cpu")
    again = Store(tmp_path / "state.db").get_job("thermal")  # what another reader sees
    assert again is not None and (again.state, again.reason) == (S.STARTING, "starting on cpu")


def test_move_emits_a_state_changed_event(store: Store) -> None:
    seen: list[dict[str, object]] = []
    store.listeners.append(seen.append)
    store.move("thermal", S.STARTING, "starting on cpu", attempt=None)
    store.move("thermal", S.RUNNING, "attempt 1 running", attempt=1)
    changes = [e for e in store.events("thermal") if e["event"] == "state_changed"]
    assert [(e["old"], e["new"], e["attempt"]) for e in changes] == [
        ("queued", "starting", None), ("starting", "running", 1),
    ]  # fmt: skip
    assert changes[1]["reason"] == "attempt 1 running"
    assert [e["event"] for e in seen] == ["state_changed", "state_changed"]
    assert seen[1]["new"] == "running" and isinstance(seen[1]["ts"], float)


def test_move_refuses_an_illegal_move_and_changes_nothing(store: Store) -> None:
    with pytest.raises(IllegalTransition):
        store.move("thermal", S.RUNNING, "skipping starting")
    job = store.get_job("thermal")
    assert job is not None and job.state == S.QUEUED
    assert not [e for e in store.events("thermal") if e["event"] == "state_changed"]


def test_move_of_a_missing_job_is_a_key_error(store: Store) -> None:
    with pytest.raises(KeyError):
        store.move("nobody", S.STARTING, "x")


def test_update_job_refuses_a_state_change(store: Store) -> None:
    with pytest.raises(ValueError, match=r"Store\.move"):
        store.update_job("thermal", state=S.RUNNING)


def test_events_come_oldest_first_with_their_fields(store: Store) -> None:
    for n in range(5):
        store.emit("thermal", n, "progress", epoch=n, loss=0.5 / (n + 1))
    store.emit("other", None, "progress", epoch=99)
    events = store.events("thermal")
    assert [e["epoch"] for e in events] == [0, 1, 2, 3, 4]
    assert [e["id"] for e in events] == sorted(e["id"] for e in events)
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
    assert all(e["job"] == "thermal" and e["event"] == "progress" for e in events)
    assert [e["epoch"] for e in store.events("thermal", after_id=events[2]["id"])] == [3, 4]


def test_job_and_attempt_fields_round_trip(store: Store) -> None:
    store.update_job("thermal", plan=Plan(batch=8), progress={"epoch": 3}, hang_timeout=42.0,
                     last_fault="oom", same_fault=2, resume_to=S.PROBING)  # fmt: skip
    job = store.get_job("thermal")
    assert job is not None
    assert (job.plan, job.progress, job.hang_timeout) == (Plan(batch=8), {"epoch": 3}, 42.0)
    assert job.resume_to == S.PROBING and job.batch == 8 and job.spec.name == "thermal"
    assert (job.last_fault, job.same_fault) == ("oom", 2)
    store.add_attempt(Attempt("thermal", 1, "/tmp/a1", 1.0))
    store.update_attempt("thermal", 1, exit={"exit_code": 1}, fault="oom", processed=1)
    attempt = store.attempt("thermal", 1)
    assert attempt is not None
    assert (attempt.exit, attempt.fault, attempt.processed) == ({"exit_code": 1}, "oom", 1)
