"""Job spec: parsing, defaults, path resolution, and messages that point at the right line."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from rsup.supervisor.core.spec import (
    JobSpec,
    SpecError,
    load_spec,
    parse_duration,
    parse_size,
    parse_spec,
    spec_from_json,
)

SPECS = Path(__file__).parent / "specs"
MINIMAL = "name: demo\ncommand: [python, train.py]\n"


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def load_error(tmp_path: Path, text: str) -> SpecError:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    return caught.value


# --- valid specs -------------------------------------------------------------------------


def test_design_example_loads_with_every_field() -> None:
    spec = load_spec(SPECS / "design-example.yaml")
    assert spec.name == "thermal-yolov8n"
    assert spec.kind == "ultralytics"
    assert spec.python == "/opt/venv-py310-rocm52/bin/python"
    assert spec.cwd == str(SPECS)
    assert spec.env == {"MIOPEN_DEBUG_CONV_IMPLICIT_GEMM": "1"}
    assert spec.env_profile == "rocm-rdna1"
    assert spec.checkpoint == str(SPECS / "runs" / "last.pt")
    assert spec.train is not None and spec.train["amp"] is False and spec.train["batch"] == 16
    assert spec.probe.timeouts == {"conv2d": 600.0}
    assert spec.probe.extra_stages == [str(SPECS / "my_stage.py")]
    assert spec.restart.backoff.factor == 2.0
    assert spec.stop.signal == "SIGTERM" and spec.stop.grace == 30.0
    assert spec.limits.max_runtime == 72 * 3600.0
    assert spec.fallback.cpu is True


def test_torchrun_spec_with_units_and_ranges() -> None:
    spec = load_spec(SPECS / "torchrun.yaml")
    assert spec.command == ["train_ddp.py", "--epochs", "90", "--resume", "{checkpoint}"]
    assert spec.cwd == str(SPECS / "work")
    assert spec.checkpoint == str(SPECS / "work" / "ckpt" / "last.pt")
    assert spec.device == "cuda:0"
    assert spec.torchrun.nproc_per_node == "gpu"
    assert spec.torchrun.nnodes == "1:2"
    assert spec.torchrun.rdzv_id == "ddp-resnet"
    assert spec.restart.backoff.max == 120.0
    assert spec.restart.reset_after == 5400.0
    assert spec.hang.hard_limit_factor == 2.0
    assert spec.stop.signal == "SIGINT" and spec.stop.grace == 60.0
    assert spec.limits.max_runtime == 2 * 86400.0
    assert spec.limits.log_max_bytes == 1 << 30
    assert spec.fallback.cpu is False


def test_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec.kind == "command"
    assert spec.python is None
    assert spec.cwd == str(tmp_path)
    assert spec.env == {} and spec.env_profile is None and spec.user is None
    assert spec.device == "auto" and spec.checkpoint is None and spec.train is None
    assert spec.torchrun.nproc_per_node == 1 and spec.torchrun.nnodes == "1"
    assert spec.torchrun.rdzv_backend == "c10d" and spec.torchrun.rdzv_id is None
    assert spec.probe.enabled is True and spec.probe.timeouts == {}
    assert spec.restart.max_attempts == 10 and spec.restart.reset_after == 600.0
    assert (spec.restart.backoff.initial, spec.restart.backoff.max) == (10.0, 300.0)
    assert (spec.hang.timeout, spec.hang.startup_timeout) == (1800.0, 3600.0)
    assert spec.hang.hard_limit_factor == 3.0
    assert (spec.stop.signal, spec.stop.grace) == ("SIGTERM", 30.0)
    assert spec.limits.max_runtime is None and spec.limits.log_max_bytes == 256 << 20
    assert spec.fallback.cpu is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0", "0"), ("'1'", "1"), ("cuda:1", "cuda:1"), ("CPU", "cpu"), ("auto", "auto")],
)
def test_device_forms(tmp_path: Path, text: str, expected: str) -> None:
    assert load_spec(write(tmp_path, f"{MINIMAL}device: {text}\n")).device == expected


@pytest.mark.parametrize(
    ("text", "expected"), [("TERM", "SIGTERM"), ("sigusr1", "SIGUSR1"), ("2", "SIGINT")]
)
def test_stop_signal_forms(tmp_path: Path, text: str, expected: str) -> None:
    spec = load_spec(write(tmp_path, f"{MINIMAL}stop: {{signal: {text}}}\n"))
    assert spec.stop.signal == expected


def test_merge_keys_are_followed(tmp_path: Path) -> None:
    text = "name: demo\ncommand: [x]\nstop: &s {grace: 5}\nrestart:\n  <<: {max_attempts: 2}\n"
    spec = load_spec(write(tmp_path, text))
    assert (spec.stop.grace, spec.restart.max_attempts) == (5.0, 2)


def test_parse_spec_takes_paths_from_base_dir(tmp_path: Path) -> None:
    spec = parse_spec(MINIMAL + "cwd: runs/../data\n", "<stdin>", tmp_path)
    assert spec.cwd == str(tmp_path / "data")


# --- durations and sizes -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (90.5, 90.5),
        (0, 0.0),
        ("90", 90.0),
        ("90.5", 90.5),
        ("90s", 90.0),
        ("30m", 1800.0),
        ("72h", 259200.0),
        ("1h30m", 5400.0),
        ("1h 30m", 5400.0),
        ("2d", 172800.0),
        ("1.5h", 5400.0),
        ("250ms", 0.25),
        (" 10S ", 10.0),
    ],
)
def test_parse_duration(value: object, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "value", ["", "ten", "10x", "h", "-5", "-5m", "inf", "nan", True, None, [1]]
)
def test_parse_duration_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        (1024, 1024),
        ("1024", 1024),
        ("500M", 500 << 20),
        ("256MiB", 256 << 20),
        ("1GiB", 1 << 30),
        ("1g", 1 << 30),
        ("2GB", 2_000_000_000),
        ("10 KiB", 10240),
        ("100b", 100),
    ],
)
def test_parse_size(value: object, size: int) -> None:
    assert parse_size(value) == size


@pytest.mark.parametrize("value", ["", "lots", "12Q", "1i", "-1M", 0, True, 1.5])
def test_parse_size_rejects(value: object) -> None:
    with pytest.raises(ValueError, match="size"):
        parse_size(value)


# --- messages: file, line, field ---------------------------------------------------------


BAD_CASES = [
    # (yaml text, line, field, words the message must contain)
    (
        "name: demo\ncommand: [x]\nrestart:\n  max_attempts: ten\n",
        4,
        "restart.max_attempts",
        "expected an integer, got 'ten'",
    ),
    (
        "name: demo\ncommand: [x]\nrestart:\n  max_atempts: 3\n",
        4,
        "restart.max_atempts",
        "unknown key (allowed: backoff, max_attempts, reset_after); did you mean 'max_attempts'?",
    ),
    (
        "name: demo\ncommand: [x]\ncolour: red\n",
        3,
        "colour",
        "unknown key (allowed: after, batch, checkpoint",
    ),
    (
        "name: demo\ncommand: [x]\nrestart: {max_attempts: 0}\n",
        3,
        "restart.max_attempts",
        "must be at least 1, got 0",
    ),
    (
        "name: demo\ncommand: [x]\nrestart: {max_attempts: true}\n",
        3,
        "restart.max_attempts",
        "expected an integer, got true (a boolean)",
    ),
    (
        "name: demo\ncommand: [x]\n\n\nhang:\n  timeout: forever\n",
        6,
        "hang.timeout",
        "invalid duration 'forever'",
    ),
    ("name: demo\ncommand: [x]\nhang: {timeout: 0}\n", 3, "hang.timeout", "must be greater than 0"),
    ("name: demo\ncommand: python train.py\n", 2, "command", "write a list"),
    ("name: demo\ncommand: []\n", 2, "command", "must not be empty"),
    (
        "name: demo\ncommand:\n  - python\n  - train.py\n  - 10\n",
        5,
        "command[2]",
        'expected a string, got 10 (a number); quote it: "10"',
    ),
    ("name: demo\nkind: command\n", 2, "command", "required for kind 'command'"),
    ("name: demo\nkind: torchrun\n", 2, "command", "required for kind 'torchrun'"),
    (
        "name: demo\nkind: pytorch\ncommand: [x]\n",
        2,
        "kind",
        "expected one of 'command', 'ultralytics' or 'torchrun', got 'pytorch'",
    ),
    ("name: demo\ncommand: [x]\nenv:\n  DEBUG: 1\n", 4, "env.DEBUG", 'quote it: "1"'),
    (
        "name: demo\ncommand: [x]\nenv:\n  FAST: yes\n",
        4,
        "env.FAST",
        'expected a string, got yes (a boolean); quote it: "yes"',
    ),
    (
        "name: demo\ncommand: [x]\nenv:\n  BAD-NAME: x\n",
        4,
        "env.BAD-NAME",
        "not a valid environment variable name",
    ),
    ("name: demo\ncommand: [x]\ndevice: gpu\n", 3, "device", "expected auto, cpu, a GPU index"),
    ("name: demo\ncommand: [x]\nstop: {signal: SIGFOO}\n", 3, "stop.signal", "unknown signal"),
    (
        "name: demo\ncommand: [x]\nlimits:\n  log_max_bytes: 12Q\n",
        4,
        "limits.log_max_bytes",
        "invalid size '12Q'",
    ),
    (
        "name: demo\ncommand: [x]\nrestart:\n  backoff: {initial: 10m, max: 30}\n",
        4,
        "restart.backoff.max",
        "must be at least initial (600 s)",
    ),
    (
        "name: demo\ncommand: [x]\ntorchrun: {nproc_per_node: 2}\n",
        3,
        "torchrun",
        "only kind 'torchrun' reads torchrun",
    ),
    (
        "name: demo\nkind: torchrun\ncommand: [x]\ntorchrun: {nnodes: '3:1'}\n",
        4,
        "torchrun.nnodes",
        "range such as 1:4",
    ),
    ("name: demo\ncommand: [x]\ntrain: {model: a.yaml}\n", 3, "train", "only kind 'ultralytics'"),
    ("name: demo\nkind: ultralytics\n", 2, "train", "required for kind 'ultralytics'"),
    (
        "name: demo\nkind: ultralytics\ntrain:\n  model: yolov8n.pt\n",
        3,
        "train.data",
        "required for kind 'ultralytics'",
    ),
    (
        "name: demo\nkind: ultralytics\ncommand: [x]\ntrain: {model: m, data: d}\n",
        3,
        "command",
        "kind: command",
    ),
    (
        "name: demo\nkind: ultralytics\ntrain:\n  model: m\n  data: d\n  device: 0\n",
        6,
        "train.device",
        "top-level `device:`",
    ),
    (
        "name: demo\ncommand: [x]\nprobe: {enabled: 1}\n",
        3,
        "probe.enabled",
        "expected true or false, got 1 (a number)",
    ),
    (
        "name: demo\ncommand: [x]\nprobe: {timeouts: {conv2d: -1}}\n",
        3,
        "probe.timeouts.conv2d",
        "must be zero or more",
    ),
    ("name: demo\ncommand: [x]\nrestart: 5\n", 3, "restart", "expected a mapping (key: value)"),
    (
        "name: demo\ncommand: [x]\nenv_profile: ../etc/passwd\n",
        3,
        "env_profile",
        "not a valid profile name",
    ),
    (
        "command: [x]\nkind: command\n",
        1,
        "name",
        "required key is missing; add `name: thermal-yolov8n`",
    ),
    (
        "name: demo\ncommand: [x]\nrestart:\n  max_attempts: 3\n  max_attempts: 4\n",
        5,
        "restart.max_attempts",
        "duplicate key (first given at line 4)",
    ),
    (
        "name: demo\ncommand: !!python/object/apply:os.system [ls]\n",
        2,
        "command",
        "unsupported YAML tag",
    ),
]


@pytest.mark.parametrize(("text", "line", "field", "words"), BAD_CASES)
def test_bad_spec_names_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, words: str
) -> None:
    err = load_error(tmp_path, text)
    first = str(err).splitlines()[0]
    assert first.startswith(f"{tmp_path / 'job.yaml'}:{line}:"), first
    assert f": {field}: " in first, first
    assert words in first, first
    assert (err.source, err.line, err.field) == (str(tmp_path / "job.yaml"), line, field)


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("../x", "must not contain '/' or '..'"),
        ("a/b", "must not contain '/' or '..'"),
        ("a..b", "must not contain '/' or '..'"),
        ("UPPER", "not a valid job name: use 1 to 63 lowercase letters"),
        ('""', "not a valid job name"),
        ("-dash", "not a valid job name"),
        ("x" * 64, "not a valid job name"),
    ],
)
def test_bad_names(tmp_path: Path, name: str, words: str) -> None:
    err = load_error(tmp_path, f"kind: command\nname: {name}\ncommand: [x]\n")
    assert (err.line, err.field) == (2, "name")
    assert words in str(err)


def test_bad_name_suggests_a_fix(tmp_path: Path) -> None:
    assert "try 'my-job'" in str(load_error(tmp_path, "name: My Job\ncommand: [x]\n"))


def test_all_problems_reported_in_file_order(tmp_path: Path) -> None:
    text = "stop: {grace: x}\nname: demo\ncommand: [x]\nrestart: {max_attempts: ten}\nbogus: 1\n"
    lines = str(load_error(tmp_path, text)).splitlines()
    assert [line.split(":")[1] for line in lines] == ["1", "4", "5"]
    assert ["stop.grace" in lines[0], "restart.max_attempts" in lines[1], "bogus" in lines[2]] == [
        True,
        True,
        True,
    ]


def test_yaml_syntax_error_gives_line_and_column(tmp_path: Path) -> None:
    err = load_error(tmp_path, "name: demo\ncommand: [x\nstop: {}\n")
    assert err.line == 3
    assert str(err).startswith(f"{tmp_path / 'job.yaml'}:3:")
    assert "invalid YAML" in str(err)


def test_tab_indentation_has_a_hint(tmp_path: Path) -> None:
    err = load_error(tmp_path, "name: demo\nrestart:\n\tmax_attempts: 3\n")
    assert str(err).startswith(f"{tmp_path / 'job.yaml'}:3:1: invalid YAML")
    assert "use spaces" in str(err)


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "the file is empty"), ("# only a comment\n", "the file is empty")],
)
def test_empty_file(tmp_path: Path, text: str, words: str) -> None:
    err = load_error(tmp_path, text)
    assert str(err) == f"{tmp_path / 'job.yaml'}: {words}; a job spec needs at least `name: my-job`"


@pytest.mark.parametrize(
    ("text", "got"), [("- a\n- b\n", "a list"), ("just words\n", "'just words'")]
)
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str, got: str) -> None:
    err = load_error(tmp_path, text)
    assert err.line == 1
    assert f"expected a mapping (name: ..., kind: ...), got {got}" in str(err)


def test_missing_file_names_path_and_os_error(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert str(caught.value).startswith(f"{path}: cannot read the job spec: No such file")
    assert caught.value.source == str(path) and caught.value.line is None


def test_directory_is_not_a_spec(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="Is a directory"):
        load_spec(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL)
    path.chmod(0)
    with pytest.raises(SpecError, match="Permission denied"):
        load_spec(path)


def test_binary_file(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(SpecError, match="not UTF-8"):
        load_spec(path)


# --- path resolution ---------------------------------------------------------------------


def test_relative_paths_resolve_from_the_spec_folder(tmp_path: Path) -> None:
    text = MINIMAL + "cwd: work\ncheckpoint: ckpt/last.pt\npython: venv/bin/python\n"
    text += "probe: {extra_stages: [stages/extra.py]}\n"
    spec = load_spec(write(tmp_path, text))
    assert spec.cwd == str(tmp_path / "work")
    assert spec.checkpoint == str(tmp_path / "work" / "ckpt" / "last.pt")
    assert spec.python == str(tmp_path / "venv" / "bin" / "python")
    assert spec.probe.extra_stages == [str(tmp_path / "stages" / "extra.py")]


def test_absolute_paths_are_kept(tmp_path: Path) -> None:
    text = MINIMAL + "cwd: /srv/job\ncheckpoint: /data/last.pt\npython: /usr/bin/python3\n"
    spec = load_spec(write(tmp_path, text))
    assert (spec.cwd, spec.checkpoint, spec.python) == (
        "/srv/job",
        "/data/last.pt",
        "/usr/bin/python3",
    )


def test_python_symlink_is_not_followed(tmp_path: Path) -> None:
    venv_python = tmp_path / "venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.symlink_to("/usr/bin/env")  # a venv's python is a symlink; the venv is its path
    spec = load_spec(write(tmp_path, MINIMAL + "python: ./venv/bin/python\n"))
    assert spec.python == str(venv_python)


def test_bare_python_name_is_found_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "bin" / "python3.10"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(fake.parent))
    assert load_spec(write(tmp_path, MINIMAL + "python: python3.10\n")).python == str(fake)


def test_bare_python_name_not_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    err = load_error(tmp_path, MINIMAL + "python: python9.9\n")
    assert (err.line, err.field) == (3, "python")
    assert "'python9.9' is not on PATH" in str(err)


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/someone")
    spec = load_spec(write(tmp_path, MINIMAL + "cwd: ~/runs\n"))
    assert spec.cwd == "/home/someone/runs"


# --- JSON round trip (what the daemon receives) ------------------------------------------


@pytest.mark.parametrize("fixture", ["design-example.yaml", "torchrun.yaml"])
def test_json_round_trip(fixture: str) -> None:
    spec = load_spec(SPECS / fixture)
    data = json.loads(json.dumps(spec.model_dump(mode="json")))
    again = spec_from_json(data)
    assert again == spec
    assert again.model_dump(mode="json") == data


def test_json_round_trip_of_defaults(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, MINIMAL))
    assert spec_from_json(spec.model_dump(mode="json")) == spec


def test_json_errors_name_the_request_and_field() -> None:
    with pytest.raises(SpecError) as caught:
        spec_from_json(
            {"name": "demo", "command": ["x"], "cwd": "/", "restart": {"max_attempts": "x"}}
        )
    assert str(caught.value) == "<request>: restart.max_attempts: expected an integer, got 'x'"
    assert (caught.value.source, caught.value.line) == ("<request>", None)


def test_json_requires_resolved_paths() -> None:
    data: dict[str, Any] = {"name": "demo", "command": ["x"], "cwd": "work", "checkpoint": "a.pt"}
    with pytest.raises(SpecError) as caught:
        spec_from_json(data)
    assert [p.field for p in caught.value.problems] == ["cwd", "checkpoint"]
    assert "must be an absolute path" in str(caught.value)


def test_json_must_be_an_object() -> None:
    with pytest.raises(SpecError, match="expected a JSON object"):
        spec_from_json([])  # type: ignore[arg-type]


def test_model_forbids_unknown_keys_directly() -> None:
    with pytest.raises(ValueError):
        JobSpec.model_validate({"name": "demo", "command": ["x"], "extra": 1})
