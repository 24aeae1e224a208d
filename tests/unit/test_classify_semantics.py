"""The rules of the classifier (classify.py's docstring), one hand-made input each.

These are unit tests of the rules, not evidence of accuracy (the real-log corpus is).
1. A fatal finding is excused only by progress that advances past what was seen before it.
2. A traceback that ends the output is fatal; its exception line decides.
3. A cut-off traceback still counts, by its exception line or by what its frames show.
"""

from __future__ import annotations

import functools
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rsup.supervisor.recognize.advance import Marks, parse
from rsup.supervisor.recognize.classify import Diagnosis, LiveClassifier
from rsup.supervisor.recognize.offline import diagnose_text
from rsup.supervisor.recognize.signatures import Catalogue, SignatureError, load_catalogue
from rsup.workers import constants as C

OOM = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 7.79 GiB total)\n"
CAUGHT_OOM = "CUDA out of memory. Tried to allocate 400.00 MiB.\n"  # AutoBatch's probe
BAR = "Epoch 1:  50%|#####     | {n}/10 [00:05<00:05,  1.00it/s, loss=0.5]"
ROW = "      {epoch}/100      2.61G      1.104     0.8812        640: 57%\n"  # Ultralytics
TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'


@functools.cache
def shipped() -> Catalogue:
    return load_catalogue()


def diagnose(text: str, **kwargs: bool) -> Diagnosis:
    return diagnose_text(text, catalogue=shipped(), **kwargs)


def category(text: str) -> str:
    return diagnose(text).category


def fed_bytewise(text: str) -> Diagnosis:
    classifier = LiveClassifier(shipped())
    for byte in text.encode():
        classifier.feed(bytes([byte]))
    classifier.close()
    return classifier.verdict()


# --- 1. progress excuses a failure only when it advances ------------------------------------


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("Epoch 2/10\n", "Epoch 3/10\n"),  # a later epoch
        (BAR.format(n=5) + "\n", BAR.format(n=6) + "\n"),  # a larger count on the same row
        ("step 100/600 loss 1.9\n", "step 200/600 loss 1.7\n"),
        (ROW.format(epoch=3), ROW.format(epoch=4)),
        ("", "Saving checkpoint to runs/train/weights/last.pt\n"),  # a new checkpoint
    ],
    ids=["epoch", "bar", "step", "ultralytics-row", "checkpoint"],
)
def test_progress_that_advances_excuses_a_survivable_failure(before: str, after: str) -> None:
    assert category(before + CAUGHT_OOM + after) == C.NONE
    assert category(before + CAUGHT_OOM) == C.OOM


@pytest.mark.parametrize(
    "text",
    [
        BAR.format(n=5) + "\n" + CAUGHT_OOM + BAR.format(n=5) + "\n",  # the row re-printed
        BAR.format(n=5) + "\r" + CAUGHT_OOM.rstrip("\n") + "\r" + BAR.format(n=5) + "\n",  # \r
        "Epoch 2/10\n" + CAUGHT_OOM + "Epoch 2/10\n",  # the same epoch again
        BAR.format(n=5) + "\n" + OOM + BAR.format(n=4) + "\n",  # a smaller count
    ],
    ids=["redraw", "carriage-return-redraw", "same-epoch", "smaller-count"],
)
def test_a_redraw_of_the_same_row_is_not_progress(text: str) -> None:
    assert category(text) == C.OOM


def test_a_bar_glued_onto_the_error_line_is_not_progress() -> None:
    glued = BAR.format(n=5) + OOM
    assert category(glued + BAR.format(n=5) + "\n") == C.OOM
    assert category(glued + BAR.format(n=6) + "\n") == C.NONE  # an advance past it still is


def test_a_row_first_seen_after_the_failure_must_then_advance() -> None:
    """tqdm re-prints a bar when the traceback closes it: its first sighting is a baseline."""
    text = OOM + "     0/299     15.8G      3.99     0.358        608:  63% 34/54 [00:42<00:25]\n"
    assert category(text) == C.OOM
    later = "     0/299     15.8G      3.98     0.357        608:  65% 35/54 [00:43<00:24]\n"
    assert category(text + later) == C.NONE


def test_progress_before_the_failure_excuses_nothing() -> None:
    text = "Epoch 2/10\nEpoch 3/10\n" + TRACEBACK + "ValueError: bad value\n"
    assert diagnose(text).category == C.UNKNOWN


def test_a_heartbeat_is_an_advance() -> None:
    classifier = LiveClassifier(shipped())
    classifier.feed(OOM.encode())
    assert classifier.verdict().category == C.OOM
    classifier.note_progress()
    assert classifier.verdict().category == C.NONE


def test_fatal_lines_that_are_not_survivable_are_never_excused() -> None:
    text = "Epoch 2/10\nMemory access fault by GPU node-1 (Agent handle: 0x5) on address 0x7f\n"
    assert category(text + "Epoch 3/10\nEpoch 4/10\n") == C.GPU_MEMORY_FAULT


def test_config_errors_count_until_the_job_has_trained() -> None:
    state_dict = "RuntimeError: Error(s) in loading state_dict for Net:\n"
    loading = "Loading checkpoint shards: 100%|##########| 3/3 [00:05<00:00,  1.70s/it]\n"
    assert category(loading + state_dict) == C.CONFIG_ERROR  # a loading bar is not training
    assert category("Epoch 1/5:   0%|     | 0/123 [00:00<?, ?it/s]\n" + state_dict) == (
        C.CONFIG_ERROR  # an epoch that has not taken a step yet
    )
    assert category(BAR.format(n=5) + "\n" + state_dict) == C.UNKNOWN
    assert category("Epoch 2/30\n" + state_dict) == C.UNKNOWN
    assert diagnose(state_dict, progress_seen=True).category == C.UNKNOWN


def test_counters_are_read_from_the_usual_formats() -> None:
    row = parse(
        b"     81/400      29.9G     0.70        640:   3%| | 9/351 [13:44:50<522:24, 5498.98s/it]"
    )
    assert row is not None and (row.epoch, row.epochs, row.key, row.n) == (81, 400, b"/351", 9)
    assert row.stalled
    assert parse(b"Starting training for 10 epochs...") is None
    assert parse(b"[04/05 09:08:31 d2.engine.train_loop]: starting") is None  # a date
    keras = parse(b"1883/3455 [=====>........] - ETA: 2:39:53 - loss: 0.21")
    assert keras is not None and (keras.key, keras.n, keras.trains) == (b"/3455", 1883, False)
    marks = Marks(parse(b"Epoch 2/10"), parse(b"val: 17/17 [00:03<00:00]"))
    epoch3, val17 = parse(b"Epoch 3/10"), parse(b"val: 17/17 [00:04<00:00]")
    assert epoch3 is not None and val17 is not None
    assert marks.advanced_by(epoch3) and not marks.advanced_by(val17)
    batch = parse(b"INFO: - [Epoch 1/150][Batch 1206/1207] BatchTime = 4.770 (s)")
    assert batch is not None and (batch.epoch, batch.n, batch.trains) == (1, 1206, True)
    assert parse(b"batch size 32") is None  # a size, not a count
    # under a launcher's tag, as text skipped in bulk still holds it, and the same verdict
    # whatever pieces the output comes in
    tagged = parse(b"[rank1]:       3/100      2.61G      1.104     0.8812      64        640: 57%")
    assert tagged is not None and (tagged.epoch, tagged.epochs) == (3, 100)
    glued = (
        b"[rank1]:       3/100      2.61G      1.104      64        640: 57%\r"
        b"Traceback (most recent call last):\nModuleNotFoundError: No module named 'x'"
    )
    byte_by_byte = LiveClassifier(shipped())
    for at in range(len(glued)):
        byte_by_byte.feed(glued[at : at + 1])
    byte_by_byte.close()
    assert byte_by_byte.verdict().category == category(glued.decode()) == C.UNKNOWN
    keras3 = parse("46/47 ━━━━━━━━━━━━━━━━━━━━ 0s 98ms/step - loss: 0.6373".encode())
    assert keras3 is not None and (keras3.key, keras3.n) == (b"/47", 46)
    fit = "Epoch 1/5\n46/47 ━━━━━━━━━━━━━━━━━━━━ 0s 98ms/step - loss: 0.6373\n"
    assert category(fit + "ValueError: Input 0 is incompatible with the layer\n") == C.UNKNOWN
    # as Keras 3 writes it to a terminal, between colour codes
    coloured = parse("\x1b[1m46/47\x1b[0m \x1b[32m━━━━━━━━━\x1b[0m\x1b[37m━\x1b[0m 0s".encode())
    assert coloured is not None and (coloured.key, coloured.n) == (b"/47", 46)
    # rich writes the count after the bar, the epoch before it
    rich = parse("Epoch 0/9  ━━━━━━━━━━━━━━━━━━━━ 25/32 0:00:05 • 0:00:01".encode())
    assert rich is not None and (rich.epoch, rich.key, rich.n) == (0, b"/32", 25)
    unstarted = parse("Epoch 1/10 ━━━━━━━━━━━━━━━━━━━━ 0/100 0:00:00".encode())
    assert unstarted is not None and not unstarted.trains


# --- 2. a traceback that ends the output is fatal ---------------------------------------------


def test_the_exception_line_decides() -> None:
    assert category(TRACEBACK + "torch.OutOfMemoryError: CUDA out of memory.\n") == C.OOM
    unknown = diagnose("Epoch 2/10\n" + TRACEBACK + "KeyError: 'boxes'\n")
    assert (unknown.category, unknown.signature, unknown.line) == (C.UNKNOWN, None, 4)


def test_an_unknown_exception_before_training_is_a_config_error() -> None:
    early = diagnose(TRACEBACK + "KeyError: 'boxes'\n")
    assert (early.category, early.signature, early.line) == (
        C.CONFIG_ERROR,
        "exception-before-training",
        3,
    )
    # after a step counted in an epoch, the same exception is not the setup's fault
    bar = "Epoch 1:  40%|####      | 4/10 [00:01<00:02, 3.1it/s]\n"
    assert category(bar + TRACEBACK + "KeyError: 'b'\n") == C.UNKNOWN
    # what comes and goes (the network, the GPU runtime, NaN values) is retried, not refused
    for line in (
        "requests.exceptions.ConnectionError: Max retries exceeded with url: /x",
        "TimeoutError: timed out",
        "RuntimeError: the HIP runtime stopped answering",
        "ValueError: loss is nan",
    ):
        assert category(TRACEBACK + line + "\n") == C.UNKNOWN, line


def test_an_exception_line_standing_alone_counts_as_a_cut_traceback() -> None:
    assert category("loading data\nKeyError: 'boxes'\n") == C.CONFIG_ERROR
    assert category("Epoch 3/10\nRuntimeError: something broke\n") == C.UNKNOWN
    assert category("step 5\nFooException: x\n") == C.UNKNOWN
    # a known exception-scope signature speaks on it too
    assert category("Epoch 2/10\nSignalException: Process 17 got signal: 1\n") == C.KILLED
    # lived through when progress advances after it; not a column-0 class name: not one
    assert category("Epoch 2/10\nValueError: bad sample, skipped\nEpoch 3/10\n") == C.NONE
    assert category("Epoch 2/10\nlogged: ValueError: bad sample\n") == C.NONE
    assert category("Epoch 2/10\nERROR: no such thing\n") == C.NONE


def test_a_traceback_followed_by_advancing_progress_was_lived_through() -> None:
    handled = TRACEBACK + "requests.exceptions.ConnectionError: Max retries exceeded\n"
    assert category("Epoch 2/10\n" + handled + "Epoch 3/10\n") == C.NONE
    assert category("Epoch 2/10\n" + handled + "Epoch 2/10\n") == C.UNKNOWN


def test_an_interrupt_alone_is_killed_and_yields_to_a_real_cause() -> None:
    interrupt = TRACEBACK + "KeyboardInterrupt\n"
    assert category(interrupt) == C.KILLED
    assert category(OOM + interrupt) == C.OOM
    sigterm = "W0409 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal\n"
    assert category(sigterm) == C.KILLED
    assert category("Memory access fault by GPU node-2 (Agent handle: 0x1)\n" + sigterm) == (
        C.GPU_MEMORY_FAULT
    )


def test_an_interrupt_while_waiting_for_the_dataloader_is_a_hang() -> None:
    frames = (
        '  File "/venv/torch/utils/data/dataloader.py", line 1133, in _try_get_data\n'
        "    data = self._data_queue.get(timeout=timeout)\n"
        '  File "/usr/lib/python3.10/multiprocessing/queues.py", line 113, in get\n'
        "    if not self._poll(timeout):\n"
    )
    assert category(TRACEBACK + frames + "KeyboardInterrupt\n") == C.HANG


def test_a_stalled_bar_before_an_interrupt_is_a_hang() -> None:
    stalled = "Epoch 81:   3%|3         | 9/351 [13:44:50<522:24:10, 5498.98s/it]\n"
    healthy = "Epoch 81:   3%|3         | 9/351 [00:07<04:24,  1.23it/s]\n"
    interrupt = TRACEBACK + "KeyboardInterrupt\n"
    assert diagnose(stalled + interrupt).category == C.HANG
    assert diagnose(healthy + interrupt).category == C.KILLED


# --- 3. a cut-off traceback still counts --------------------------------------------------------


def test_a_traceback_cut_at_its_top_counts_by_its_exception_line() -> None:
    headless = (
        '    x = f()\n  File "a.py", line 3, in f\n    raise ValueError("x")\nValueError: x\n'
    )
    assert diagnose(headless).category == C.CONFIG_ERROR  # nothing trained before it
    assert diagnose("Epoch 4/9\n" + headless).category == C.UNKNOWN
    known = (
        '  File "a.py", line 3, in f\n    y = x @ w\nRuntimeError: CUDA error: misaligned address\n'
    )
    assert diagnose(known).category == C.GPU_MEMORY_FAULT


def test_a_traceback_cut_before_its_exception_line_counts_by_its_frames() -> None:
    fd_passing = TRACEBACK + (
        '  File "/venv/torch/multiprocessing/reductions.py", line 541, in rebuild_storage_fd\n'
        "    fd = df.detach()\n"
    )
    assert category(fd_passing) == C.DATALOADER_WORKER
    yaml_frames = TRACEBACK + (
        '  File "/venv/lib/python3.10/site-packages/yaml/__init__.py", line 125, in safe_load\n'
        "    return load(stream, SafeLoader)\n"
        '  File "/venv/lib/python3.10/site-packages/yaml/constructor.py", line 49, in get_single_d'
    )
    assert category(yaml_frames) == C.CONFIG_ERROR
    assert category(TRACEBACK + "    main()\n") == C.UNKNOWN  # nothing known: still fatal


def test_a_notebook_traceback_cut_off_counts_by_the_class_its_header_names() -> None:
    header = "OutOfMemoryError                          Traceback (most recent call last)\n"
    frames = (
        "Cell In[7], line 8\n      5 model = YOLO('yolov8m.pt')\n----> 8 model.train(batch=1)\n"
    )
    assert category(header + frames) == C.OOM
    assert category(header.replace("OutOfMemoryError", "KeyboardInterrupt") + frames) == C.KILLED


def test_the_deepest_frame_a_signature_knows_speaks() -> None:
    text = TRACEBACK + (
        '  File "/venv/torch/utils/data/dataloader.py", line 1243, in _try_get_data\n'
        "    data = self._data_queue.get(timeout=timeout)\n"
        '  File "/usr/lib/python3.12/multiprocessing/queues.py", line 122, in get\n'
        "    return _ForkingPickler.loads(res)\n"
    )
    assert category(text) == C.DATALOADER_WORKER  # not the wait above it


def test_another_process_printing_into_the_frames_does_not_end_them() -> None:
    text = TRACEBACK + (
        '  File "/venv/torch/utils/data/dataloader.py", line 1243, in _try_get_data\n'
        "worker 1: decoding /data/shards/shard-00033.tar\n"
        '  File "/venv/torch/utils/data/_utils/signal_handling.py", line 67, in handler\n'
        "RuntimeError: DataLoader worker (pid 31337) is killed by signal: Killed.\n"
    )
    diagnosis = diagnose(text)
    assert (diagnosis.category, diagnosis.line) == (C.DATALOADER_WORKER, 6)


# --- the doors agree, and the catalogue checks scopes ---------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        BAR.format(n=5) + OOM + BAR.format(n=6) + "\n",
        "Epoch 2/10\n" + CAUGHT_OOM + "Epoch 2/10\nEpoch 3/10\n",
        TRACEBACK + '  File "/venv/yaml/constructor.py", line 49, in get_single_data\n',
        "Epoch 81: 3%| | 9/351 [13:44:50<522:24:10, 5498.98s/it]\n"
        + TRACEBACK
        + "KeyboardInterrupt\n",
    ],
)
def test_byte_by_byte_feeding_gives_the_same_verdict(text: str) -> None:
    assert fed_bytewise(text) == diagnose(text)


def test_random_chunking_of_a_long_healthy_run_with_a_caught_failure() -> None:
    lines = [BAR.format(n=i % 10) for i in range(3000)]
    lines.insert(1500, CAUGHT_OOM.rstrip("\n"))
    data = ("\n".join(lines) + "\n").encode()
    expected = diagnose(data.decode())
    rng = random.Random(7)
    classifier = LiveClassifier(shipped())
    pos = 0
    while pos < len(data):
        size = rng.randint(1, 4000)
        classifier.feed(data[pos : pos + size])
        pos += size
    classifier.close()
    assert classifier.verdict() == expected


def test_wordings_without_a_trigger_word_are_read_in_the_last_lines_once_output_ends() -> None:
    said = "An MPI communication peer process has unexpectedly disconnected.  This\n"
    assert category("Epoch 2/10\n" + said + "Local host: node-3\n") == C.NCCL_DISTRIBUTED
    # not before the output ends (nothing is acted on live), then with its line number
    live = LiveClassifier(shipped())
    assert live.feed(("x\n" * 5000 + said).encode()) == []
    found = live.close()
    assert [(f.category, f.line) for f in found] == [(C.NCCL_DISTRIBUTED, 5001)]
    assert live.verdict().line == 5001
    # cut in chunks of any size, the same line
    chunked = LiveClassifier(shipped())
    text = ("row\r" * 3 + "x\n") * 700 + said + "tail\n" * 3
    data = text.encode()
    for at in range(0, len(data), 97):
        chunked.feed(data[at : at + 97])
    assert [(f.category, f.line) for f in chunked.close()] == [(C.NCCL_DISTRIBUTED, 701)]
    # further from the end than the last 40 lines, it is not read
    assert category(said + "Epoch 2/10, step 5/9\n" * 41) == C.NONE
    # under a rank prefix too
    assert category("[1,7]<stderr>:" + said) == C.NCCL_DISTRIBUTED
    # the output ending inside a line ("\r" redraws): that line's number
    redrawn = LiveClassifier(shipped())
    redrawn.feed(("a\n" + said.strip() + "\r").encode())
    assert [f.line for f in redrawn.close()] == [2]
    # a traceback's frames are not read again (the code a frame shows is not output)
    frame = '  File "t.py", line 3, in f\n    print("an illegal memory access was encountered")\n'
    interrupted = "Traceback (most recent call last):\n" + frame + "KeyboardInterrupt\n"
    assert category(interrupted) == C.KILLED
    # a window that begins inside a very long line does not read that line
    long_line = "q" * 100 + "EI0006: " + "p" * 17000 + "\n"
    assert category(long_line) == C.NONE


def test_a_keywordless_user_signature_leaves_the_last_lines_read(tmp_path: Path) -> None:
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "version: 1\nsignatures:\n  - id: boom\n    category: unknown\n"
        "    pattern: '(?m)^BOOM\\b'\n    meaning: m.\n    action: a.\n    fatal: true\n"
    )
    catalogue = load_catalogue(extra=[extra])
    said = "start\nAn MPI communication peer process has unexpectedly disconnected.\n"
    assert diagnose_text(said, catalogue=catalogue).category == C.NCCL_DISTRIBUTED


def test_a_bad_scope_is_named(tmp_path: Path) -> None:
    path = tmp_path / "extra.yaml"
    path.write_text(
        "version: 1\nsignatures:\n  - id: odd\n    category: oom\n    pattern: 'x'\n"
        "    meaning: m.\n    action: a.\n    fatal: true\n    scope: everywhere\n"
    )
    with pytest.raises(SignatureError, match="scope"):
        load_catalogue(path)


PIECES = [
    b"\n",
    b"\r",
    b"  ",
    b"Traceback (most recent call last):",
    b"KeyboardInterrupt     Traceback (most recent call last)",
    b'  File "/venv/torch/utils/data/dataloader.py", line 1243, in _try_get_data',
    b'  File "/venv/yaml/constructor.py", line 49, in get_single_data',
    b'File "x.py", line 3, in f',
    b"----> 8 model.train()",
    b"During handling of the above exception, another exception occurred:",
    b"ValueError: bad",
    b"KeyboardInterrupt",
    b"Killed",
    b"CUDA out of memory. ",
    b"Epoch 2/10",
    b"Epoch 3/10",
    b"Epoch 1:  50%|#####     | 5/10 [00:05<00:05,  1.00it/s]",
    b"Epoch 1:  60%|######    | 6/10 [00:06<00:04,  1.00it/s]",
    b"  9/351 [13:44:50<522:24:10, 5498.98s/it]",
    b"step 100/600 loss 1.9",
    b"Saving checkpoint to last.pt",
    b"RuntimeError: Error(s) in loading state_dict for Net:",
    b"x" * 3000,
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(st.sampled_from(PIECES), max_size=50).map(b"".join),
    st.integers(0, 2**32),
    st.integers(1, 9000),
)
def test_any_chunking_gives_the_same_result(data: bytes, seed: int, most: int) -> None:
    whole = LiveClassifier(shipped())
    expected = (whole.feed(data) + whole.close(), whole.verdict())
    rng = random.Random(seed)
    classifier = LiveClassifier(shipped())
    findings, pos = [], 0
    while pos < len(data):
        size = rng.randint(1, most)
        findings += classifier.feed(data[pos : pos + size])
        pos += size
    findings += classifier.close()
    assert (findings, classifier.verdict()) == expected
