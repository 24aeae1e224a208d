"""Property tests for the spec parser: any text gives a valid JobSpec or a clear SpecError.

A clear SpecError names the source it came from and says something; no other exception
may escape parse_spec, whatever the YAML holds. A spec that parses survives the trip the
CLI makes to rsupd: model_dump(mode="json") -> json -> spec_from_json. And whatever
restart settings a spec accepts, the backoff they give is a number between 0 and max.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from rsup.supervisor.core.policy import Backoff
from rsup.supervisor.core.spec import JobSpec, SpecError, parse_spec, spec_from_json

SOURCE = "fuzz/job.yaml"
BASE = Path("/tmp/rsup-fuzz-spec-base")  # only joined with relative paths, never touched
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Every key the models know, so generated mappings hit real fields as often as junk.
TOP_KEYS = list(JobSpec.model_fields)
NESTED_KEYS = [
    "initial", "factor", "max", "max_attempts", "backoff", "reset_after", "timeout",
    "startup_timeout", "hard_limit_factor", "signal", "grace", "max_runtime",
    "log_max_bytes", "cpu", "enabled", "timeouts", "extra_stages", "nproc_per_node",
    "nnodes", "rdzv_backend", "rdzv_endpoint", "rdzv_id", "max_restarts", "model", "data",
    "epochs", "batch", "per_hour", "currency", "budget", "on_success", "on_failure",
    "on_exit", "conv2d",
]  # fmt: skip
SCALAR_TEXT = [
    "", "0", "-1", "90s", "30m", "72h", "1h30m", "2d", "500M", "1GiB", "SIGTERM", "KILL",
    "auto", "cpu", "cuda:0", "1:4", "node0:29400", "python", "/usr/bin/python3", "~/x",
    ".", "..", "a/b", "ultralytics", "torchrun", "command", "null", "yes", "no", "\0",
    "thermal-yolov8n", "Bad Name!", "yolov8n.yaml",
]  # fmt: skip

JOB_NAMES = st.from_regex(r"[a-z0-9][a-z0-9._-]{0,62}", fullmatch=True).filter(
    lambda name: ".." not in name  # a name becomes a folder: '..' is refused
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(SCALAR_TEXT),
    st.text(max_size=20),
)
keys = st.one_of(
    st.sampled_from(TOP_KEYS),
    st.sampled_from(NESTED_KEYS),
    st.text(max_size=12),
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=5)),
    max_leaves=20,
)


@st.composite
def spec_like(draw: st.DrawFn) -> dict[Any, Any]:
    """A mapping that starts from a valid spec, then gains, loses or bends some keys."""
    base: dict[Any, Any] = {"name": "fuzz-job", "command": [sys.executable, "train.py"]}
    for key in draw(st.lists(st.sampled_from(TOP_KEYS), max_size=4, unique=True)):
        base[key] = draw(_field_value(key))
    base.update(draw(st.dictionaries(keys, values, max_size=2)))
    for key in draw(st.lists(st.sampled_from(["name", "command"]), max_size=1)):
        base.pop(key, None)
    return base


def _field_value(key: str) -> st.SearchStrategy[Any]:
    """Values that are right for `key` often enough to reach the deeper checks."""
    nested = st.dictionaries(st.sampled_from(NESTED_KEYS), values, max_size=4)
    known = {
        "name": st.one_of(JOB_NAMES, scalars),
        "kind": st.sampled_from(["command", "ultralytics", "torchrun", "other", ""]),
        "command": st.one_of(st.lists(st.text(max_size=8), max_size=3), scalars),
        "env": st.dictionaries(st.text(max_size=6), st.one_of(st.text(max_size=6), scalars)),
        "device": st.sampled_from(["auto", "cpu", "0", 1, "cuda:1", "gpu", -1, None]),
        "train": st.one_of(
            st.fixed_dictionaries({"model": st.just("yolov8n.yaml"), "data": st.just("d.yaml")}),
            nested,
        ),
        "after": st.lists(st.one_of(st.text(max_size=8), scalars), max_size=3),
    }
    return known.get(key, st.one_of(nested, values))


def check_outcome(text: str) -> JobSpec | None:
    """parse_spec's contract: a JobSpec, or a SpecError that says what and where."""
    try:
        spec = parse_spec(text, SOURCE, BASE)
    except SpecError as err:
        message = str(err)
        assert message.strip(), "a SpecError with no message"
        assert SOURCE in message, f"the message does not name the file: {message!r}"
        assert err.source == SOURCE and err.problems
        return None
    assert isinstance(spec, JobSpec)
    check_round_trip(spec)
    return spec


def check_round_trip(spec: JobSpec) -> None:
    """What `rsup start` sends is accepted by rsupd as the same spec."""
    sent = spec.model_dump(mode="json")
    wire = json.loads(json.dumps(sent))  # the socket carries plain JSON
    received = spec_from_json(wire)
    assert received.model_dump(mode="json") == sent
    if _plain_json(spec.train):
        assert received == spec


def _plain_json(value: Any) -> bool:
    """True when JSON carries value unchanged (no dates, NaN, tuples, non-str keys)."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return value == value and value not in (float("inf"), float("-inf"))
    if isinstance(value, list):
        return all(_plain_json(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain_json(v) for k, v in value.items())
    return False


def dump(data: Any) -> str:
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


@SETTINGS
@given(st.text())
@example("")
@example("\ufeff")
@example("---\nname: a\n---\nname: b\n")
@example("name: &a [*a]\n")
@example("a: &x {b: *x}\n")
@example("<<: 1\n")
@example("? [a, b]\n: c\n")
@example("name: !!python/object:os.system x\n")
@example("name: x\nname: y\n")
@example("\tname: x\n")
def test_any_text_gives_a_spec_or_a_clear_error(text: str) -> None:
    check_outcome(text)


YAML_ALPHABET = st.sampled_from([*":-[]{}&*!|>'\"%@`#,?<=~ \n\t\\", "name", "command", "a"])


@SETTINGS
@given(st.lists(YAML_ALPHABET, max_size=40).map("".join))
def test_yaml_punctuation_soup_gives_a_spec_or_a_clear_error(text: str) -> None:
    check_outcome(text)


@SETTINGS
@given(values)
def test_any_yaml_document_gives_a_spec_or_a_clear_error(data: Any) -> None:
    check_outcome(dump(data))


@SETTINGS
@given(spec_like())
@example({"name": "fuzz-job", "command": ["x"], "restart": {"backoff": {"factor": 1e308}}})
@example({"name": "fuzz-job", "command": ["x"], "train": None, "env": {"A": "\x85"}})
def test_spec_shaped_documents_give_a_spec_or_a_clear_error(data: dict[Any, Any]) -> None:
    check_outcome(dump(data))


@SETTINGS
@given(
    st.fixed_dictionaries(
        {"name": JOB_NAMES},
        optional={
            "cwd": st.sampled_from([".", "sub/dir", "/abs", "~"]),
            "checkpoint": st.sampled_from(["runs/last.pt", "/abs/last.pt"]),
            "env": st.dictionaries(
                st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True),
                st.text(max_size=10).filter(lambda s: "\0" not in s),
                max_size=3,
            ),
            "device": st.sampled_from(["auto", "cpu", "0", 1, "cuda:1"]),
            "restart": st.fixed_dictionaries(
                {},
                optional={
                    "max_attempts": st.integers(1, 2**40),
                    "backoff": st.builds(
                        lambda a, b, f: {"initial": a, "max": a + b, "factor": f},
                        st.floats(0, 1e6),
                        st.floats(0, 1e6),
                        st.floats(1, 1e6),
                    ),
                    "reset_after": st.sampled_from([0, "90s", "1h30m", 2.5]),
                },
            ),
            "stop": st.fixed_dictionaries(
                {},
                optional={
                    "signal": st.sampled_from(["SIGTERM", "int", "USR1", 9, "SIGKILL"]),
                    "grace": st.sampled_from([0, 1.5, "30s", "2m"]),
                },
            ),
            "limits": st.fixed_dictionaries(
                {}, optional={"max_runtime": st.sampled_from(["72h", 10, "1d"])}
            ),
        },
    ),
    st.lists(st.text(min_size=1, max_size=10).filter(lambda s: "\0" not in s), min_size=1),
)
def test_valid_specs_round_trip_through_json(data: dict[str, Any], argv: list[str]) -> None:
    spec = check_outcome(dump({**data, "command": argv}))
    assert spec is not None, "a spec built from valid parts was refused"


@SETTINGS
@given(
    initial=st.floats(0, 1e6),
    factor=st.floats(1, allow_nan=False, allow_infinity=True),
    extra=st.floats(0, 1e6),
    restarts=st.integers(0, 10**6),
)
@example(initial=10.0, factor=2.0, extra=290.0, restarts=1024)  # a long crash loop
@example(initial=0.0, factor=float("inf"), extra=0.0, restarts=1)  # 0 * inf
def test_any_accepted_backoff_gives_a_delay_within_max(
    initial: float, factor: float, extra: float, restarts: int
) -> None:
    maximum = initial + extra  # the spec refuses max < initial
    delay = Backoff(initial=initial, factor=factor, maximum=maximum).delay(restarts)
    assert 0.0 <= delay <= maximum
