"""Built-in signatures: causes inferred from what a log shows around a line, not a line alone.

The catalogue (config/signatures.yaml) matches lines; these are what the classifier
concludes from counters, the training state and the kind of job: a bar that all but
stopped, an unknown exception before any training step, a lost connection between ranks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rsup.supervisor.recognize import advance
from rsup.supervisor.recognize.advance import Mark
from rsup.supervisor.recognize.catalogue import CATEGORY_PRIORITY, Signature
from rsup.supervisor.recognize.segments import RANK_PREFIX
from rsup.workers import constants as C


def _built_in(
    id: str, category: str, regex: re.Pattern[str], meaning: str, action: str, remedy: str,
    priority: int | None = None,
) -> Signature:  # fmt: skip
    return Signature(
        id=id,
        category=category,
        pattern=regex.pattern,
        regex=regex,
        meaning=meaning,
        action=action,
        fatal=True,
        priority=CATEGORY_PRIORITY[category] if priority is None else priority,
        remedy=remedy,
        keywords=(),
        ignore_case=False,
        source="built in",
        survivable=True,
    )


# Causes inferred from what surrounds an exception or a warning are the weakest evidence:
# any line a signature knows outranks them (and a clean exit does, conclude.py).
INFERRED_PRIORITY = CATEGORY_PRIORITY[C.UNKNOWN] + 2

# A hang seen in the counters, not in a line (advance.STALL_S).
STALLED = _built_in(
    "stalled-progress",
    C.HANG,
    re.compile(r"s/it"),
    f"The progress bar before the job was stopped reported over {advance.STALL_S:.0f} "
    "seconds per iteration: the job had all but stopped.",
    "Restart from the last checkpoint.",
    "Look for a stuck DataLoader worker, a hung collective, or a full disk.",
)
# An exception no signature knows, raised before the job trained: its code, data or setup
# is wrong, and the same run would raise it again. Not when it names what comes and goes
# (TRANSIENT: the network or a socket, a timeout or deadline, the GPU runtime, memory, a
# helper process gone) or values gone NaN or invalid (TensorBoard's "The histogram is empty":
# the values were NaN; icefall's "grad_scale is too small": the fp16 loss scale collapsed).
UNTRAINED = _built_in(
    C.INFERRED_CONFIG_ERROR,
    C.CONFIG_ERROR,
    re.compile(r"^\w+(?:Error|Exception)"),
    "The job raised an exception that no signature knows before it trained a single step: "
    "its code, data or setup is wrong, and running it again raises it again.",
    "One more try; the same exception again fails the job (no crash loop).",
    "Read the exception, fix the job, and start it again.",
    # the weakest evidence: any line a signature knows outranks it
    priority=CATEGORY_PRIORITY[C.UNKNOWN] + 1,
)
TRANSIENT = re.compile(
    r"\b(?:CUDA|HIP|NCCL)\b|[Cc]u(?:DNN|dnn|BLAS|blas)|CUDNN|CUBLAS|[Tt]ime[ds]? ?out|[Cc]onnect"
    r"|HTTP|[Nn]etwork|[Tt]emporar(?:y failure|ily)|[Rr]esolve|\b(?:nan|NaN|Nan|NAN|inf|Inf)\b"
    r"|infinite|finite"
    r"|FloatingPoint|[Ll]oss scale|Input/output error|No space left|[Dd]isk quota|[Ii]nterrupt"
    r"|[Ss]ignal|[Mm]emory|[Dd]evice-side|invalid values|(?:failed to|did not) converge"
    r"|ill-conditioned|process has (?:shut ?down|died|exited)|[Hh]istogram is empty"
    r"|grad_scale is too small"
    r"|[Ss]ocket (?:closed|is closed|timed? ?out|error)|\bsocket\.(?:timeout|error)\b"
    r"|[Dd]eadline [Ee]xceeded|DEADLINE_EXCEEDED"
)
# A training loss printed on a progress line ("Epoch: 1, train loss: 0.69"): a step was
# taken. Not a validation, test or dev loss ("val_loss", "eval/loss", "val. loss", "Test set:
# Average loss"), nor a best or minimum one kept for comparison ("best loss: inf").
_LOSS = re.compile(rb"\b(?:[Tt]rain(?:ing)?[ _])?[Ll]oss\b\s*[:=]?\s*\d")
_NOT_TRAIN = re.compile(
    rb"(?:(?:[Vv]al(?:id(?:ation)?)?|[Ee]val|[Tt]est|[Dd]ev|[Bb]est|[Mm]in)[ _/.]*"
    rb"|(?:[Tt]est|[Vv]alid(?:ation)?|[Ee]val\w*) set: (?:[Aa]verage )?)$"
)
_BEFORE = 24  # bytes before a loss in which _NOT_TRAIN is looked for


# A segment showing an epoch that says the epoch is over ("Epoch 1 of 30 took 28.3s", MXNet's
# "Epoch[0] Time cost=410.3").
_EPOCH_OVER = re.compile(
    rb"\b[Ee]poch\s*\[?\d+(?:\s*(?:/|of)\s*\d+)?\]?\s*:?\s*"
    rb"(?:(?:took|finished|completed?|done|ended)\b|Time cost=)"
)


def trains_by_loss(segment: bytes, epoch: int | None = None) -> bool:
    """Whether a progress segment prints a training loss (see _LOSS), or, showing `epoch`,
    says that epoch is over."""
    if epoch is not None and _EPOCH_OVER.search(segment):  # "Epoch 1 of 30 took 28.3s"
        return True
    return _training_loss(_LOSS, segment)


def _training_loss(loss: re.Pattern[bytes], segment: bytes) -> bool:
    """Whether `loss` matches in `segment` where no validation or test word precedes it."""
    return any(
        not _NOT_TRAIN.search(segment, max(0, m.start() - _BEFORE), m.start())
        for m in loss.finditer(segment)
    )


LOSS_NOT_FINITE = _built_in(
    C.INFERRED_LOSS_NOT_FINITE,
    C.UNKNOWN,
    re.compile(r"[Ll]oss"),
    "The last training loss the job printed before it ended is NaN or infinite: the "
    "training had diverged.",
    "Restart from the last checkpoint saved before the loss went NaN.",
    "Lower the learning rate, add gradient clipping, or check the data for bad samples; "
    "with AMP, check the loss scaler.",
    priority=CATEGORY_PRIORITY[C.KILLED] + 1,  # outranks the stop it leads to
)


# A training loss read with its value, in the forms trainers print it: "loss: 0.41",
# "'loss': nan", "loss=inf", "Loss is nan.", "loss [ nan 9.21 ...]", "loss:  tensor(nan, ...".
_LOSS_READING = re.compile(
    rb"\b(?:[Tt]rain(?:ing)?[ _])?[Ll]oss\b['\"]?(?:\s*[:=]\s*|\s+is\s+|\s+)?"
    rb"(?:\[\s*|tensor\()?([-+]?(?:nan|NaN|NAN|inf|Inf)\b|[-+]?\d)"
)


def last_loss_finite(segment: bytes) -> bool | None:
    """Whether the last training loss `segment` prints is finite; None when it prints none
    (a validation, test, dev or best loss is not one: see _NOT_TRAIN)."""
    last = None
    for m in _LOSS_READING.finditer(segment):
        if not _NOT_TRAIN.search(segment, max(0, m.start() - _BEFORE), m.start()):
            last = m
    return None if last is None else last.group(1)[-1:].isdigit()


def loss_not_finite(segment: bytes) -> bool:
    """Whether the last training loss a progress segment prints is NaN or infinite: on the
    last progress line of the output, the training had diverged."""
    return last_loss_finite(segment) is False


# Exception messages only a job that trained can raise: a learning-rate schedule stepped
# past its total (OneCycleLR: "Tried to step 60002 times. The specified number of total
# steps is 60000"); a callback run at an epoch's end that looked for a metric the epoch did
# not log (Lightning's ReduceLROnPlateau, ModelCheckpoint and EarlyStopping; the Trainer's
# `metric_for_best_model`, looked for at an evaluation during training); fairseq's check,
# every so many updates, that the ranks' gradients still agree.
TRAINED_MESSAGE = re.compile(
    r"\bTried to step \d+ times\b|\bconditioned on metric `?\S+`? which is not available\b"
    r"|\bcould not find the monitored key in the returned metrics\b"
    r"|\bModelCheckpoint\(monitor='[^']*'\) not found in the returned metrics\b"
    r"|\bThe `metric_for_best_model` training argument is set to '[^']*', which is not found\b"
    r"|\bgradients are inconsistent between workers\b"
)


# A connection lost, in a job that runs several processes (rank prefixes, distributed frames).
NET_FAILURE = re.compile(
    r"[Cc]onnection ?(?:[Rr]eset|[Rr]efused|[Cc]losed|[Aa]borted|[Ee]rror)|[Bb]roken ?[Pp]ipe"
    r"|\b[Ss]ocket\b|[Tt]imed? ?out|[Tt]imeout|(?:reset|closed) by peer"
    r"|[Nn]ame or service not known|\b[Hh]ost not found\b|[Nn]o route to host"
)
LINK_LOST = _built_in(
    C.INFERRED_LINK_LOST,
    C.NCCL_DISTRIBUTED,
    NET_FAILURE,
    "A process of a distributed job lost its connection to another (reset, refused, timed "
    "out): one rank died or the network between them failed.",
    "Stop and restart the whole process group from the last checkpoint.",
    "Find the rank that failed first (its own error comes before this one); check the "
    "network between the nodes, MASTER_ADDR and MASTER_PORT.",
    priority=INFERRED_PRIORITY,
)

# torch's warning that the GPU runtime failed to start ("UserWarning: CUDA initialization:
# Found no NVIDIA driver ..."). Harmless alone (a job may go on on the CPU); a job that
# then dies of an exception no signature knows most likely died of it. ROCm builds say "HIP
# initialization: Unexpected error from hipGetDeviceCount()" (both are trigger words).
CUDA_INIT_WARNING = b"CUDA initialization: "
HIP_INIT_WARNING = b"HIP initialization: "
GPU_NOT_STARTED = _built_in(
    C.INFERRED_GPU_NOT_STARTED,
    C.HIP_RUNTIME_INIT,
    re.compile(r"(?:CUDA|HIP) initialization: "),
    "torch warned that the GPU runtime failed to start, and the job then died of an "
    "exception rsup does not know: most likely of the GPU it could not use.",
    "Probe the GPU again after a backoff; if it stays broken, fall back to the CPU.",
    "Read the reason in the warning (driver too old, driver/library mismatch, no device).",
    priority=INFERRED_PRIORITY,
)

# A traceback cut off at a wait for a child process (a launcher waiting on its workers:
# torch.distributed.launch's `process.wait()` down to `os.waitpid`). Only an interrupt breaks
# that wait, so the traceback was printed as someone stopped the job while it waited, which
# people do to a job that stopped moving.
INTERRUPTED_WAIT = _built_in(
    C.INFERRED_WAIT_INTERRUPTED,
    C.HANG,
    re.compile(
        r"\(pid, sts\) = os\.waitpid\(|(?:^|\s)(?:\w+\.)?(?:process|proc|result)\.wait\(\)\s*$"
    ),
    "The traceback stops, cut off, in a wait for a child process: the job was interrupted "
    "while it waited on its workers, most likely because they had stopped moving.",
    "Restart from the last checkpoint.",
    "Dump the workers' stacks (py-spy dump) to see where they wait; for a distributed job, "
    "run with NCCL_DEBUG=INFO.",
    priority=INFERRED_PRIORITY,
)

# The same warning naming a GPU that is there but whose runtime broke (driver too old, CUDA
# unknown error, error 802/803/804), not a machine without one ("Found no NVIDIA driver": a
# CPU-only run may print that and be fine). A job that trains after it lived through it.
GPU_ABSENT = re.compile(
    rb"CUDA initialization: (?:Found no NVIDIA driver|CUDA driver initialization failed, you "
    rb"might not have a CUDA gpu)"
)
GPU_WARNED = _built_in(
    C.INFERRED_GPU_WARNED,
    C.HIP_RUNTIME_INIT,
    re.compile(r"(?:CUDA|HIP) initialization: "),
    "torch warned that the GPU runtime failed to start on a machine with a GPU (driver too "
    "old, driver and runtime mismatched, or an unknown CUDA error), and the job trained no "
    "further: it had no GPU to use.",
    "Probe the GPU again after a backoff; if it stays broken, fall back to the CPU.",
    "Read the reason in the warning; reboot after a driver update, or install a torch built "
    "for the installed driver.",
    priority=INFERRED_PRIORITY,
)

# NCCL retrying a connection to another rank ("NCCL INFO Call to connect returned Connection
# refused, retrying"). Normal while the nodes come up; a job whose output ends in it lost
# its peer. Tried from the start of the line only, so linear on long lines.
CONNECT_RETRY_WORD = b", retrying"
_CONNECT_RETRY = re.compile(
    r"^(?=.*\bNCCL INFO\b)(?=.*, retrying\b)"
    r"(?=.*(?:[Rr]efused|[Nn]o route to host|[Uu]nreachable|[Tt]imed? ?out|[Rr]eset by peer))"
)
CONNECT_RETRY = _built_in(
    C.INFERRED_CONNECT_RETRY,
    C.NCCL_DISTRIBUTED,
    _CONNECT_RETRY,
    "NCCL could not connect to another rank and was still retrying when the output ended: "
    "the peer is down or unreachable.",
    "Restart all ranks from the last checkpoint (torchrun).",
    "Check that every node started, MASTER_ADDR, NCCL_SOCKET_IFNAME and the firewall "
    "between the nodes.",
    priority=INFERRED_PRIORITY,
)

# What frames and the lines around a traceback tell (classify.py reads them).
# Frames of the distributed layer: the job runs several processes that talk to each other.
DISTRIBUTED_FRAME = re.compile(r"[/\\](?:torch[/\\]distributed|deepspeed|horovod)[/\\]")
# Frames that only run once the job has trained: saving a checkpoint (torch.save included,
# an adapter's weights such as `save_lora_weights`, an Accelerate state), picking the best
# metric, epoch-end hooks (mmcv's evaluation hooks included), an evaluation the training loop
# calls with its epoch ("self.evaluate(epoch, 'test')"), the end of training (`on_train_end`
# hooks), reading the History that Keras' fit() returned once it finished
# (`history.history['acc']`), a metric scikit-learn computes on predictions, a YOLOv5-style
# train.py validating its epoch (`val.run(`), a script saving the model it fit
# (`model.save(`), a scalar written to TensorBoard (most often a loss; a setup mistake in
# the first call, logging the learning rate before the loop, reads as trained too).
# IPython 8 names a method with its class ("in ProduceExample.on_epoch_end(self, epoch)").
# An epoch may be passed as `e` or `ep` to the script's own `test`, `evaluate` or
# `validation` ("test_loss = test(e)"), but not to a name that only holds those words
# (`load_test_split(e)`, `numexpr.evaluate(e)`), to `eval` (Python's own, parsing a config:
# "[eval(e) for e in dims]") nor to a check (`is_valid(e)`, `validate(e)`). An exception
# under them is not a config error, even when the excerpt shows no progress. (EVAL_FRAME
# below covers evaluation functions called without their epoch.)
TRAINED_FRAME = re.compile(
    r'[/\\]torch[/\\]serialization\.py", line \d+, in _?save\b'
    r'|[/\\]\w*eval_hooks?\.py"'
    r"|(?:, in |\.py in )(?:\w+\.)?(?:_?save_checkpoint|_?save_model|save_pretrained|save_file"
    r"|_tobytes|save_\w+_weights|save_state"
    r"|_save_(?:topk|last)_checkpoint"
    r"|_determine_best_metric|_maybe_log_save_evaluate|(?:on_)?(?:validation|train|training)"
    r"_epoch_end|on_epoch_end|on_(?:train|fit)_end|after_(?:train|val)_epoch)\b"
    r"|\b(?:\w+_)?(?:eval|evaluate|valid|validate|validation|test)(?:_\w+)?"
    r"\((?:[^()]*,\s*)?epoch\s*[,)]"
    r"|(?<![\w.])(?:self\.)?(?:evaluate|validation|test)\((?:[^()]*,\s*)?(?:ep|e)\s*[,)]"
    r"|\bhistory\.history\["
    r"|\b(?:val|validate)\.run\("
    r"|\bmodel\.save\("
    r"|[/\\]sklearn[/\\]metrics[/\\]"
    r"|[/\\](?:torch[/\\]utils[/\\]tensorboard|tensorboardX)[/\\]writer\.py"
    r'", line \d+, in add_scalars?\b'
)
# A frame running an evaluation: `evaluate`, `Evaluation`, `evaluate_prediction`,
# `validation_step`, `val_step`, `eval_one_epoch`; in a training script's own code (not an
# installed package: `yolo val` runs Ultralytics' `val` alone), `val` and a method of its
# `evaluator.py` other than the constructor... An evaluation runs a model that has trained:
# an exception no signature knows, raised in it, is not a setup mistake. Except in
# Lightning's sanity check, which runs validation_step before the first training step: a
# traceback that passes through `_run_sanity_check` (SANITY_FRAME) is still read as before
# training. Not `validate` (setup and libraries name their checks so: jsonschema,
# GenerationConfig.validate), nor a private `_evaluate` (Hugging Face's Trainer evaluates
# before training with eval_on_start). COCO evaluation turning a model's detections into
# results (`_segm2json`, `loadRes`; IPython names the method with its class:
# `COCO.loadRes`) is one too.
EVAL_FRAME = re.compile(
    r"(?:, in |\.py in )(?:evaluate\w*|Evaluat(?:e|ion)|validation_(?:step|loop|epoch\w*)"
    r"|val_(?:step|epoch|one_epoch)|valid_(?:step|epoch|one_epoch)"
    r"|eval_(?:step|epoch|one_epoch)|evaluation_(?:step|loop|epoch\w*)"
    r"|_evaluate_predictions_on_\w+|_(?:segm|det|proposal)2json|results2json|_eval_with_loader"
    r"|(?:COCO\.)?loadRes)\b"
    # a training script's own (not an installed package's): `val`, an evaluator module
    r"|^(?!.*-packages[/\\]).*(?:, in |\.py in )val\b"
    r'|^(?!.*-packages[/\\]).*[/\\](?:\w+_)?evaluator\.py", line \d+, in (?!__init__\b)'
)
# The line above a traceback announcing an evaluation ("evaluating validation performance...",
# "Running evaluation"): the exception came out of it, as from an EVAL_FRAME. Not
# "Validating" nor "Running validation checks" (setup checks its config and data so).
EVAL_ANNOUNCED = re.compile(
    rb"\b(?:[Ee]valuating|EVALUATING|[Rr]unning (?:[Ee]valuation|[Vv]alidation))\b(?! checks?\b)"
)
# A file a run writes only once it has trained: a checkpoint numbered by its epoch, step or
# iteration (`epoch_1.pth`, `iter_8000.pth`, `checkpoint-500`). An exception that names one
# while an OS call on it failed (WRITE_ERRNO: any errno but ENOENT, which a resume pointed at
# the wrong place raises) came at a save. Loaders' own words for a bad checkpoint ("Can't find
# a valid checkpoint at out/checkpoint-500") carry no errno: they stay setup mistakes.
WRITE_ERRNO = re.compile(rb"\[Errno (?!2\])\d+\]")
SAVED_FILE = re.compile(
    rb"\b(?:epoch|iter|iteration|step|ckpt)[_-]?\d+\.(?:pth|pt|ckpt|h5|keras|bin|safetensors)\b"
    rb"|\bcheckpoint-\d+\b"
)
# An exception line saying a file, folder or module is missing.
MISSING = re.compile(
    rb"FileNotFoundError|ModuleNotFoundError|ImportError|NotADirectoryError|IsADirectoryError"
    rb"|No such file|[Dd]oes not exist|[Nn]ot found"
)
SANITY_FRAME = re.compile(r"\b_?run_sanity_check\b|\bsanity_check\w*\b")
# The line above a traceback says it was only printed: Python ignored the exception (raised
# in __del__, a weakref callback or at exit: never raised, whatever it says), or a logger
# printed it while announcing a retry ("Retry attempt failed:") or under its own warning
# ("WARNING: Unable to export the graph to TensorBoard."), or it ended a thread other than
# the main one ("Exception in thread Thread-1:": the thread died, the program did not).
# An exception no signature knows is then not a failure; one a signature knows still is.
# Python's "Error in atexit._run_exitfuncs:" comes after the program ended: never a failure.
IGNORED_BY_PYTHON, LOGGED_RETRY, IN_THREAD = "ignored", "retry", "thread"
_IGNORED = (b"Exception ignored in", b"Error in atexit._run_exitfuncs:")
_RETRY_INTRO = re.compile(rb"\b(?:[Rr]etry(?:ing)?|RETRY(?:ING)?)\b.*:\s*$|^WARNING: ")
_THREAD_INTRO = b"Exception in thread "


def printed_only(above: bytes) -> str | None:
    """IGNORED_BY_PYTHON, LOGGED_RETRY or IN_THREAD when the line above a traceback header
    says so."""
    prefix = RANK_PREFIX.match(above)
    line = above[prefix.end() :] if prefix else above
    if line.startswith(_IGNORED):
        return IGNORED_BY_PYTHON
    if line.startswith(_THREAD_INTRO):
        return IN_THREAD
    return LOGGED_RETRY if _RETRY_INTRO.search(line) else None


@dataclass
class Trace:
    """What one traceback has shown so far, to decide by when its exception line is missing."""

    chain: int
    line: int
    text: str
    marks: tuple[Mark | None, Mark | None]
    notebook_class: str | None
    last_frame: tuple[int, str] | None = None
    hint: tuple[Signature, int, str] | None = None  # the deepest frame a signature knows
    trained: bool = False  # a frame only runs once the job trained (TRAINED_FRAME)
    evaluating: bool = False  # a frame runs an evaluation (EVAL_FRAME)
    sanity: bool = False  # a frame is Lightning's sanity check (SANITY_FRAME)
    printed: str | None = None  # only printed, not raised: see printed_only

    def trained_for(self, exception: bytes) -> bool:
        """Whether the frames show the job had trained, for an exception line no signature
        knows (`exception`), or the line names a checkpoint it failed to write
        (names_saved_file): also an evaluation outside Lightning's sanity check, unless what
        failed is a file or module missing (an evaluation script of its own, run before any
        training, fails so). A setup mistake a signature knows stays one under an evaluation."""
        if self.trained or names_saved_file(exception):
            return True
        return self.evaluating and not self.sanity and not MISSING.search(exception)


def names_saved_file(exception: bytes) -> bool:
    """Whether an exception line no signature knows names a checkpoint the run saved
    (SAVED_FILE) with an OS error other than a missing file (WRITE_ERRNO): it was raised at a
    save, after training."""
    return (
        SAVED_FILE.search(exception) is not None
        and WRITE_ERRNO.search(exception) is not None
        and MISSING.search(exception) is None
    )
