"""Failure classification: the corpus, the root-cause rules, the live door, the catalogue."""

from __future__ import annotations

import functools
import io
import json
import random
import signal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rsup.supervisor.cli.diagnose import run_diagnose
from rsup.supervisor.effects.configdir import config_dir, config_file
from rsup.supervisor.recognize import classify
from rsup.supervisor.recognize.classify import (
    Diagnosis,
    Finding,
    LiveClassifier,
    classify_exit,
)
from rsup.supervisor.recognize.offline import diagnose_file, diagnose_text
from rsup.supervisor.recognize.signatures import (
    Catalogue,
    SignatureError,
    derive_keywords,
    load_catalogue,
)
from rsup.workers import constants as C

CORPUS = Path(__file__).parent.parent / "corpus"
CORPUS_LOGS = sorted(CORPUS.glob("*/*.log"))
LOG_IDS = [f"{p.parent.name}/{p.name}" for p in CORPUS_LOGS]
EPOCH_LINE = "      3/100      2.61G      1.104     0.8812      1.121         64        640: 57%"


@functools.cache  # immutable: loaded once, not once per example of the property tests
def shipped() -> Catalogue:
    """The shipped catalogue alone: a developer's own user files must not sway the tests."""
    return load_catalogue()


@pytest.fixture
def catalogue() -> Catalogue:
    return shipped()


def diagnose(text: str, catalogue: Catalogue, **kwargs: bool) -> Diagnosis:
    return diagnose_text(text, catalogue=catalogue, **kwargs)


def feed_in_chunks(data: bytes, catalogue: Catalogue, rng: random.Random, most: int) -> tuple:
    classifier = LiveClassifier(catalogue)
    findings: list[Finding] = []
    pos = 0
    while pos < len(data):
        size = rng.randint(1, most)
        findings += classifier.feed(data[pos : pos + size])
        pos += size
    findings += classifier.close()
    return classifier.verdict(), findings


def offline(data: bytes, catalogue: Catalogue) -> tuple:
    classifier = LiveClassifier(catalogue)
    findings = classifier.feed(data) + classifier.close()
    return classifier.verdict(), findings


# --- the corpus ----------------------------------------------------------------------


def test_corpus_covers_every_log_category() -> None:
    found = {p.parent.name for p in CORPUS_LOGS}
    expected = set(C.CATEGORIES) - {C.HANG}  # a hang is silence, not a line
    assert found == expected


@pytest.mark.parametrize("path", CORPUS_LOGS, ids=LOG_IDS)
def test_corpus_log_gets_its_folder_category(path: Path, catalogue: Catalogue) -> None:
    diagnosis = diagnose_file(path, catalogue=catalogue)
    assert diagnosis.category == path.parent.name, diagnosis


@pytest.mark.parametrize("path", CORPUS_LOGS, ids=LOG_IDS)
def test_corpus_evidence_line_numbers_match_the_file(path: Path, catalogue: Catalogue) -> None:
    diagnosis = diagnose_file(path, catalogue=catalogue)
    lines = path.read_bytes().decode("utf-8", "replace").split("\n")
    if diagnosis.category != C.NONE:
        assert diagnosis.line is not None and diagnosis.evidence
        last_segment = lines[diagnosis.line - 1].split("\r")[-1].rstrip()
        assert (diagnosis.line, last_segment) in diagnosis.evidence
    for number, text in diagnosis.evidence:
        assert text[:200] in lines[number - 1], (number, text)


@pytest.mark.parametrize("path", CORPUS_LOGS, ids=LOG_IDS)
def test_corpus_live_door_agrees_with_offline_door(path: Path, catalogue: Catalogue) -> None:
    data = path.read_bytes()
    expected = offline(data, catalogue)
    for seed in range(4):
        rng = random.Random(f"{path.name}-{seed}")
        assert feed_in_chunks(data, catalogue, rng, most=[3, 64, 700, 5000][seed]) == expected


def test_byte_by_byte_feeding_agrees(catalogue: Catalogue) -> None:
    data = (CORPUS / "dataloader_worker" / "bus_error_shm_interleaved.log").read_bytes()
    assert feed_in_chunks(data, catalogue, random.Random(1), most=1) == offline(data, catalogue)


PIECES = [
    b"\n",
    b"\r",
    b"\r\n",
    b"  ",
    b"Traceback (most recent call last):",
    b'  File "x.py", line 1',
    b"During handling of the above exception, another exception occurred:",
    b"Original Traceback (most recent call last):",
    b"ValueError: bad",
    b"Killed",
    b"HSA_STATUS_ERROR_EXCEPTION: code: 0x1016",
    b"ModuleNotFoundError: No module named 'x'",
    b"CUDA out of memory. ",
    b"UserWarning: ",
    b"[rank1]: ",
    b"F0729 12:58:37.2 109 u.cc:504] Failed call to cudaGetFuncBySymbol: no kernel image is "
    b"available for execution on the device",
    b"*** Check failure stack trace: ***",
    b"Segmentation fault (core dumped)",
    b"Error executing job with overrides: []",
    b"AssertionError: ",
    b"WARNING: x",
    b"Waiting in store based barrier to initialize process group for rank: 1",
    EPOCH_LINE.encode(),
    b"\xff\xfe\x00",
    b"x" * 3000,
]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=60).map(b"".join),
    st.integers(0, 2**32),
    st.integers(1, 9000),
)
def test_any_chunking_gives_the_same_result(data: bytes, seed: int, most: int) -> None:
    catalogue = shipped()
    expected = offline(data, catalogue)
    assert feed_in_chunks(data, catalogue, random.Random(seed), most) == expected


# --- root cause, not first match --------------------------------------------------------


def test_final_exception_line_of_a_traceback_decides(catalogue: Catalogue) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in <module>\n'
        '    raise RuntimeError("Segmentation fault? HSA_STATUS_ERROR_EXCEPTION? NCCL error")\n'
        '  File "/x/torch/utils/data/dataloader.py", line 3, in _next\n'
        "    # DataLoader worker (pid 7) exited unexpectedly\n"
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB\n"
    )
    diagnosis = diagnose(text, catalogue)
    assert (diagnosis.category, diagnosis.line) == (C.OOM, 6)
    assert [n for n, _ in diagnosis.evidence] == [6]


def test_final_exception_of_a_chain_beats_an_earlier_one(catalogue: Catalogue) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in step\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "\n"
        "During handling of the above exception, another exception occurred:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 30, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    )
    assert diagnose(text, catalogue).category == C.OOM


def test_an_unknown_final_exception_leaves_the_known_one(catalogue: Catalogue) -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 9, in step\n'
        "ModuleNotFoundError: No module named 'timm'\n"
        "\n"
        "The above exception was the direct cause of the following exception:\n"
        "\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 30, in <module>\n'
        "RuntimeError: model setup failed\n"
    )
    diagnosis = diagnose(text, catalogue)
    assert (diagnosis.category, diagnosis.signature, diagnosis.line) == (
        C.CONFIG_ERROR,
        "module-not-found",
        3,
    )


def test_unknown_exception_is_unknown_with_its_line(catalogue: Catalogue) -> None:
    text = "Epoch 2/10\nTraceback (most recent call last):\n"
    text += "  File \"x.py\", line 1\nKeyError: 'boxes'\n"
    diagnosis = diagnose(text, catalogue)
    assert (diagnosis.category, diagnosis.signature, diagnosis.line) == (C.UNKNOWN, None, 4)


def test_a_cut_off_traceback_ends(catalogue: Catalogue) -> None:
    frames = "Traceback (most recent call last):\n" + '  File "x.py", line 1\n' * 1200
    text = frames + "  Memory access fault by GPU node-1 (Agent handle: 0x55) on address 0x7f.\n"
    assert diagnose(text, catalogue).line == 1202


def test_keyboard_interrupt_alone_is_killed(catalogue: Catalogue) -> None:
    text = 'Traceback (most recent call last):\n  File "x.py", line 1\nKeyboardInterrupt\n'
    assert diagnose(text, catalogue).category == C.KILLED


@pytest.mark.parametrize(
    ("text", "category", "signature"),
    [
        (
            "Memory access fault by GPU node-1 (Agent handle: 0x55) on address 0x7f. "
            "Reason: Page not present or supervisor privilege.\nAborted (core dumped)\n",
            C.GPU_MEMORY_FAULT,
            "gpu-memory-access-fault",
        ),
        ("Aborted (core dumped)\n", C.SEGFAULT_ABORT, "aborted"),
        (
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.\n"
            "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly\n",
            C.DATALOADER_WORKER,
            "dataloader-worker-killed",
        ),
        (
            "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.\n"
            "[8812.1] Out of memory: Killed process 4242 (pt_data_worker) total-vm:2841180kB\n"
            "Killed\n",
            C.HOST_OOM,
            "kernel-oom-killer",
        ),
        ("Killed\n", C.HOST_OOM, "process-killed"),
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
            "W0603 torch/distributed/elastic/agent/server/api.py:704] Received 15 death signal, "
            "shutting down workers\n"
            "slurmstepd: error: *** JOB 7 ON n1 CANCELLED AT 2024-06-03 ***\n",
            C.OOM,
            "torch-out-of-memory-error",
        ),
        (
            "hipErrorNoBinaryForGpu: Unable to find code object for all current devices!\n"
            "Aborted (core dumped)\n",
            C.HIP_RUNTIME_INIT,
            "hip-no-binary-for-gpu",
        ),
        (
            "[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation timeout:"
            " WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 1800324 milliseconds before timing "
            "out.\nterminate called after throwing an instance of 'c10::DistBackendError'\n",
            C.NCCL_DISTRIBUTED,
            "nccl-watchdog-timeout",
        ),
    ],
    ids=[
        "fault-then-abort",
        "abort",
        "worker-killed",
        "host-oom",
        "killed",
        "oom-then-sigterm",
        "no-binary",
        "nccl",
    ],
)
def test_the_cause_beats_its_consequences(
    text: str, category: str, signature: str, catalogue: Catalogue
) -> None:
    diagnosis = diagnose(text, catalogue)
    assert (diagnosis.category, diagnosis.signature) == (category, signature)


@pytest.mark.parametrize(
    "line",
    [
        "/venv/torch/cuda/__init__.py:141: UserWarning: CUDA out of memory may happen here",
        "/venv/torch/utils/checkpoint.py:464: UserWarning: Segmentation fault handlers differ",
        "MIOpen(HIP): Warning [SQLiteBase] Missing system database file: gfx1030_36.kdb "
        "Performance may degrade.",
        "/venv/x.py:3: DeprecationWarning: hipErrorOutOfMemory will be renamed",
        "AutoBatch: WARNING ⚠️ error detected: CUDA out of memory. Tried to allocate 1 GiB",
        "[W CUDAAllocatorConfig.h:28] Warning: expandable_segments not supported (HIP error: "
        "out of memory is reported instead)",
        EPOCH_LINE,
        "dataset: 12000 samples, 0 errors, 0 faults, memory 3.1GB",
        "      Epoch    GPU_mem   box_loss   cls_loss   dfl_loss  Instances       Size",
    ],
)
def test_warnings_and_normal_lines_are_not_failures(line: str, catalogue: Catalogue) -> None:
    assert diagnose(line + "\n", catalogue).category == C.NONE


# --- progress: config errors and survivable failures ---------------------------------------

MODULE_ERROR = "ModuleNotFoundError: No module named 'ultralytics'\n"


def test_config_error_before_progress(catalogue: Catalogue) -> None:
    assert diagnose(MODULE_ERROR, catalogue).category == C.CONFIG_ERROR


def test_config_error_after_an_epoch_line_is_unknown(catalogue: Catalogue) -> None:
    diagnosis = diagnose(EPOCH_LINE + "\n" + MODULE_ERROR, catalogue)
    assert (diagnosis.category, diagnosis.signature) == (C.UNKNOWN, "module-not-found")


def test_config_error_after_caller_progress_is_unknown(catalogue: Catalogue) -> None:
    assert diagnose(MODULE_ERROR, catalogue, progress_seen=True).category == C.UNKNOWN
    classifier = LiveClassifier(catalogue)
    classifier.note_progress()  # a heartbeat from events.jsonl
    (finding,) = classifier.feed(MODULE_ERROR.encode())
    assert finding.category == C.UNKNOWN


def test_survivable_failure_followed_by_progress_is_dropped(catalogue: Catalogue) -> None:
    probe = "CUDA out of memory. Tried to allocate 400.00 MiB.\n"
    later = EPOCH_LINE.replace("3/100", "4/100")
    assert diagnose(probe, catalogue).category == C.OOM
    assert diagnose(EPOCH_LINE + "\n" + probe + later + "\n", catalogue).category == C.NONE
    # the first row seen after the failure is only a baseline: it must then advance
    assert diagnose(probe + EPOCH_LINE + "\n", catalogue).category == C.OOM
    assert diagnose(probe + EPOCH_LINE + "\n" + later + "\n", catalogue).category == C.NONE
    classifier = LiveClassifier(catalogue)
    classifier.feed(MODULE_ERROR.encode())
    classifier.note_progress()
    assert classifier.verdict().category == C.NONE


def test_fatal_failure_followed_by_progress_stays(catalogue: Catalogue) -> None:
    text = "HSA_STATUS_ERROR_EXCEPTION: hardware exception. code: 0x1016\n" + EPOCH_LINE + "\n"
    assert diagnose(text, catalogue).category == C.GPU_MEMORY_FAULT


# --- the live door -------------------------------------------------------------------------

HSA_LINE = b"HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION: The agent attempted to access memory"


def test_finding_comes_with_the_feed_that_completes_its_line(catalogue: Catalogue) -> None:
    classifier = LiveClassifier(catalogue)
    assert classifier.feed(b"epoch 1 step 3\n" + HSA_LINE[:20]) == []
    assert classifier.feed(HSA_LINE[20:]) == []
    (finding,) = classifier.feed(b"\nAborted (core dumped)")
    assert finding == Finding(
        "hsa-memory-aperture-violation", C.GPU_MEMORY_FAULT, 2, HSA_LINE.decode()
    )
    assert [f.signature for f in classifier.close()] == ["aborted"]
    assert classifier.verdict().signature == "hsa-memory-aperture-violation"


def test_carriage_return_completes_a_segment_without_a_new_line_number(
    catalogue: Catalogue,
) -> None:
    classifier = LiveClassifier(catalogue)
    assert classifier.feed(b"one\ntwo\n 10%|#   | 1/10\r 20%|##  | 2/10") == []
    (finding,) = classifier.feed(b"\rRuntimeError: CUDA error: out of memory\r")
    assert (finding.line, finding.category) == (3, C.OOM)
    assert finding.text == "RuntimeError: CUDA error: out of memory"


def test_line_numbers_count_newlines_only(catalogue: Catalogue) -> None:
    data = b"a\r\nb\rc\r\n\r\n\rd\nSegmentation fault (core dumped)\n"
    (finding,) = offline(data, catalogue)[1]
    assert finding.line == data.count(b"\n")


def test_a_megabyte_line_is_cut_but_counted(catalogue: Catalogue) -> None:
    classifier = LiveClassifier(catalogue)
    findings = []
    huge = b"x" * (1 << 20) + b" RuntimeError: CUDA error: out of memory\n"
    for pos in range(0, len(huge), 65536):
        findings += classifier.feed(huge[pos : pos + 65536])
    findings += classifier.feed(b"ok\nSegmentation fault\n")
    assert [(f.line, f.category) for f in findings] == [(1, C.OOM), (3, C.SEGFAULT_ABORT)]
    assert len(findings[0].text) <= classify.TEXT_MAX
    assert classifier.lines == 3


def test_the_middle_of_a_huge_line_is_not_kept(catalogue: Catalogue) -> None:
    middle = b"x" * 100_000 + b" Segmentation fault " + b"x" * 100_000 + b"\n"
    assert offline(middle, catalogue)[0].category == C.NONE
    rng = random.Random(5)
    assert feed_in_chunks(middle, catalogue, rng, 9000)[0].category == C.NONE


def test_binary_garbage_does_not_crash(catalogue: Catalogue) -> None:
    garbage = random.Random(3).randbytes(1 << 20)
    data = garbage + b"\nHSA_STATUS_ERROR_EXCEPTION: code: 0x1016\n"
    classifier = LiveClassifier(catalogue)
    findings = []
    for pos in range(0, len(data), 4099):
        findings += classifier.feed(data[pos : pos + 4099])
    assert findings[-1].line == garbage.count(b"\n") + 2
    assert classifier.verdict().category == C.GPU_MEMORY_FAULT


def test_ordinary_lines_never_reach_the_patterns(
    catalogue: Catalogue, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    original = LiveClassifier._segment
    monkeypatch.setattr(
        LiveClassifier,
        "_segment",
        lambda self, seg, out: calls.append(seg) or original(self, seg, out),
    )
    lines = [f"{EPOCH_LINE} {i}/114 [00:{i % 60:02d}<00:40, 2.1it/s]" for i in range(5000)]
    lines[2500] = "HSA_STATUS_ERROR_EXCEPTION: An HSAIL operation resulted in a hardware exception."
    assert diagnose("\n".join(lines) + "\n", catalogue).line == 2501
    assert len(calls) == 1


# --- exit status -----------------------------------------------------------------------------

NOTHING = Diagnosis(C.NONE)
GPU_FAULT = Diagnosis(C.GPU_MEMORY_FAULT, "gpu-memory-access-fault", [(4, "Memory access")], 4)


@pytest.mark.parametrize(
    ("diagnosis", "code", "sig", "category"),
    [
        (NOTHING, 0, None, C.NONE),
        (GPU_FAULT, 0, None, C.NONE),
        (NOTHING, None, signal.SIGSEGV, C.SEGFAULT_ABORT),
        (NOTHING, -6, None, C.SEGFAULT_ABORT),
        (NOTHING, 139, None, C.SEGFAULT_ABORT),
        (GPU_FAULT, None, signal.SIGABRT, C.GPU_MEMORY_FAULT),
        (NOTHING, None, signal.SIGKILL, C.UNKNOWN),
        (NOTHING, 1, None, C.UNKNOWN),
        (NOTHING, None, None, C.NONE),
    ],
)
def test_classify_exit(
    diagnosis: Diagnosis, code: int | None, sig: int | None, category: str
) -> None:
    assert classify_exit(diagnosis, code, sig).category == category


def test_sigkill_is_host_oom_only_with_evidence() -> None:
    evidence = "cgroup memory.events: oom_kill 1"
    result = classify_exit(NOTHING, None, signal.SIGKILL, oom_evidence=evidence)
    assert result.category == C.HOST_OOM and (0, evidence) in result.evidence
    assert classify_exit(NOTHING, -9, None, stop_requested=True).category == C.NONE


def test_a_crash_signal_keeps_the_logs_unknown_evidence(catalogue: Catalogue) -> None:
    log = diagnose("Epoch 2/3\nTraceback (most recent call last):\nValueError: x\n", catalogue)
    result = classify_exit(log, None, signal.SIGSEGV)
    assert result.category == C.SEGFAULT_ABORT
    assert result.evidence == [(3, "ValueError: x"), (0, "the job was killed by SIGSEGV")]


# --- the catalogue ----------------------------------------------------------------------------


def test_shipped_fatal_signatures_all_have_keywords(catalogue: Catalogue) -> None:
    assert all(s.keywords for s in catalogue.signatures if s.fatal)
    assert len({s.id for s in catalogue.signatures}) == len(catalogue.signatures)
    # a keyword every line naming an error holds ("val_error", "MeanSquaredError") would
    # send each such line through the pattern: the slow path for healthy output
    generic = {b"rror", b"Error", b"error", b"ERROR", b" failed", b"failed"}
    assert not [(s.id, k) for s in catalogue.signatures for k in s.keywords if k in generic]


def write_catalogue(tmp_path: Path, body: str, name: str = "extra.yaml") -> Path:
    path = tmp_path / name
    path.write_text("version: 1\nsignatures:\n" + body)
    return path


ENTRY = (
    "  - id: {id}\n    category: {category}\n    pattern: '{pattern}'\n"
    "    meaning: m.\n    action: a.\n    fatal: true\n"
)


def test_a_user_pattern_needs_no_code(tmp_path: Path) -> None:
    extra = write_catalogue(
        tmp_path,
        ENTRY.format(id="my-card", category="gpu_memory_fault", pattern=r"amdgpu: \w+ hang"),
    )
    cat = load_catalogue(extra=[extra])
    diagnosis = diagnose_text("x\namdgpu: ring hang\n", catalogue=cat)
    assert (diagnosis.category, diagnosis.signature, diagnosis.line) == (
        C.GPU_MEMORY_FAULT,
        "my-card",
        2,
    )


def test_a_user_file_replaces_and_disables_entries(tmp_path: Path) -> None:
    body = ENTRY.format(id="aborted", category="unknown", pattern="Aborted")
    body += "  - id: segmentation-fault\n    enabled: false\n"
    cat = load_catalogue(extra=[write_catalogue(tmp_path, body)])
    assert cat.get("aborted") is not None and cat.get("aborted").category == C.UNKNOWN
    assert cat.get("segmentation-fault") is None
    assert diagnose_text("Segmentation fault\n", catalogue=cat).category == C.NONE


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (ENTRY.format(id="bad-re", category="oom", pattern="(unclosed"), "(bad-re): bad pattern"),
        (ENTRY.format(id="bad-cat", category="gpu_melted", pattern="x"), "unknown category"),
        ("  - id: short\n    category: oom\n", "(short): missing field(s)"),
        (ENTRY.format(id="x", category="oom", pattern="y") + "    colour: red\n", "colour"),
    ],
)
def test_bad_entries_are_named(tmp_path: Path, body: str, message: str) -> None:
    path = write_catalogue(tmp_path, body)
    with pytest.raises(SignatureError) as err:
        load_catalogue(path)
    assert str(path) in str(err.value) and "entry 1" in str(err.value)
    assert message in str(err.value)


def test_explicit_keywords_and_case_insensitive_patterns(tmp_path: Path) -> None:
    body = ENTRY.format(id="odd", category="oom", pattern="(?i)vram exhausted")
    body += ENTRY.format(id="kw", category="oom", pattern=r"\w{5}ed-q") + "    keywords: [ed-q]\n"
    cat = load_catalogue(write_catalogue(tmp_path, body))
    assert cat.get("odd") is not None and cat.get("odd").keywords == (b"vram exhausted",)
    assert diagnose_text("GPU: VRAM Exhausted\n", catalogue=cat).signature == "odd"
    assert diagnose_text("queue: stalled-q\n", catalogue=cat).signature == "kw"


def test_explicit_triggers_are_what_chunks_are_searched_for(tmp_path: Path) -> None:
    pattern = r"^(?=.*[Ee]rror\b)(?=.*\bwidget\b)"
    body = ENTRY.format(id="both", category="oom", pattern=pattern)
    body += "    keywords: [widget]\n    triggers: [rror]\n"
    cat = load_catalogue(write_catalogue(tmp_path, body))
    both = cat.get("both")
    assert both is not None and (both.keywords, both.triggers) == ((b"widget",), (b"rror",))
    assert diagnose_text("the widget broke: Error 3\n", catalogue=cat).signature == "both"
    assert diagnose_text("the widget is fine\nError rate 0.1\n", catalogue=cat).category == (C.NONE)
    bad = ENTRY.format(id="bad", category="oom", pattern="x") + "    triggers: rror\n"
    with pytest.raises(SignatureError, match="'triggers' must be a list"):
        load_catalogue(write_catalogue(tmp_path, bad, "bad.yaml"))


@pytest.mark.parametrize(
    ("pattern", "words"),
    [
        ("HSA_STATUS_ERROR_EXCEPTION", ["HSA_STATUS_ERROR_EXCEPTION"]),
        (r"ab+cdef", ["cdef"]),
        (r"x(?:foo|bar)baz?", ["bar", "foo"]),
        (r"(?P<n>abcd)|efgh", ["abcd", "efgh"]),
        (r"[abc]defg\.hij", ["defg.hij"]),
        (r"\d+ seconds?", [" second"]),
        (r"a|\d+", []),
        (r"(?x) spaced out", []),
    ],
)
def test_derive_keywords(pattern: str, words: list[str]) -> None:
    assert derive_keywords(pattern) == words


def test_config_dir_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("RSUP_CONFIG_DIR", raising=False)
    assert (config_dir() / "signatures.yaml").is_file()
    monkeypatch.setenv("RSUP_CONFIG_DIR", str(tmp_path))
    assert config_file("signatures.yaml") == tmp_path / "signatures.yaml"


# --- rsup diagnose ----------------------------------------------------------------------------


def test_diagnose_json(capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS / "gpu_memory_fault" / "rocm_aperture_violation_then_abort.log"
    out = io.StringIO()
    assert run_diagnose(str(path), True, out) == 4  # the log shows a failure
    document = json.loads(out.getvalue())
    assert document["category"] == C.GPU_MEMORY_FAULT
    assert document["signature"] == "hsa-memory-aperture-violation"
    assert document["line"] == 24 and document["remedy"] and document["meaning"]
    assert {"line": 25, "text": "Aborted (core dumped)"} in document["evidence"]


def test_diagnose_text_output() -> None:
    path = CORPUS / "oom" / "cuda_oom_old_torch.log"
    out = io.StringIO()
    assert run_diagnose(str(path), False, out) == 4  # the log shows a failure
    text = out.getvalue()
    assert f"{path}: oom at line 14" in text
    assert "signature: gpu-out-of-memory" in text and "14: RuntimeError: CUDA out" in text
    assert "remedy:" in text


def test_diagnose_says_an_inferred_config_error_gets_one_more_try(tmp_path: Path) -> None:
    log = tmp_path / "early.log"
    log.write_text("loading\nTraceback (most recent call last):\nKeyError: 'boxes'\n")
    out = io.StringIO()
    assert run_diagnose(str(log), True, out) == 4
    document = json.loads(out.getvalue())
    assert (document["category"], document["signature"]) == (
        C.CONFIG_ERROR,
        C.INFERRED_CONFIG_ERROR,
    )
    assert "one more try" in document["action"]


def test_diagnose_clean_log_exits_zero() -> None:
    out = io.StringIO()
    path = CORPUS / "none" / "ultralytics_rocm_healthy.log"
    assert run_diagnose(str(path), True, out) == C.EXIT_OK
    assert json.loads(out.getvalue())["category"] == C.NONE


def test_diagnose_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.log"
    assert run_diagnose(str(missing), False, io.StringIO()) == C.EXIT_FAILED
    assert str(missing) in capsys.readouterr().err
