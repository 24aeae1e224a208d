"""`rsup diagnose`: the exit code says whether the log shows a failure, and the action is
what rsup's policy would do for this kind of job, never a promise it cannot keep."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rsup.supervisor.cli.diagnose import EXIT_FAILURE_FOUND, run_diagnose
from rsup.workers import constants as C

FIXTURES = Path(__file__).parent.parent / "corpus"
OOM_LOG = FIXTURES / "oom" / "cuda_oom_old_torch.log"


def diagnose(path: Path, **kwargs: object) -> tuple[int, dict[str, object]]:
    out = io.StringIO()
    code = run_diagnose(str(path), True, out, **kwargs)  # type: ignore[arg-type]
    return code, json.loads(out.getvalue())


def test_a_failure_exits_4_and_a_clean_log_exits_0() -> None:
    assert diagnose(OOM_LOG)[0] == EXIT_FAILURE_FOUND == 4
    assert diagnose(FIXTURES / "none" / "ultralytics_rocm_healthy.log")[0] == C.EXIT_OK


def test_no_halved_batch_is_promised_to_a_job_without_a_batch_knob() -> None:
    _, document = diagnose(OOM_LOG)
    assert "cannot halve" in str(document["action"]) and "batch 8" not in str(document["action"])


def test_a_job_with_a_batch_is_told_its_batch_is_halved() -> None:
    _, document = diagnose(OOM_LOG, kind="ultralytics", batch=16)
    assert "resuming with batch 8 (was 16)" in str(document["action"])
    assert str(document["action"]).startswith("for an ultralytics job with batch 16")
