"""The job spec, version 1 (DESIGN.md "Job spec (YAML)"): its models and how it is loaded.

load_spec / parse_spec validate a YAML file and resolve its relative paths; every
problem found is reported at once, one per line in file order, each as
`<file>:<line>: <field.path>: <what is wrong>; <what to do>` (see SpecError).
spec_from_json revalidates a spec that was already resolved (the daemon's side).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from . import runnable
from . import specfields as check
from .specfields import NAME_PATTERN as NAME_PATTERN
from .specfields import (
    PathStr,
    StageName,
)
from .specload import Marks, SpecProblem, load_yaml, problems_from
from .specload import SpecError as SpecError
from .specload import parse_duration as parse_duration
from .specload import parse_size as parse_size

MAX_SPEC_BYTES = 1 << 20
JSON_SOURCE = "<request>"


Duration = Annotated[float, BeforeValidator(parse_duration)]
PositiveDuration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]
ByteSize = Annotated[int, BeforeValidator(parse_size)]
EnvName = Annotated[str, AfterValidator(check.env_name)]
EnvValue = Annotated[str, AfterValidator(check.env_value)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TorchrunSpec(_Model):
    nproc_per_node: Annotated[int | str, BeforeValidator(check.nproc)] = 1
    nnodes: Annotated[str, BeforeValidator(check.nnodes)] = "1"
    rdzv_backend: Annotated[str, AfterValidator(check.plain_name("rendezvous backend"))] = "c10d"
    rdzv_endpoint: Annotated[str, AfterValidator(check.endpoint)] | None = None
    rdzv_id: Annotated[str, AfterValidator(check.plain_name("rendezvous id"))] | None = None
    max_restarts: Annotated[int, Field(ge=0)] = 0


class ProbeSpec(_Model):
    enabled: bool = True
    timeouts: dict[StageName, PositiveDuration] = Field(default_factory=dict)
    extra_stages: list[PathStr] = Field(default_factory=list)


class BackoffSpec(_Model):
    initial: Duration = 10.0
    factor: Annotated[float, Field(ge=1)] = 2.0
    max: Duration = 300.0

    @model_validator(mode="after")
    def _max_covers_initial(self) -> BackoffSpec:
        if self.max < self.initial:
            raise PydanticCustomError(
                "spec_rule",
                f"must be at least initial ({self.initial:g} s), got {self.max:g} s; "
                "raise max or lower initial",
                {"field": "max"},
            )
        return self


class RestartSpec(_Model):
    max_attempts: Annotated[int, Field(ge=1)] = 10
    backoff: BackoffSpec = Field(default_factory=BackoffSpec)
    reset_after: Duration = 600.0


class HangSpec(_Model):
    timeout: PositiveDuration = 1800.0
    startup_timeout: PositiveDuration = 3600.0
    hard_limit_factor: Annotated[float, Field(ge=1)] = 3.0
    # the longest a silent job may stay busy (CPU or GPU kernels compiling) before it is
    # a hang; unset: hard_limit_factor x the silence limit. `rsup status` shows it.
    busy_limit: PositiveDuration | None = None
    # a fatal GPU fault or runtime abort was printed, and the job neither exits nor
    # advances: it is wedged in the driver. Stopped after this long, then recovered.
    fault_grace: PositiveDuration = 60.0


class StopSpec(_Model):
    signal: Annotated[str, BeforeValidator(check.signal_name)] = "SIGTERM"
    grace: Duration = 30.0


class LimitsSpec(_Model):
    max_runtime: PositiveDuration | None = None
    log_max_bytes: ByteSize = 256 * 1024 * 1024
    memory: ByteSize | None = None  # memory.max of each attempt's cgroup, where rsup has one


class FallbackSpec(_Model):
    cpu: bool = True


class CostSpec(_Model):
    per_hour: Annotated[float, Field(ge=0)] = 0.0
    currency: str = "USD"
    budget: Annotated[float, Field(gt=0)] | None = None


class PreflightSpec(_Model):
    """A short run before the real one: same device, same env; failing it fails the job."""

    train: dict[str, Any] | None = None  # ultralytics: train: keys replaced for the check
    command: Annotated[list[str] | None, BeforeValidator(check.argv)] = None  # command jobs
    timeout: PositiveDuration = 600.0


class HooksSpec(_Model):
    """Commands run when the job ends (argv lists, run as the job's user, with a timeout)."""

    on_success: Annotated[list[str] | None, BeforeValidator(check.argv)] = None
    on_failure: Annotated[list[str] | None, BeforeValidator(check.argv)] = None
    on_exit: Annotated[list[str] | None, BeforeValidator(check.argv)] = None
    timeout: PositiveDuration = 300.0


NotifyKind = Literal[
    "failed", "gave_up", "fallback_cpu", "hang_detected", "budget_stopped", "succeeded"
]


class NotifySpec(_Model):
    """This job's notifications, added to rsupd.toml [notify] (Apprise URLs)."""

    urls: list[str] = Field(default_factory=list)
    on: list[NotifyKind] = Field(default_factory=list)  # empty: rsupd.toml's `on`


class JobSpec(_Model):
    """A validated job spec; paths are absolute once it comes from load_spec or parse_spec."""

    name: Annotated[str, AfterValidator(check.job_name), Field(examples=["thermal-yolov8n"])]
    kind: Literal["command", "ultralytics", "torchrun"] = "command"
    command: Annotated[list[str] | None, BeforeValidator(check.argv)] = None
    python: PathStr | None = None
    cwd: PathStr = "."
    env: dict[
        Annotated[str, AfterValidator(check.env_name)],
        Annotated[str, AfterValidator(check.env_value)],
    ] = Field(default_factory=dict)
    env_profile: Annotated[str, AfterValidator(check.plain_name("profile name"))] | None = None
    device: Annotated[str, BeforeValidator(check.device)] = "auto"
    checkpoint: PathStr | None = None
    train: dict[str, Any] | None = None
    torchrun: TorchrunSpec = Field(default_factory=TorchrunSpec)
    probe: ProbeSpec = Field(default_factory=ProbeSpec)
    restart: RestartSpec = Field(default_factory=RestartSpec)
    hang: HangSpec = Field(default_factory=HangSpec)
    stop: StopSpec = Field(default_factory=StopSpec)
    limits: LimitsSpec = Field(default_factory=LimitsSpec)
    fallback: FallbackSpec = Field(default_factory=FallbackSpec)
    user: Annotated[str, AfterValidator(check.plain_name("user name"))] | None = None
    after: list[Annotated[str, AfterValidator(check.job_name)]] = Field(default_factory=list)
    cost: CostSpec = Field(default_factory=CostSpec)
    hooks: HooksSpec = Field(default_factory=HooksSpec)
    preflight: PreflightSpec | None = None
    share_gpu: bool = False  # may share its GPU with other jobs that also allow it
    # command/torchrun knobs: {batch} and {workers} in command, $RSUP_BATCH, $RSUP_WORKERS;
    # rsup halves them after an OOM or a DataLoader worker death
    notify: NotifySpec | None = None
    batch: Annotated[int, Field(ge=1)] | None = None
    workers: Annotated[int, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _fits_kind(self) -> JobSpec:
        problem = _kind_problem(self)
        if problem is not None:
            field, text = problem
            raise PydanticCustomError("spec_rule", text, {"field": field, "near": "kind"})
        if self.kind == "torchrun" and self.torchrun.rdzv_id is None:
            self.torchrun = self.torchrun.model_copy(update={"rdzv_id": self.name})
        return self


def _kind_problem(spec: JobSpec) -> tuple[str, str] | None:
    """(field, message) for the first key that does not fit the job's kind."""
    kind = spec.kind
    if kind != "ultralytics" and spec.train is not None:
        return "train", "only kind 'ultralytics' reads train; remove it, or set kind: ultralytics"
    if kind == "ultralytics" and (spec.batch is not None or spec.workers is not None):
        field = "batch" if spec.batch is not None else "workers"
        return field, f"kind 'ultralytics' reads train.{field}; move it under train:"
    if kind != "torchrun" and spec.torchrun != TorchrunSpec():
        return "torchrun", "only kind 'torchrun' reads torchrun; remove it, or set kind: torchrun"
    if kind == "command" and spec.command is None:
        return "command", "required for kind 'command'; add e.g. command: [python, train.py]"
    if kind == "torchrun" and spec.command is None:
        return (
            "command",
            "required for kind 'torchrun' (script and arguments); add command: [train.py]",
        )
    if kind == "ultralytics":
        return _ultralytics_problem(spec)
    return None


def _ultralytics_problem(spec: JobSpec) -> tuple[str, str] | None:
    if spec.command is not None:
        return "command", (
            "kind 'ultralytics' runs rsup's own trainer, so command would be ignored; "
            "remove it, or use kind: command"
        )
    if spec.train is None:
        return "train", (
            "required for kind 'ultralytics'; add e.g. "
            "train: {model: yolov8n.yaml, data: data.yaml, epochs: 100}"
        )
    for key, what in (("model", "model (yolov8n.yaml, yolov8n.pt)"), ("data", "dataset yaml")):
        if not isinstance(spec.train.get(key), str) or not spec.train[key].strip():
            return f"train.{key}", f"required for kind 'ultralytics': the {what}, as a string"
    if "device" in spec.train:
        return "train.device", "set the top-level `device:` instead; rsup picks it for each attempt"
    return None


def load_spec(path: str | os.PathLike[str], runnable: bool = False) -> JobSpec:
    """Read, validate and resolve the spec file at path; SpecError naming the file if bad."""
    source = os.fspath(path)
    try:
        with open(source, "rb") as handle:
            data = handle.read(MAX_SPEC_BYTES + 1)
    except OSError as err:
        reason = err.strerror or str(err)
        raise SpecError(source, f"cannot read the job spec: {reason}; check the path") from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(source, f"larger than {MAX_SPEC_BYTES} bytes; is this really a job spec?")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise SpecError(source, f"not UTF-8 text (byte {err.start}); save it as UTF-8") from None
    return parse_spec(text, source, Path(os.path.abspath(source)).parent, runnable)


def parse_spec(text: str, source: str, base_dir: Path, runnable: bool = False) -> JobSpec:
    """Validate YAML text; relative paths are taken from base_dir (the spec file's folder)."""
    data, marks = load_yaml(text, source)
    if not isinstance(data, dict):
        line = marks.value_line(())
        got = "a list" if isinstance(data, list) else f"{data!r}"
        raise SpecError(source, f"expected a mapping (name: ..., kind: ...), got {got}", line)
    spec = _validate(data, source, marks)
    resolved = _resolve(spec, Path(os.path.abspath(base_dir)), source, marks)
    if runnable:  # at submit: what can never run is refused, not retried ten times
        _refuse_unrunnable(resolved, source, marks)
    return resolved


def spec_from_json(data: dict[str, Any]) -> JobSpec:
    """Revalidate a spec that load_spec already resolved (e.g. sent to rsupd as JSON)."""
    if not isinstance(data, dict):
        raise SpecError(JSON_SOURCE, f"expected a JSON object, got {type(data).__name__}")
    spec = _validate(data, JSON_SOURCE, None)
    problems = [SpecProblem(_UNRESOLVED, None, field) for field in _relative_paths(spec)]
    if problems:
        raise SpecError.from_problems(JSON_SOURCE, problems)
    return spec


_UNRESOLVED = "must be an absolute path here; load the spec with load_spec to resolve it"


def _validate(data: dict[str, Any], source: str, marks: Marks | None) -> JobSpec:
    try:
        return JobSpec.model_validate(data)
    except ValidationError as err:
        raise SpecError.from_problems(source, problems_from(err, marks, JobSpec)) from None


def _resolve(spec: JobSpec, base_dir: Path, source: str, marks: Marks) -> JobSpec:
    # normpath, not resolve(): following a venv's python symlink would lose the venv.
    cwd = _absolute(spec.cwd, base_dir)
    try:
        python = _interpreter(spec.python, base_dir)
    except ValueError as err:
        raise SpecError(source, str(err), marks.key_line(("python",)), "python") from None
    stages = [_absolute(stage, base_dir) for stage in spec.probe.extra_stages]
    checkpoint = _absolute(spec.checkpoint, Path(cwd)) if spec.checkpoint else None
    probe = spec.probe.model_copy(update={"extra_stages": stages})
    update = {"cwd": cwd, "python": python, "checkpoint": checkpoint, "probe": probe}
    return spec.model_copy(update=update)


def _refuse_unrunnable(spec: JobSpec, source: str, marks: Marks) -> None:
    found = [
        SpecProblem(text, marks.value_line(loc) or marks.key_line(loc[:1]), _field_name(loc))
        for loc, text in runnable.problems(spec)
    ]
    if found:
        raise SpecError.from_problems(source, found)


def _field_name(loc: tuple[str | int, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc)[1:]


def _absolute(path: str, base: Path) -> str:
    return os.path.normpath(os.path.join(base, os.path.expanduser(path)))


def _interpreter(python: str | None, base_dir: Path) -> str | None:
    """A bare name is looked up on PATH; anything with a slash is a path from the spec's folder."""
    if python is None or os.sep in python or python.startswith("~"):
        return None if python is None else _absolute(python, base_dir)
    found = shutil.which(python)
    if found is None:
        raise ValueError(f"{python!r} is not on PATH; give the interpreter's path instead")
    return os.path.abspath(found)


def _relative_paths(spec: JobSpec) -> list[str]:
    paths = {"cwd": spec.cwd, "python": spec.python, "checkpoint": spec.checkpoint}
    paths |= {f"probe.extra_stages[{i}]": stage for i, stage in enumerate(spec.probe.extra_stages)}
    return [field for field, path in paths.items() if path is not None and not os.path.isabs(path)]
