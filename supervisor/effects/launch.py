"""Start one attempt through the shim, and recognise a shim again after a daemon restart."""

from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rsup.supervisor.core.runnable import CHECKPOINT_TOKEN, PYTHON_NAMES
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.effects import checkpoints
from rsup.supervisor.effects.proctime import stat_fields
from rsup.supervisor.effects.profiles import load_profile
from rsup.supervisor.recognize import ranks
from rsup.workers import constants as C


@dataclass(frozen=True)
class RunAs:
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str
    user: str


def run_as(uid: int) -> RunAs | None:
    """Who the job runs as: the submitting user when rsupd is root, else rsupd's own user."""
    if os.geteuid() != 0 or uid == 0:
        return None
    entry = pwd.getpwuid(uid)
    groups = tuple(os.getgrouplist(entry.pw_name, entry.pw_gid))
    return RunAs(uid, entry.pw_gid, groups, entry.pw_dir, entry.pw_name)


def interpreter(spec: JobSpec) -> str:
    return spec.python or sys.executable


def expand_checkpoint(argv: list[str], checkpoint: str | None) -> list[str]:
    """Put the checkpoint path in place of {checkpoint} once the file exists.

    Before it exists, an argument that is exactly {checkpoint} is dropped with the option
    just before it (`--resume {checkpoint}`), and one that embeds it (`--resume={checkpoint}`)
    is dropped alone, so the first attempt starts fresh.
    """
    if checkpoint and Path(checkpoint).exists():
        return [a.replace(CHECKPOINT_TOKEN, checkpoint) for a in argv]
    out: list[str] = []
    for arg in argv:
        if arg == CHECKPOINT_TOKEN:
            if out and out[-1].startswith("-"):
                out.pop()
        elif CHECKPOINT_TOKEN not in arg:
            out.append(arg)
    return out


def expand_knobs(argv: list[str], values: dict[str, str]) -> list[str]:
    """Put the values in force in place of {batch}, {workers} and {python}."""
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def knob_values(spec: JobSpec, batch: int | None, workers: int | None) -> dict[str, str]:
    values = {"python": interpreter(spec)}
    if batch is not None:
        values["batch"] = str(batch)
    if workers is not None:
        values["workers"] = str(workers)
    return values


def job_argv(
    spec: JobSpec, attempt_dir: Path, batch: int | None = None, workers: int | None = None
) -> list[str]:
    """The job's own argv for its kind, with the knobs in force."""
    python = interpreter(spec)
    kind = spec.kind
    values = knob_values(spec, batch, workers)
    if kind == "ultralytics":
        return [python, "-m", "rsup.workers.yolo", "--config", str(attempt_dir / "yolo.json")]
    if kind == "torchrun":
        script = expand_knobs(torchrun_script(spec), values)
        return [python, "-m", "torch.distributed.run", *torchrun_args(spec, attempt_dir), *script]
    resume = checkpoints.resume_point(spec.checkpoint)
    argv = expand_knobs(expand_checkpoint(list(spec.command or []), resume), values)
    if argv and argv[0] in PYTHON_NAMES:
        argv[0] = python
    return argv


def torchrun_script(spec: JobSpec) -> list[str]:
    """The script and its arguments, with {checkpoint} given as the path even before the
    file exists.

    torchrun restarts ranks in place with this same command line (its max_restarts, a
    node joining the group), by when the checkpoint may exist: an option dropped now would
    make them start over. The script starts fresh while the file is missing (torchrun's
    usual pattern: load the checkpoint when it exists).
    """
    command = list(spec.command or [])
    if not spec.checkpoint:
        return expand_checkpoint(command, None)
    if checkpoints.is_pattern(spec.checkpoint):  # a glob names no file before it matches
        return expand_checkpoint(command, checkpoints.resume_point(spec.checkpoint))
    return [a.replace(CHECKPOINT_TOKEN, spec.checkpoint) for a in command]


def torchrun_args(spec: JobSpec, attempt_dir: Path) -> list[str]:
    """torchrun's options: the group as the spec says, and every rank's output in output.log.

    `--tee 3` copies each rank's stdout and stderr to the console (the shim's pipe) with
    the global rank in front (`[rank1]:`), and to files under the attempt's torchrun/
    folder, where torchrun also points each rank's TORCHELASTIC_ERROR_FILE (ranks.py).
    """
    t = spec.torchrun
    args = [
        f"--nproc-per-node={t.nproc_per_node}",
        f"--nnodes={t.nnodes}",
        f"--max-restarts={t.max_restarts}",
        f"--rdzv-backend={t.rdzv_backend}",
        f"--rdzv-id={t.rdzv_id or spec.name}",
    ]
    args.append(f"--rdzv-endpoint={t.rdzv_endpoint}" if t.rdzv_endpoint else "--standalone")
    return [
        *args,
        "--tee=3",
        f"--log-dir={attempt_dir / ranks.LOG_DIR}",
        f"--log-line-prefix-template={ranks.PREFIX_TEMPLATE}",
    ]


def torchrun_env(spec: JobSpec) -> dict[str, str]:
    """Defaults for a torchrun job; the daemon's env, a profile or the job's env win."""
    if spec.kind != "torchrun":
        return {}
    # Ranks that share the agent's rendezvous store may read the last round's addresses
    # after torchrun restarts them in place (its max_restarts, or a node joining): seen
    # here as gloo "connectFullMesh failed ... Connection refused", or ranks that never
    # meet, in 5 of 11 restarts; none in 12 with the store unshared (pytorch#135712).
    return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}


def job_env(
    base: dict[str, str], spec: JobSpec, extra: dict[str, str], who: RunAs | None
) -> dict[str, str]:
    """Daemon env, the env profile, the job's env, then what rsup sets for this attempt.
    A PYTHONPATH in `extra` (rsup.workers' folder) goes in front of the job's, not over it."""
    env = dict(base)
    if who is not None:
        env.update(HOME=who.home, USER=who.user, LOGNAME=who.user)
    env.setdefault("PYTHONUNBUFFERED", "1")  # live output: a pipe would block-buffer it
    for key, value in torchrun_env(spec).items():
        env.setdefault(key, value)
    if spec.env_profile:
        env.update(load_profile(spec.env_profile))
    env.update(spec.env)
    extra = dict(extra)
    first = extra.pop("PYTHONPATH", None)
    env.update(extra)
    if first:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (first, env.get("PYTHONPATH")) if p)
    return env


def shim_argv(
    spec: JobSpec,
    attempt_dir: Path,
    argv: list[str],
    who: RunAs | None,
    cgroup: Path | None = None,
) -> list[str]:
    cmd = [
        sys.executable,
        "-I",  # the job's PYTHONPATH (a json.py in its tree...) must not reach the shim
        "-m",
        "rsup.workers.shim",
        "--attempt-dir",
        str(attempt_dir),
        "--grace",
        str(spec.stop.grace),
        "--stop-signal",
        spec.stop.signal,
        "--max-log-bytes",
        str(spec.limits.log_max_bytes),
        "--cwd",
        spec.cwd,
    ]
    if who is not None:
        groups = ",".join(str(g) for g in who.groups)
        cmd += ["--user", str(who.uid), "--group", str(who.gid), "--groups", groups]
    if cgroup is not None:
        cmd += ["--cgroup", str(cgroup)]
    return [*cmd, "--", *argv]


def start_shim(argv: list[str], env: dict[str, str]) -> int:
    """Launch the shim in its own session with no pipe to us; return its pid."""
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )
    # The engine reaps it through its pidfd; stop Popen from trying as well.
    proc.returncode = 0
    return proc.pid


def start_time(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (clock ticks after boot): with the pid, an identity."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def alive_as(pid: int | None, started: int | None) -> bool:
    """True when `pid` still names the same process (guards against pid reuse)."""
    fields = stat_fields(pid) if pid is not None else None
    if not fields or (started is not None and int(fields[19]) != started):
        return False
    return fields[0] != b"Z"


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def shim_info(attempt_dir: Path) -> dict[str, Any] | None:
    return read_json(attempt_dir / C.SHIM_JSON)


def exit_info(attempt_dir: Path) -> dict[str, Any] | None:
    return read_json(attempt_dir / C.EXIT_JSON)
