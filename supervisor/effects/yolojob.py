"""What an Ultralytics attempt is told: the worker's yolo.json, written by rsupd."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from rsup.supervisor.core.job import Job
from rsup.supervisor.core.spec import JobSpec
from rsup.supervisor.effects.drills import DRILLS_JSON

YOLO_JSON = "yolo.json"
WORKER_OVERRIDES = ("batch", "workers", "device")


def run_dir(spec: JobSpec, job_name: str) -> Path:
    """project/name: the spec's when it names them, else <cwd>/runs/<job name>."""
    train = spec.train or {}
    cwd = Path(spec.cwd)
    project = Path(train["project"]) if train.get("project") else cwd / "runs"
    if not project.is_absolute():
        project = cwd / project
    return project / str(train.get("name") or job_name)


def write_config(adir: Path, job: Job, last_good: Path, device: str | None) -> Path:
    """Write <attempt>/yolo.json atomically and return its path."""
    spec = job.spec
    target = run_dir(spec, job.name)
    overrides = {k: v for k, v in job.plan.changes().items() if k in WORKER_OVERRIDES}
    if device == "cpu" or overrides.get("device") == "cpu":
        overrides["device"] = "cpu"
    elif device is not None and device != "auto":
        overrides.setdefault("device", "0")  # the chosen GPU is the only one visible
    train = {k: v for k, v in (spec.train or {}).items() if k not in ("project", "name")}
    config = {
        "train": _absolute_paths(train, Path(spec.cwd)),
        "project": str(target.parent),
        "name": target.name,
        "overrides": overrides,
        "last_good_dir": str(last_good),
        "drills": [d for d in job.drills if not d.get("fired")],
        "drills_file": str(adir / DRILLS_JSON),
    }
    path = adir / YOLO_JSON
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=2))
    os.replace(tmp, path)
    return path


def _absolute_paths(train: dict[str, Any], cwd: Path) -> dict[str, Any]:
    out = dict(train)
    for key in ("data", "model"):
        value = out.get(key)
        if isinstance(value, str) and (cwd / value).exists():
            out[key] = str((cwd / value).resolve())
    return out
