"""A bar drawn on the traceback's own line, just before it, was seen before the failure:
the same counter redrawn after the traceback does not excuse it (seen live in the HF
Trainer under rsup: tqdm's last redraw lands after an OOM that `| tee` hid)."""

from __future__ import annotations

from rsup.supervisor.recognize.offline import diagnose_text
from rsup.workers import constants as C

LOG = (
    "\r 19%|##        | 6/32 [00:02<00:14,  1.82it/s]"
    "\r 22%|##2       | 7/32 [00:03<00:10,  2.43it/s]Traceback (most recent call last):\n"
    '  File "train.py", line 66, in <module>\n'
    "    trainer.train()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    "\r 22%|##2       | 7/32 [00:03<00:13,  1.86it/s]\n"
)


def test_a_redraw_of_the_bar_glued_before_the_traceback_does_not_excuse_it() -> None:
    assert diagnose_text(LOG).category == C.OOM


def test_the_next_step_after_it_does() -> None:
    later = LOG + "\r 25%|##5       | 8/32 [00:04<00:12,  1.90it/s]\n"
    assert diagnose_text(later).category == C.NONE
