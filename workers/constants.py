"""Names shared by the daemon, the shim and the workers.

Standard library only: this module is imported inside the job's own interpreter.
"""

# Failure categories: the vocabulary of events, `rsup diagnose` and the policy.
GPU_MEMORY_FAULT = "gpu_memory_fault"
OOM = "oom"
HOST_OOM = "host_oom"
HIP_RUNTIME_INIT = "hip_runtime_init"
DATALOADER_WORKER = "dataloader_worker"
NCCL_DISTRIBUTED = "nccl_distributed"
SEGFAULT_ABORT = "segfault_abort"
HANG = "hang"
CONFIG_ERROR = "config_error"
KILLED = "killed"  # ended by a signal from outside (scheduler, Ctrl-C) that nothing else explains
UNKNOWN = "unknown"
# The signature of an exception no signature knows, raised before the job trained: a config
# error by inference, so the policy gives it one more try before failing the job.
INFERRED_CONFIG_ERROR = "exception-before-training"
# Causes the classifier infers from an exception no signature knows (recognize/inferred.py):
# the weakest evidence, so a clean exit outweighs them.
INFERRED_GPU_NOT_STARTED = "gpu-runtime-did-not-start"
INFERRED_LINK_LOST = "distributed-link-lost"
INFERRED_GPU_WARNED = "gpu-runtime-broken-warning"
INFERRED_LOSS_NOT_FINITE = "loss-not-finite-at-end"
INFERRED_CONNECT_RETRY = "nccl-connect-retrying"
INFERRED_WAIT_INTERRUPTED = "interrupted-while-waiting"
INFERRED = frozenset(
    {
        INFERRED_CONFIG_ERROR,
        INFERRED_GPU_NOT_STARTED,
        INFERRED_LINK_LOST,
        INFERRED_GPU_WARNED,
        INFERRED_LOSS_NOT_FINITE,
        INFERRED_CONNECT_RETRY,
        INFERRED_WAIT_INTERRUPTED,
    }
)
NONE = "none"

CATEGORIES = (
    GPU_MEMORY_FAULT,
    OOM,
    HOST_OOM,
    HIP_RUNTIME_INIT,
    DATALOADER_WORKER,
    NCCL_DISTRIBUTED,
    SEGFAULT_ABORT,
    HANG,
    CONFIG_ERROR,
    KILLED,
    UNKNOWN,
    NONE,
)

# CLI exit codes (DESIGN.md, "CLI contract").
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

# Shim exit codes: the shim's own status, distinct from the job's (which is in exit.json).
SHIM_EXIT_OK = 0
SHIM_EXIT_BAD_ARGS = 64
SHIM_EXIT_SPAWN_FAILED = 65

# Files of one attempt, under <state>/jobs/<name>/attempts/<n>/.
OUTPUT_LOG = "output.log"
EXIT_JSON = "exit.json"
SHIM_JSON = "shim.json"
EVENTS_JSONL = "events.jsonl"
ROTATION_JSON = "rotation.json"

# Environment a job sees, set by the daemon.
ENV_ATTEMPT_DIR = "RSUP_ATTEMPT_DIR"
ENV_EVENTS_FILE = "RSUP_EVENTS_FILE"
ENV_JOB = "RSUP_JOB"
ENV_ATTEMPT = "RSUP_ATTEMPT"
ENV_CHECKPOINT = "RSUP_CHECKPOINT"
ENV_DEVICE = "RSUP_DEVICE"
ENV_BATCH = "RSUP_BATCH"  # command/torchrun jobs: the batch size in force
ENV_WORKERS = "RSUP_WORKERS"  # and the DataLoader workers in force
ENV_INJECT = "RSUP_INJECT"
