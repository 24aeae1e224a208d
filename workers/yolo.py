"""One Ultralytics training attempt under rsup::

    <job python> -m rsup.workers.yolo --config <attempt_dir>/yolo.json

yolo.json, written by the daemon::

    {"train": {...the spec's train: keys...}, "project": "/abs/runs", "name": "train",
     "overrides": {"batch": 8, "device": "cpu", "workers": 2},
     "last_good_dir": "/abs/last-good", "drills": [{"kind": "kill", "at_epoch": 2}],
     "drills_file": "/abs/drills.json"}

The worker resumes the run in project/name when its checkpoint allows, says what it does
in events.jsonl, and exits 0 only when the final epoch is done and best.pt and last.pt
exist; 1 when training failed or ended short; 2 when yolo.json is unusable.

It runs in the job's interpreter: standard library, torch and ultralytics only, Python 3.9.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import traceback
from dataclasses import dataclass
from typing import Any

from rsup.workers import heartbeat
from rsup.workers.constants import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from rsup.workers.yolocallbacks import Drill, DrillBook, Reporter, RunFacts, parse_drills
from rsup.workers.yolockpt import (
    FINISHED,
    RESUME,
    StartPlan,
    plan_start,
    read_checkpoint,
    remove_stale_temps,
    trim_results,
)

OVERRIDE_KEYS = ("batch", "device", "workers")
# yolo.json's own fields decide these; the same keys under train: are dropped.
RESERVED_TRAIN_KEYS = ("project", "name", "exist_ok", "resume")


class ConfigError(ValueError):
    """yolo.json is missing, unreadable or inconsistent."""


@dataclass(frozen=True)
class WorkerConfig:
    """The parsed yolo.json."""

    train: dict[str, Any]
    project: str
    name: str
    overrides: dict[str, Any]
    last_good_dir: str
    drills: list[Drill]
    drills_file: str | None

    @property
    def run_dir(self) -> str:
        """Where Ultralytics writes this run (weights/, results.csv, args.yaml)."""
        return os.path.join(self.project, self.name)


def _dict_field(raw: dict[str, Any], key: str) -> dict[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ConfigError(f"'{key}' must be an object")
    return value


def _abs_dir(raw: dict[str, Any], key: str, default: str | None = None) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str) or not value:
        raise ConfigError(f"'{key}' must be a non-empty path")
    return os.path.abspath(value)


def _train_args(raw: dict[str, Any]) -> dict[str, Any]:
    train = {k: v for k, v in _dict_field(raw, "train").items() if k not in RESERVED_TRAIN_KEYS}
    for key in ("model", "data"):  # files beside the job become absolute; resume needs them
        value = train.get(key)
        if isinstance(value, str) and os.path.isfile(value):
            train[key] = os.path.abspath(value)
    return train


def parse_config(raw: Any) -> WorkerConfig:
    """Check yolo.json data and fill in its defaults."""
    if not isinstance(raw, dict):
        raise ConfigError("yolo.json must hold a JSON object")
    overrides = _dict_field(raw, "overrides")
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise ConfigError(f"overrides may only set {', '.join(OVERRIDE_KEYS)}, not {unknown}")
    project = _abs_dir(raw, "project")
    name = raw.get("name") or "train"
    if not isinstance(name, str) or os.sep in name:
        raise ConfigError("'name' must be a plain folder name")
    try:
        drills = parse_drills(raw.get("drills") or [])
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    drills_file = raw.get("drills_file")
    if drills_file is not None and not isinstance(drills_file, str):
        raise ConfigError("'drills_file' must be a path or null")
    return WorkerConfig(
        train=_train_args(raw),
        project=project,
        name=name,
        overrides=overrides,
        last_good_dir=_abs_dir(raw, "last_good_dir", os.path.join(project, name, "last-good")),
        drills=drills,
        drills_file=os.path.abspath(drills_file) if drills_file else None,
    )


def load_config(path: str) -> WorkerConfig:
    """Read and check yolo.json."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc
    return parse_config(raw)


def prepare_process(cfg: WorkerConfig) -> None:
    """Process settings that must be in place before torch and ultralytics are imported."""
    if "torch" in sys.modules:
        print("rsup: torch was imported before the worker set spawn", file=sys.stderr)
    # Forked DataLoader workers inherit GPU runtime state and die in odd ways on ROCm.
    multiprocessing.set_start_method("spawn", force=True)
    os.environ["YOLO_OFFLINE"] = "1"
    if not os.environ.get("YOLO_CONFIG_DIR"):
        config_dir = os.path.join(cfg.project, ".yolo-config")
        os.makedirs(config_dir, exist_ok=True)
        os.environ["YOLO_CONFIG_DIR"] = config_dir
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)  # the last lines before a kill reach output.log


def patch_dataloaders() -> bool:
    """Give Ultralytics' DataLoaders spawn workers that persist; False where not possible.

    Every 8.x loader goes through ultralytics.data.build.InfiniteDataLoader, so its
    constructor is wrapped; a version without it keeps its own loaders.
    """
    try:
        from ultralytics.data import build
    except ImportError:
        return False
    loader_cls = getattr(build, "InfiniteDataLoader", None)
    original = getattr(loader_cls, "__init__", None)
    if loader_cls is None or original is None:
        return False
    if getattr(original, "_rsup_spawn", False):
        return True

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        workers = kwargs.get("num_workers")
        if isinstance(workers, int) and workers > 0:
            kwargs.setdefault("multiprocessing_context", "spawn")
            kwargs.setdefault("persistent_workers", True)
        original(self, *args, **kwargs)

    init._rsup_spawn = True  # type: ignore[attr-defined]
    loader_cls.__init__ = init
    return True


def finished_status(cfg: WorkerConfig, plan: StartPlan) -> int:
    """A run that finished earlier: report it and succeed, or say what is missing."""
    info = plan.info
    epochs = info.epochs if info is not None else None
    return report_outcome(cfg, epochs, already_finished=True)


def report_outcome(cfg: WorkerConfig, epochs: int | None, already_finished: bool = False) -> int:
    """run_completed and exit 0 when best.pt and a finished last.pt exist; else exit 1."""
    weights = os.path.join(cfg.run_dir, "weights")
    best, last = os.path.join(weights, "best.pt"), os.path.join(weights, "last.pt")
    info = read_checkpoint(last) if os.path.isfile(last) else None
    missing = [p for p in (best, last) if not os.path.isfile(p)]
    if missing or info is None or not info.finished:
        why = f"missing {', '.join(missing)}" if missing else f"{last} is not a finished run"
        print(f"rsup: training did not complete: {why}", file=sys.stderr)
        heartbeat.emit("run_incomplete", reason=why, run_dir=cfg.run_dir)
        return EXIT_FAILED
    heartbeat.emit(
        "run_completed",
        epochs=epochs if epochs is not None else info.epochs,
        best=best,
        last=last,
        run_dir=cfg.run_dir,
        already_finished=already_finished,
    )
    print(f"rsup: training complete; best weights: {best}", flush=True)
    return EXIT_OK


def _train_kwargs(cfg: WorkerConfig, plan: StartPlan) -> dict[str, Any]:
    if plan.action == RESUME:
        kwargs: dict[str, Any] = {"resume": True}
        if "data" in cfg.train:
            kwargs["data"] = cfg.train["data"]
    else:
        kwargs = {k: v for k, v in cfg.train.items() if k != "model"}
        kwargs.update(project=cfg.project, name=cfg.name, exist_ok=True)
    kwargs.update(cfg.overrides)
    return kwargs


def train(cfg: WorkerConfig, plan: StartPlan) -> int:
    """Run Ultralytics from the plan's starting point; the exit status of the attempt."""
    patch_dataloaders()
    from ultralytics import YOLO  # type: ignore[attr-defined]

    resumed = plan.action == RESUME
    facts = RunFacts(resumed, dict(cfg.overrides), cfg.last_good_dir, plan.checkpoint)
    reporter = Reporter(facts, DrillBook(cfg.drills, cfg.drills_file, cfg.last_good_dir))
    source = plan.checkpoint if resumed else cfg.train.get("model")
    model = YOLO(str(source or "yolov8n.yaml"))
    reporter.attach(model)
    try:
        model.train(**_train_kwargs(cfg, plan))
    finally:
        reporter.close()
    if reporter.epochs_done < reporter.epochs and not reporter.stopped_early:
        print(
            f"rsup: training stopped after epoch {reporter.epochs_done} of {reporter.epochs}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return report_outcome(cfg, reporter.epochs_done)


def run(cfg: WorkerConfig) -> int:
    """Decide where to start, then train (or report a finished run)."""
    heartbeat.beat(phase="setup")
    for folder in (cfg.last_good_dir, os.path.join(cfg.run_dir, "weights"), cfg.run_dir):
        remove_stale_temps(folder)
    plan = plan_start(cfg.run_dir, cfg.last_good_dir)
    print(f"rsup: {plan.reason}", flush=True)
    if plan.restored_from:
        heartbeat.emit("checkpoint_restored", source=plan.restored_from, path=plan.checkpoint)
    if plan.action == FINISHED:
        return finished_status(cfg, plan)
    if plan.action == RESUME and plan.info is not None:
        removed = trim_results(os.path.join(cfg.run_dir, "results.csv"), plan.info.epochs_done)
        if removed:
            print(f"rsup: results.csv: dropped {removed} row(s) past epoch {plan.info.epochs_done}")
    return train(cfg, plan)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m rsup.workers.yolo")
    parser.add_argument("--config", required=True, help="path of yolo.json")
    args = parser.parse_args(argv)
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"rsup: bad worker config: {exc}", file=sys.stderr)
        return EXIT_USAGE
    prepare_process(cfg)
    try:
        return run(cfg)
    except Exception as exc:
        traceback.print_exc()
        heartbeat.emit("run_failed", error=type(exc).__name__, message=str(exc)[:2000])
        print(f"rsup: training failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
