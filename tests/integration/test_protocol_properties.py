"""Property tests for the socket protocol against one real rsupd.

Whatever a client sends on a line (bytes, any JSON value, requests with random ops and
fields), rsupd answers with exactly one JSON line: {"ok": true, "result": ...} or
{"ok": false, "error": "<text>", "code": <int>}; never a traceback, never an internal
error, never silence (each exchange has a 10 s deadline), and it goes on answering.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import Rsupd, write_spec

REPLY_TIMEOUT = 10.0
OPS = ["ping", "start", "stop", "restart", "status", "events", "logs", "remove", "inject", "report"]
NAMES = ["fuzz-done", "fuzz-live", "fuzz-new", "fuzz-other", "nope"]
DONE_SCRIPT = "print('line one'); print('line two')"
LIVE_SCRIPT = "import time\nwhile True: print('tick', flush=True); time.sleep(0.2)"
SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rsupd]:
    """One rsupd for the whole module, with a finished job and a running one to poke at."""
    root = tmp_path_factory.mktemp("proto")
    rsupd = Rsupd(root)
    rsupd.start()
    try:
        _submit_missing(rsupd)
        yield rsupd
    finally:
        rsupd.shutdown()


@pytest.fixture
def jobs(daemon: Rsupd) -> Rsupd:
    """The daemon with both named jobs there again: the fuzzing may have removed them
    (`remove`, by name or with `all`), and a test about field types needs them to exist."""
    _submit_missing(daemon)
    return daemon


def _submit_missing(rsupd: Rsupd) -> None:
    listed = {job["name"] for job in json.loads(rsupd.cli("status", "--json").stdout)}
    for name, script in (("fuzz-done", DONE_SCRIPT), ("fuzz-live", LIVE_SCRIPT)):
        if name not in listed:
            spec = write_spec(
                rsupd.root, name, [sys.executable, "-c", script], **_quiet(rsupd.root)
            )
            assert rsupd.cli("start", str(spec)).returncode == 0
    if "fuzz-done" not in listed:
        rsupd.wait_state("fuzz-done", "succeeded")


def _quiet(root: Path) -> dict[str, Any]:
    """Spec fields that keep a fuzzed job cheap: no probe, no retries, a short stop grace."""
    return {
        "cwd": str(root),
        "device": "cpu",
        "probe": {"enabled": False},
        "restart": {"max_attempts": 1},
        "stop": {"grace": 1},
    }


def exchange(rsupd: Rsupd, line: bytes) -> bytes:
    """Send one line, close our side, read everything rsupd says until it hangs up."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(REPLY_TIMEOUT)
        sock.connect(str(rsupd.socket))
        sock.sendall(line + b"\n")
        sock.shutdown(socket.SHUT_WR)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def check_reply(rsupd: Rsupd, line: bytes) -> dict[str, Any]:
    """The protocol's promise for one request line; returns the reply."""
    data = exchange(rsupd, line)
    assert data.endswith(b"\n") and data.count(b"\n") == 1, f"not one line: {data[:300]!r}"
    reply = json.loads(data)
    assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
    if not reply["ok"]:
        error, code = reply.get("error"), reply.get("code")
        assert isinstance(error, str) and error.strip(), reply
        assert isinstance(code, int) and not isinstance(code, bool), reply
        assert "Traceback" not in error, error
        assert not error.startswith("internal error"), f"{line[:300]!r} -> {error}"
    assert "Traceback" not in data.decode("utf-8", "replace")
    assert rsupd.proc is not None and rsupd.proc.poll() is None, "rsupd died"
    return dict(reply)


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
names = st.one_of(st.sampled_from(NAMES), json_values)


@st.composite
def specs(draw: st.DrawFn, root: str) -> Any:
    """Mostly a runnable, harmless spec with a few fields bent; sometimes anything at all."""
    if draw(st.integers(0, 4)) == 0:
        return draw(json_values)
    spec: dict[str, Any] = {
        "name": draw(st.sampled_from(NAMES)),
        "command": [sys.executable, "-c", "import time; time.sleep(0.2)"],
        **_quiet(Path(root)),
    }
    bendable = {
        "name": names,
        "kind": st.sampled_from(["command", "bogus", 3, None]),
        "env": st.dictionaries(st.text(max_size=6), json_values, max_size=3),
        "device": st.one_of(st.sampled_from(["cpu", "gpu", -1, "cuda:x"]), json_values),
        "cwd": st.one_of(st.sampled_from(["relative", "", "/nonexistent-dir"]), json_values),
        "restart": st.one_of(
            st.fixed_dictionaries({"max_attempts": st.integers(-3, 3)}), json_values
        ),
        "stop": st.one_of(
            st.fixed_dictionaries({"grace": st.sampled_from([0, -1, "1s"])}), json_values
        ),
        "env_profile": st.one_of(st.sampled_from(["missing-profile", "../etc"]), json_values),
        "command": st.one_of(st.just("a string"), st.just([]), json_scalars),
        "junk": json_values,
    }
    for key in draw(st.lists(st.sampled_from(sorted(bendable)), max_size=3, unique=True)):
        spec[key] = draw(bendable[key])
    return spec


@st.composite
def requests(draw: st.DrawFn, root: str) -> dict[str, Any]:
    request: dict[str, Any] = {
        "op": draw(st.one_of(st.sampled_from(OPS), st.text(max_size=10), json_values))
    }
    fields = {
        "name": names,
        "spec": specs(root),
        "force": json_values,
        "all": json_values,
        "wait": json_values,
        "after": json_values,
        "attempt": json_values,
        "offset": json_values,
        "lines": json_values,
        "kind": st.one_of(st.sampled_from(["kill", "hang", "oom", "nope"]), json_values),
        "at_epoch": json_values,
    }
    for key in draw(st.lists(st.sampled_from(sorted(fields)), max_size=4, unique=True)):
        request[key] = draw(fields[key])
    request.update(draw(st.dictionaries(st.text(max_size=8), json_values, max_size=2)))
    return request


@SETTINGS
@given(line=st.binary(max_size=400).map(lambda b: b.replace(b"\n", b"")))
@example(line=b"")
@example(line=b"\xff\xfe")
@example(line=b"{")
@example(line=b"null")
@example(line=b'{"op": "ping"')
@example(line=b"[" * 100_000 + b"]" * 100_000)
@example(line=b'{"op": "status", "name": "' + b"\xed\xa0\x80" + b'"}')
def test_any_bytes_get_one_json_reply(daemon: Rsupd, line: bytes) -> None:
    check_reply(daemon, line)


@SETTINGS
@given(value=json_values)
@example(value={"op": None})
@example(value={"op": "ping"})
@example(value=[{"op": "ping"}])
def test_any_json_value_gets_one_json_reply(daemon: Rsupd, value: Any) -> None:
    check_reply(daemon, json.dumps(value).encode())


def test_a_well_formed_request_succeeds(daemon: Rsupd) -> None:
    reply = check_reply(daemon, b'{"op": "status", "name": "fuzz-done"}')
    assert reply["ok"] and reply["result"][0]["state"] == "succeeded"


@SETTINGS
@given(data=st.data())
def test_requests_with_random_ops_and_fields_get_one_json_reply(
    daemon: Rsupd, data: st.DataObject
) -> None:
    request = data.draw(requests(str(daemon.root)), label="request")
    check_reply(daemon, json.dumps(request).encode())


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "events", "name": "fuzz-done", "after": []},
        {"op": "events", "name": "fuzz-done", "after": 1e400},
        {"op": "events", "name": "fuzz-done", "after": 2**70},
        {"op": "logs", "name": "fuzz-done", "offset": -5},
        {"op": "logs", "name": "fuzz-done", "lines": {}},
        {"op": "logs", "name": "fuzz-done", "lines": 1e400},
        {"op": "logs", "name": "fuzz-done", "attempt": 1e400},
        {"op": "inject", "name": "fuzz-live", "kind": "kill", "at_epoch": "x"},
    ],
    ids=lambda r: f"{r['op']}-{next(k for k in r if k not in ('op', 'name', 'kind'))}",
)
def test_fields_of_the_wrong_type_get_a_usage_error(jobs: Rsupd, request_: dict[str, Any]) -> None:
    reply = check_reply(jobs, json.dumps(request_).encode())
    assert reply["ok"] is False and reply["code"] == 2, reply


def test_daemon_still_answers_status_after_the_fuzzing(daemon: Rsupd) -> None:
    reply = check_reply(daemon, b'{"op": "status"}')
    assert reply["ok"] is True and isinstance(reply["result"], list)
    assert daemon.cli("status", "--json").returncode == 0
