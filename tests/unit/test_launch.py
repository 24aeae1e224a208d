"""The job's environment: who wins where rsupd, a profile, the spec and rsup all speak."""

from __future__ import annotations

from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.effects.launch import job_env


def spec_with(env: dict[str, str] | None = None) -> JobSpec:
    return JobSpec(name="j", command=["true"], env=env or {})


def test_the_jobs_pythonpath_is_kept_behind_rsups_folder() -> None:
    base = {"PATH": "/usr/bin", "PYTHONPATH": "/daemon/site"}
    spec = spec_with({"PYTHONPATH": "/home/me/src:/home/me/lib", "SEED": "7"})
    env = job_env(base, spec, {"PYTHONPATH": "/state/pylib", "RSUP_JOB": "j"}, None)
    assert env["PYTHONPATH"] == "/state/pylib:/home/me/src:/home/me/lib"
    assert env["SEED"] == "7" and env["RSUP_JOB"] == "j" and env["PATH"] == "/usr/bin"


def test_without_a_job_pythonpath_the_daemons_follows_rsups_folder() -> None:
    env = job_env({"PYTHONPATH": "/daemon/site"}, spec_with(), {"PYTHONPATH": "/state/pylib"}, None)
    assert env["PYTHONPATH"] == "/state/pylib:/daemon/site"
    assert (
        job_env({}, spec_with(), {"PYTHONPATH": "/state/pylib"}, None)["PYTHONPATH"]
        == "/state/pylib"
    )


def test_rsups_own_settings_win_over_the_spec() -> None:
    spec = spec_with({"RSUP_JOB": "spoofed", "PYTHONUNBUFFERED": "0"})
    env = job_env({}, spec, {"RSUP_JOB": "real"}, None)
    assert env["RSUP_JOB"] == "real"
    assert env["PYTHONUNBUFFERED"] == "0"  # the spec may turn live output off
