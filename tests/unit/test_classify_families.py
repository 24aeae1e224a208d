"""What the classifier reads beyond single known messages: when an unknown exception is the
job's setup (config_error) or not, tracebacks Python only printed, and lines that name a
family of failure in words no specific signature knows.

Hand-made inputs, one per rule: unit tests of the rules, not evidence of accuracy (the
real-log corpus is, tests/corpus/INDEX.tsv).
"""

from __future__ import annotations

import functools

import pytest
from rsup.supervisor.recognize.classify import LiveClassifier
from rsup.supervisor.recognize.offline import diagnose_text
from rsup.supervisor.recognize.signatures import Catalogue, load_catalogue
from rsup.workers import constants as C

TRACEBACK = 'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
SAVE_FRAMES = (
    '  File "/venv/lib/python3.10/site-packages/torch/serialization.py", line 618, in save\n'
    "    with _open_zipfile_writer(f) as opened_zipfile:\n"
)


@functools.cache
def shipped() -> Catalogue:
    return load_catalogue()


def category(text: str) -> str:
    return diagnose_text(text, catalogue=shipped()).category


def every_way(text: str) -> set[tuple[str, int | None]]:
    """The verdicts (category, line) of the live classifier fed `text` whole, line by line,
    byte by byte and in pieces of 7 bytes: one verdict when the feeding does not matter."""
    data, verdicts = text.encode(), set()
    cuts = (
        [data],
        data.splitlines(keepends=True),
        [data[i : i + 1] for i in range(len(data))],
        [data[i : i + 7] for i in range(0, len(data), 7)],
    )
    for pieces in cuts:
        classifier = LiveClassifier(shipped())
        for piece in pieces:
            classifier.feed(piece)
        classifier.close()
        verdict = classifier.verdict()
        verdicts.add((verdict.category, verdict.line))
    return verdicts


def test_frames_that_run_only_after_training_make_an_unknown_exception_unknown() -> None:
    saving = TRACEBACK + SAVE_FRAMES + "TypeError: can't pickle _thread.lock objects\n"
    assert category(saving) == C.UNKNOWN
    best = TRACEBACK + '  File "t.py", line 3, in _determine_best_metric\n' + "KeyError: 'x'\n"
    assert category(best) == C.UNKNOWN
    hook = '  File "seg.py", line 292, in validation_epoch_end\nIndexError: index 4\n'
    assert category(hook) == C.UNKNOWN
    hooks = TRACEBACK + '  File "/mmdet/core/evaluation/eval_hooks.py", line 9, in after\n'
    assert category(hooks + "KeyError: 'bbox_mAP'\n") == C.UNKNOWN
    notebook = (
        "ValueError                                Traceback (most recent call last)\n"
        "<ipython-input-57-d7f77272d4ef> in <cell line: 11>()\n"
        "---> 11 trainer.train()\n"
        "/usr/local/lib/python3.10/dist-packages/safetensors/torch.py in _tobytes(tensor, name)\n"
        "    413     if not tensor.is_contiguous():\n"
    )
    assert category(notebook + "ValueError: You are trying to save a tensor\n") == C.UNKNOWN
    mmcv = (
        TRACEBACK + '  File "/mmcv/runner/epoch_based_runner.py", line 58, in after_train_epoch\n'
    )
    assert category(mmcv + "AttributeError: 'Hook' object has no attribute 'flag'\n") == C.UNKNOWN
    # a config error a signature knows reads the same under such frames
    caught = "IndexError: Caught IndexError in DataLoader worker process 0.\n"
    assert category(TRACEBACK + caught) == C.CONFIG_ERROR
    assert category(mmcv + caught) == C.UNKNOWN
    checked = TRACEBACK + '  File "cfg.py", line 3, in validate_config\n'
    assert category(checked + "ValueError: lr must be > 0\n") == C.CONFIG_ERROR
    # a file missing is a setup mistake, even under an evaluation (a script of its own), and
    # a function that builds what an evaluation needs is setup
    for name in ("build_eval_dataset", "validation_step", "evaluate"):
        named = TRACEBACK + f'  File "t.py", line 3, in {name}\n'
        assert category(named + "FileNotFoundError: [Errno 2] No such file: 'v.json'\n") == (
            C.CONFIG_ERROR
        ), name
    # the end of training, and the History Keras' fit() returned once it finished
    ended = TRACEBACK + '  File "loggers.py", line 126, in on_train_end\n    plot(f)\n'
    assert category(ended + "NameError: name 'plot' is not defined\n") == C.UNKNOWN
    history = (
        TRACEBACK + "  File \"c.py\", line 55, in <module>\n    plt.plot(history.history['acc'])\n"
    )
    assert category(history + "KeyError: 'acc'\n") == C.UNKNOWN
    # the same exception under setup frames is the job's setup
    setup = TRACEBACK + '  File "t.py", line 3, in build_model\n' + "KeyError: 'x'\n"
    assert category(setup) == C.CONFIG_ERROR


def test_evaluation_and_metric_frames_show_the_model_had_trained() -> None:
    paddle = TRACEBACK + '  File "/ppdet/engine/trainer.py", line 370, in _eval_with_loader\n'
    assert category(paddle + "IndexError: list index out of range\n") == C.UNKNOWN
    coco = '  File "mmdet/datasets/coco.py", line 259, in _segm2json\n'
    assert category(TRACEBACK + coco + "IndexError: list index out of range\n") == C.UNKNOWN
    auc = '  File "/env/lib/python3.6/site-packages/sklearn/metrics/ranking.py", line 356, in x\n'
    assert category(TRACEBACK + auc + "ValueError: Only one class present in y_true.\n") == (
        C.UNKNOWN
    )
    giou = '  File "/env/fvcore/nn/giou_loss.py", line 32, in giou_loss\n'
    assert category(TRACEBACK + giou + "AssertionError: bad box: x1 larger than x2\n") == (
        C.UNKNOWN
    )
    one = "ValueError: Expected more than 1 value per channel when training, got input size [1]"
    assert category(TRACEBACK + one + "\n") == C.UNKNOWN
    # a training script's own evaluator module, called from its train()
    evaluator = '  File "g:\\YOLOv4\\eval\\evaluator.py", line 127, in __predict\n'
    unpack = "ValueError: not enough values to unpack (expected 3, got 0)\n"
    assert category(TRACEBACK + evaluator + unpack) == C.UNKNOWN
    # pycocotools told predictions that name images its annotations do not hold
    coco_set = "AssertionError: Results do not correspond to current coco set\n"
    assert category(coco_set) == C.UNKNOWN
    # an evaluator's constructor is setup, like any other
    built = '  File "/x/coco_evaluator.py", line 40, in __init__\n'
    assert category(TRACEBACK + built + "KeyError: 'ann_file'\n") == C.CONFIG_ERROR


def test_an_exception_naming_a_numbered_checkpoint_came_at_a_save() -> None:
    symlink = (
        "OSError: [Errno 95] Operation not supported: 'epoch_1.pth' -> "
        "'/content/gdrive/My Drive/checkpoints/epoch_1.pth'\n"
    )
    assert category(TRACEBACK + symlink) == C.UNKNOWN
    assert category(TRACEBACK + "PermissionError: [Errno 13] denied: 'out/checkpoint-500'\n") == (
        C.UNKNOWN
    )
    # one that is missing is a resume pointed at the wrong place: setup
    resume = "FileNotFoundError: [Errno 2] No such file or directory: 'runs/epoch_10.pth'\n"
    assert category(TRACEBACK + resume) == C.CONFIG_ERROR
    # a loader's own words for a bad checkpoint carry no errno: a resume pointed wrong
    for line in (
        "ValueError: Can't find a valid checkpoint at output/checkpoint-500",
        "OSError: output/checkpoint-500 does not appear to have a file named config.json.",
    ):
        assert category(TRACEBACK + line + "\n") == C.CONFIG_ERROR, line
    # a file name without a number says nothing of a save
    assert category(TRACEBACK + "OSError: [Errno 95] unsupported: 'best.pth'\n") == C.CONFIG_ERROR
    # an adapter's weights saved alone is a save too (not Keras' save_weights, which a script
    # may call before fit())
    keras = '  File "/env/keras/engine/training.py", line 2, in save_weights\n'
    assert category(TRACEBACK + keras + "ImportError: save_weights requires h5py.\n") == (
        C.CONFIG_ERROR
    )
    lora = '  File "/db/diffusers/src/diffusers/loaders.py", line 1111, in save_lora_weights\n'
    assert category(TRACEBACK + lora + "ValueError: invalid literal for int(): 'x'\n") == (
        C.UNKNOWN
    )


def test_validation_a_training_loop_runs_and_an_epoch_mxnet_timed_show_it_trained() -> None:
    val = '  File "lib/core/trainer.py", line 209, in val\n    end_points = post(end_points)\n'
    assert category(TRACEBACK + val + "KeyError: 'post_pred_score'\n") == C.UNKNOWN
    yolo = '  File "train.py", line 347, in train\n    results, maps, _ = val.run(data_dict,\n'
    assert category(TRACEBACK + yolo + "ValueError: not enough values to unpack\n") == (C.UNKNOWN)
    capital = '  File "src/eval.py", line 221, in Evaluation\n    y = float(h) / b[3]\n'
    assert category(TRACEBACK + capital + "ZeroDivisionError: float division by zero\n") == (
        C.UNKNOWN
    )
    timed = "2016-03-29 15:16:27,723 Epoch[0] Time cost=410.278\n"
    assert category(timed + TRACEBACK + "ValueError: could not broadcast\n") == C.UNKNOWN
    # Ultralytics' own `val`, run alone (`yolo val`), is no sign of training; nor is a library's
    # evaluator module, nor a class whose name begins so
    alone = (
        '  File "/env/lib/python3.10/site-packages/ultralytics/engine/model.py", line 6, in val\n'
    )
    assert category(TRACEBACK + alone + "KeyError: 'names'\n") == C.CONFIG_ERROR
    lm_eval = '  File "/env/lib/python3.10/site-packages/lm_eval/evaluator.py", line 9, in run\n'
    assert category(TRACEBACK + lm_eval + "ValueError: Attempted to load model 'hff'\n") == (
        C.CONFIG_ERROR
    )
    args = '  File "/x/args.py", line 3, in EvaluationArguments\n'
    assert category(TRACEBACK + args + "TypeError: bad default\n") == C.CONFIG_ERROR
    # "completeness" is no epoch ended
    assert category("Epoch 1 completeness: 0.4\n" + TRACEBACK + "KeyError: 'x'\n") == (
        C.CONFIG_ERROR
    )
    # a validation function of another name is not read as one ("val_data" is a value)
    other = '  File "data.py", line 9, in val_data\n    return load(x)\n'
    assert category(TRACEBACK + other + "KeyError: 'x'\n") == C.CONFIG_ERROR


def test_an_exception_where_dataloader_workers_start_is_the_workers_start() -> None:
    parent = (
        TRACEBACK + '  File "C:\\env\\lib\\site-packages\\torch\\utils\\data\\dataloader.py", '
        "line 927, in __init__\n"
        "    w.start()\n"
        '  File "C:\\env\\lib\\multiprocessing\\reduction.py", line 60, in dump\n'
        "    ForkingPickler(file, protocol).dump(obj)\n"
        "AttributeError: Can't pickle local object 'hf_dataset.<locals>.pre_process'\n"
    )
    assert category(parent) == C.DATALOADER_WORKER
    child = (
        TRACEBACK + '  File "C:\\env\\lib\\multiprocessing\\spawn.py", line 126, in _main\n'
        "    self = reduction.pickle.load(from_parent)\n"
        "EOFError: Ran out of input\n"
    )
    assert category(child) == C.DATALOADER_WORKER
    # the same exception saving a checkpoint is not the workers'
    saving = TRACEBACK + SAVE_FRAMES + "AttributeError: Can't pickle local object 'f.<locals>.g'\n"
    assert category(saving) == C.UNKNOWN


def test_paddles_native_stack_and_its_termination_signal() -> None:
    paddle = (
        "--------------------------------------\n"
        "C++ Traceback (most recent call last):\n"
        "--------------------------------------\n"
        "No stack trace in paddle, may be caused by external reasons.\n"
        "----------------------\n"
        "Error Message Summary:\n"
        "----------------------\n"
        "FatalError: `Termination signal` is detected by the operating system.\n"
        "  [SignalInfo: *** SIGTERM (@0x7) received by PID 62 (TID 0x7f9f) from PID 7 ***]\n"
    )
    assert category(paddle) == C.KILLED
    assert every_way(paddle) == {(C.KILLED, 8)}
    # Paddle's own error line under its summary is read as any lone exception line
    invalid = (
        paddle.split("FatalError")[0] + "InvalidArgumentError: The shape of Input(X) is wrong\n"
    )
    assert category(invalid) == C.CONFIG_ERROR
    # as Paddle prints it: its notes under the error line are more of the same error
    hint = "  [Hint: Expected input_channels == x] (at /paddle/phi/infermeta/binary.cc:505)\n"
    operator = "  [operator < conv2d > error]\n"
    assert category(invalid + hint + operator) == C.CONFIG_ERROR
    assert every_way(invalid + hint + operator) == {(C.CONFIG_ERROR, 8)}
    # a line of its own after them is the job going on
    assert category(invalid + hint + "Epoch 1 started\n") == C.NONE


def test_hydra_failing_to_build_what_its_config_names_is_setup() -> None:
    hydra = (
        "hydra.errors.InstantiationException: Error in call to target 'pkg.Model.from_pretrained'"
        ":\nAttributeError(\"'DualARTransformer' object has no attribute 'output'\")\n"
        "full_key: model.model\n"
        "[2026-03-19 10:05:58,882][pkg.utils][INFO] - [rank: 0] Output dir: results/\n"
        "Error executing job with overrides: ['project=']\n"
    )
    diagnosis = diagnose_text(hydra, catalogue=shipped())
    assert (diagnosis.category, diagnosis.signature) == (C.CONFIG_ERROR, "hydra-instantiate-error")


def test_dalis_pipeline_out_of_gpu_memory_and_a_policy_whose_std_diverged() -> None:
    dali = "RuntimeError: Critical error in pipeline: CUDA allocation failed\n"
    assert category(TRACEBACK + dali) == C.OOM
    std = "RuntimeError: normal expects all elements of std >= 0.0\n"
    assert category("Epoch 1/10\n" + TRACEBACK + std) == C.UNKNOWN
    assert diagnose_text(TRACEBACK + std, catalogue=shipped()).signature == "loss-diverged"


def test_clicks_unknown_command_indented_as_posted() -> None:
    usage = "    Usage: main.py [OPTIONS] COMMAND [ARGS]...\n    Try 'main.py --help' for help.\n"
    assert category(usage + "    \n    Error: No such command 'train_synth'.\n") == C.CONFIG_ERROR


def test_ctypes_reporting_an_access_violation_in_a_library_is_a_native_crash() -> None:
    ctypes = "OSError: exception: access violation reading 0xFFFFFFFFFFFFFFE8\n"
    assert category(TRACEBACK + ctypes) == C.SEGFAULT_ABORT


def test_arrow_running_out_of_ram_is_the_host() -> None:
    arrow = TRACEBACK + "pyarrow.lib.ArrowMemoryError: malloc of size 64 failed\n"
    assert category(arrow) == C.HOST_OOM


def test_degenerate_boxes_in_detr_box_code_are_a_diverged_run_not_a_setup_mistake() -> None:
    frame = '  File "/detr/util/box_ops.py", line 51, in generalized_box_iou\n'
    check = "    assert (boxes1[:, 2:] >= boxes1[:, :2]).all()\n"
    diagnosis = diagnose_text(TRACEBACK + frame + check + "AssertionError\n", catalogue=shipped())
    assert (diagnosis.category, diagnosis.signature) == (C.UNKNOWN, "degenerate-boxes-frame")
    # the same assertion elsewhere is an exception no signature knows
    other = '  File "/data/check.py", line 3, in check_boxes\n    assert len(x) > 0\n'
    assert category(TRACEBACK + other + "AssertionError\n") == C.CONFIG_ERROR


def test_a_printed_training_loss_means_the_job_trained() -> None:
    trained = "INFO:root:Epoch: 1, learning rate: 0.0001, train loss: 0.6932\n"
    assert category(trained + TRACEBACK + "IndexError: list index out of range\n") == C.UNKNOWN
    # a validation loss alone is not a training step
    untrained = "Epoch: 1, val_loss: 0.7\n"
    assert category(untrained + TRACEBACK + "IndexError: list index\n") == C.CONFIG_ERROR


def test_io_and_numeric_exceptions_are_not_config_errors() -> None:
    for line in (
        "RuntimeError: write(): fd 29 failed with Input/output error",
        "FloatingPointError: Minimum loss.",
        "Exception: The wandb backend process has shutdown",
        "RuntimeError: svd_cuda: the updating process of SBDSDC did not converge (error: 11)",
        "OSError: [Errno 122] Disk quota exceeded",
        "torch._C._LinAlgError: linalg.svd: The algorithm failed to converge because the input "
        "matrix is ill-conditioned",
        "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed",
        "tensorflow.python.framework.errors_impl.DeadlineExceededError: Deadline Exceeded",
    ):
        assert category(TRACEBACK + line + "\n") == C.UNKNOWN, line


def test_a_traceback_a_terminal_wrapped_at_its_width_reads_whole() -> None:
    wrapped = (
        "init net\n" + TRACEBACK + '  File "C:\\Users\\me\\pytorch-captcha\\my_dataset.\n'
        'py", line 35, in get_train_data_loader\n'
        "    return DataLoader(dataset, batch_size=captcha_setting.BATCH_SIZE, shuffle=Tr\n"
        "ue)\n"
        '  File "G:\\Anaconda3\\lib\\site-packages\\torch\\utils\\data\\dataloader.\n'
        'py", line 213, in __init__\n'
        "    sampler = RandomSampler(dataset)\n"
        '  File "G:\\Anaconda3\\lib\\site-packages\\torch\\utils\\data\\sampler.py"\n'
        ", line 94, in __init__\n"
        "ValueError: num_samples should be a positive integer value, but got num_samples=\n0\n"
    )
    assert category(wrapped) == C.CONFIG_ERROR


def test_an_exception_python_only_printed_is_not_a_failure() -> None:
    ignored = (
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\n"
        + TRACEBACK
        + "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly\n"
    )
    assert category("Epoch 3/10\n" + ignored) == C.NONE
    retried = "2020-08-04 16:35:53,246 ERROR MainThread [retry.py] Retry attempt failed:\n"
    reset = "ConnectionResetError: [Errno 104] reset\n"
    assert category(retried + TRACEBACK + reset + "Epoch 4/10\n") == C.NONE
    # the same traceback raised is one
    assert category("Epoch 3/10\n" + TRACEBACK + ignored.split("\n", 1)[1]) == (C.DATALOADER_WORKER)
    at_exit = "Error in atexit._run_exitfuncs:\n" + TRACEBACK + "RuntimeError: main thread\n"
    assert category(at_exit) == C.NONE
    warned = "WARNING: Unable to export neural network graph to TensorBoard.\n" + TRACEBACK
    assert category(warned + "RuntimeError: tracer failed\nEpoch 1/10\n") == C.NONE
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert category(warned + oom) == C.OOM  # a cause a signature knows still counts


def test_a_traceback_printed_under_a_warning_or_retry_counts_when_it_ends_the_output() -> None:
    # yolov7 warns, then raises: nothing comes after the traceback, so it ended the job
    warned = "WARNING: Dataset not found, nonexistent paths: ['images/val']\n" + TRACEBACK
    assert category(warned + "Exception: Dataset not found.\n") == C.CONFIG_ERROR
    retried = "ERROR MainThread [retry.py] Retry attempt failed:\n" + TRACEBACK
    assert category(retried + "ConnectionResetError: [Errno 104] reset\n") == C.UNKNOWN
    # redraws of a bar seen before it are not output going on
    bar = "Epoch 1: 100%|##########| 10/10\n"
    assert category("Epoch 3/10\n" + bar + warned + "RuntimeError: x\n" + bar) == C.UNKNOWN
    # decided by what its frames showed: torch.save runs after training
    saving = "WARNING: something\n" + TRACEBACK + SAVE_FRAMES + "TypeError: cannot pickle x\n"
    assert every_way(saving) == {(C.UNKNOWN, 6)}


def test_hydras_exception_line_without_its_frames_ended_the_job() -> None:
    hydra = "Error executing job with overrides: ['model=big']\n"
    hint = "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    missing = "omegaconf.errors.MissingMandatoryValue: Missing mandatory value: data.path"
    assert category(hydra + missing + hint) == C.CONFIG_ERROR
    assert category(hydra + "ValueError: bad value" + hint) == C.CONFIG_ERROR
    assert category("Epoch 3/10\n" + hydra + "ValueError: bad value" + hint) == C.UNKNOWN
    assert category("ValueError: bad value" + hint) == C.NONE  # a lone line output follows
    # its message on the next line, a blank or a bar before the header, rank tags
    driver = "AssertionError: \nFound no NVIDIA driver on your system. Please check that you\n"
    assert every_way(hydra + driver) == {(C.HIP_RUNTIME_INIT, 2)}
    assert every_way(hydra + "   \nValueError: bad" + hint) == {(C.CONFIG_ERROR, 3)}
    assert every_way(" 10/100 [00:01]\r" + hydra + "ValueError: bad" + hint) == {
        (C.CONFIG_ERROR, 2)
    }
    ranked = "[rank0]: " + hydra + "[rank0]: ValueError: bad\n"
    assert every_way(ranked) == {(C.CONFIG_ERROR, 2)}


def test_a_lone_exception_lines_message_at_column_0_when_it_names_a_failure() -> None:
    # torch's _lazy_init raises AssertionError("\nFound no NVIDIA driver on your system...")
    driver = "AssertionError:\nFound no NVIDIA driver on your system. Please check that you\n"
    assert category(driver + "have an NVIDIA GPU and installed a driver\n") == (C.HIP_RUNTIME_INIT)
    # a line at column 0 that names nothing is output going on
    assert category("AssertionError:\nsomething went wrong\nmore output\n") == C.NONE
    # what the joined line names is lived through when training advances after it
    memory = "Epoch 1/10 loss 0.3\nValueError:\nCannot allocate memory (12)\n"
    assert category(memory + "Epoch 2/10 loss 0.2\n") == C.NONE
    assert category(memory) == C.HOST_OOM


def test_an_unknown_exception_in_torchs_cuda_lazy_init_is_the_runtime() -> None:
    frames = (
        '  File "/venv/lib/python3.10/site-packages/torch/cuda/__init__.py", line 302, '
        "in _lazy_init\n    torch._C._cuda_init()\n"
    )
    assert category(TRACEBACK + frames + "RuntimeError: Unexpected error from cudaGe") == (
        C.HIP_RUNTIME_INIT
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "E tensorflow/stream_executor/cuda/cuda_dnn.cc:378] Loaded runtime CuDNN library: "
            "7201 (compatibility version 7200) but source was compiled with 7004",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Call aclInit(nullptr) failed : 507008 at file backends/npu/runtime/runtime.cc",
            C.HIP_RUNTIME_INIT,
        ),
        ("已放弃 (核心已转储)", C.SEGFAULT_ABORT),
        ("[1]+  Hangup                  python train.py", C.KILLED),
        (
            "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize "
            "process group for rank: 1, key: store_based_barrier_key:1 (world_size=2, "
            "worker_count=1, timeout=0:30:00)",
            C.NCCL_DISTRIBUTED,
        ),
        ("ssh: connect to host 10.0.0.7 port 12345: Connection refused", C.NCCL_DISTRIBUTED),
        ("段错误 (核心已转储)", C.SEGFAULT_ABORT),
        (
            "Validating:   0%|          | 0/4071 [00:00<?, ?it/s]段错误 (核心已转储)",
            C.SEGFAULT_ABORT,
        ),
        (
            "[ERROR] PRE_ACT(54175):2024-10-22 [mindspore/ccsrc/backend/common/mem_reuse/"
            "mem_dynamic_allocator.cc:392] x] used : 293 plus alloc size : 30 is more than total "
            "mem size : 294.",
            C.OOM,
        ),
        (
            "!!! Exception during processing !!! Native API returns: 20 "
            "(UR_RESULT_ERROR_DEVICE_LOST)",
            C.GPU_MEMORY_FAULT,
        ),
        ("GGML_ASSERT: ggml-alloc.c:116: tensor->data == NULL", C.SEGFAULT_ABORT),
        ("src/tcmalloc.cc:332] Attempt to free invalid pointer 0x7ffdb8479460", C.SEGFAULT_ABORT),
        (
            "Failed to connect to client mesh master: heap-base.europe-west4-a.c.x.internal:52997",
            C.NCCL_DISTRIBUTED,
        ),
        ("Met Exceptions:\nNo OpenCL device found", C.HIP_RUNTIME_INIT),  # LightGBM's learner
        (
            "Could not locate zlibwapi.dll. Please make sure it is in your library path!",
            C.HIP_RUNTIME_INIT,
        ),
        ("  what():  dpcppSetDevice: device_id is out of range", C.HIP_RUNTIME_INIT),
        (
            "Cuda failure 217 'peer access is not supported between these two devices'",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "OOM when allocating tensor with shape[25088,4096] and type float on "
            "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc [Op:Add]",
            C.OOM,
        ),
        (
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: "
            "2 (pid: 11410) of binary: /opt/conda/bin/python",
            C.UNKNOWN,
        ),
        (
            "F0315 15:02:10.932755 32655 memcpy.cpp:38] Check failed: cudaMemcpyAsync(dst, src, "
            "count, cudaMemcpyDefault, stream) : an illegal memory access was encountered (77)",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "OOM when allocating tensor with shape[25088,4096] and type float on "
            "/job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu [Op:Add]",
            C.HOST_OOM,
        ),
        (
            "2021-07-13 22:54:35.547805: F tensorflow/core/common_runtime/dml/dml_adapter_impl.cc"
            ":305] HRESULT failed with 0xd0000001: DXCoreCreateAdapterFactory(IID_PPV_ARGS(&f))",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "[libprotobuf FATAL dml_command_recorder.cc:392] CHECK failed: ((((HRESULT)(("
            "dml_device_->GetDeviceRemovedReason()))) >= 0)) == (true):",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "(trainer:404) WARNING: The gradients at all steps are invalid in this epoch. "
            "Something seems wrong. This training was stopped at 2epoch",
            C.UNKNOWN,
        ),
    ],
)
def test_last_lines_without_a_trigger_word(line: str, expected: str) -> None:
    assert category("Epoch 2/10\n" + line + "\n") == expected


def test_a_caught_oserror_printed_by_a_job_that_goes_on_is_no_failure() -> None:
    caught = "[Errno 2] No such file or directory: 'cache/feats.pkl'\n"
    assert category("Loading data\n" + caught + "Building features\nDone.\n") == C.NONE


@pytest.mark.parametrize(
    "line",
    [
        "Target -1 is out of bounds.",
        " [Errno 2] No such file or directory: './train_data/train_rec_gt.txt'",
        "Can't run without a checkpoint. Find and place a .ckpt or .safetensors file into any of "
        "those locations. The program will exit.",
    ],
)
def test_last_lines_without_a_trigger_word_that_are_setup_mistakes(line: str) -> None:
    assert category("Loading data\n" + line + "\n") == C.CONFIG_ERROR
    # after a training step, what stopped the run is no longer its setup
    assert category("Epoch 2/10\n" + line + "\n") == C.UNKNOWN


def test_the_line_above_a_native_abort_is_read_for_what_the_program_reported() -> None:
    fatal = (
        "F0729 12:58:37.236422 109 stream_executor_util.cc:504] Could not create "
        "RepeatBufferKernel: INTERNAL: Failed call to cudaGetFuncBySymbol: no kernel image is "
        "available for execution on the device\n"
    )
    stack = "*** Check failure stack trace: ***\n" + "    @     0xffff34829840  absl::x()\n" * 60
    assert every_way(fatal + stack) == {(C.HIP_RUNTIME_INIT, 1)}
    assert every_way("x\n" + fatal + "\n\n" + stack) == {(C.HIP_RUNTIME_INIT, 2)}
    finding = LiveClassifier(shipped())
    twice = fatal + "Segmentation fault (core dumped)\rSegmentation fault (core dumped)\n"
    found = finding.feed(twice.encode()) + finding.close()
    assert [f.line for f in found if f.category == C.HIP_RUNTIME_INIT] == [1]  # read once
    caffe = (
        "F0623 11:32:24.873178 19713 gpu_memory.hpp:38] Failed to allocate 49152000 bytes on "
        "device 2. Total memory: 12799574016, Free: 21430272, dev_info[2]: total=12799574016\n"
    )
    assert every_way(caffe + stack) == {(C.OOM, 1)}
    # TensorFlow's GPU event poller found an event that failed
    event = "F0000 00:00:1755.1 1 device_event_mgr.cc:226] Unexpected Event status: 1\n"
    assert every_way(event + stack) == {(C.GPU_MEMORY_FAULT, 1)}
    # a line above that names nothing leaves the abort what it is
    assert category("F0729 12:58:37.2 109 a.cc:5] x\n" + stack) == C.SEGFAULT_ABORT


def test_a_barrier_the_ranks_passed_is_not_a_failure() -> None:
    wait = (
        "INFO:torch.distributed.distributed_c10d:Waiting in store based barrier to initialize "
        "process group for rank: 1, key: store_based_barrier_key:1\n"
    )
    assert category("Epoch 1/10\n" + wait + "Epoch 2/10\n") == C.NONE
    done = "INFO:torch.distributed.distributed_c10d:Rank 1: Completed store-based barrier\n"
    assert category(wait + done) == C.NONE
    assert every_way(wait + done + "Loading data\nSegmentation fault (core dumped)\n") == {
        (C.SEGFAULT_ABORT, 4)
    }
    # a traceback under it (the job died waiting) does not excuse it
    assert category(wait + TRACEBACK + '  File "x.py", line 2, in init_process_group\n') == (
        C.NCCL_DISTRIBUTED
    )


def test_review_lines_that_look_like_failures_but_are_not() -> None:
    for line in (
        "Floating point exception handling: enabled",
        "Checking whether the instance was preempted... no",
        "2 Terminated",
        "3 Killed",
        "Status: Killed",
        "Checking whether the node has been preempted",
        "Illegal instruction detected, falling back to generic kernels",
        "Bus error handling disabled",
        (  # ONNX Runtime falls back from TensorRT to CUDA
            "[E:onnxruntime:Default, provider_bridge_ort.cc:1548 TryGetProviderInfo_TensorRT] "
            "onnxruntime::ProviderLibrary::Get() [ONNXRuntimeError] : 1 : FAIL : Failed to load "
            "library libonnxruntime_providers_tensorrt.so with error: libnvinfer.so.8: cannot "
            "open shared object file"
        ),
    ):
        assert category("Epoch 1/10\n" + line + "\nEpoch 2/10\n") == C.NONE, line
    # a deterministic exception that mentions a socket is still a setup mistake
    socket = "AttributeError: module 'socket' has no attribute 'AF_UNIX'\n"
    assert category(TRACEBACK + socket) == C.CONFIG_ERROR
    # a CUDA OOM line does not outrank the kernel's OOM kill or a runtime that cannot start
    cuda = "RuntimeError: CUDA error: out of memory\n"
    kill = "[12345.6] Out of memory: Killed process 4242 (python) total-vm:1kB\n"
    assert category(cuda + kill) == C.HOST_OOM
    image = "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    assert category(cuda + image) == C.HIP_RUNTIME_INIT
    visible = "run.sh: line 2: CUDA_VISIBLE_DEVICES: command not found\n"
    assert category("Loading\n" + visible) == C.CONFIG_ERROR
    # a command the shell did not find, and the job went on: a healthy run
    healthy = "Loading model\nEvaluating 500 images\nmAP 0.41\nDone\n"
    assert category(visible + healthy) == C.NONE
    rows = "Epoch 1/2: 100%|##########| 50/50 [00:05<00:00, loss=0.41, error=0.12]\n"
    assert category("run.sh: line 1: nvidia-smi: command not found\n" + rows) == C.NONE
    assert category("Using CUDA device 0\n" + visible + "Saved -> out/preds.csv\n") == C.NONE
    # a statement of preemption; bash's crash line with the command glued to the signal
    assert category("Epoch 2/10\nThe node was preempted; the job will be requeued\n") == (C.KILLED)
    fpe = 'sig.sh: line 1: 26941 Floating point exceptionpython3 -c "1/0"\n'
    assert category("Epoch 2/10\n" + fpe) == C.SEGFAULT_ABORT
    # whatever blank run stands above the line above, it is read the same
    hydra = "Error executing job with overrides: []\n"
    hint = "\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n"
    assert every_way(hydra + " " * 4100 + "\nValueError: bad" + hint) == {(C.CONFIG_ERROR, 3)}
    warned = "WARNING: x\n" + " " * 4100 + "\n" + TRACEBACK + "KeyError: 'x'\nEpoch 1/10\n"
    assert every_way(warned) == {(C.NONE, None)}
    # a warned traceback's message that goes on on indented lines still ended the job
    detail = "WARNING: x\n" + TRACEBACK + "ValueError: bad\n  detail line\n"
    assert category(detail) == C.CONFIG_ERROR


def test_a_tie_goes_to_the_earliest_line() -> None:
    tail = "rocBLAS warning: Attempting to use hipBLASLt on a unsupported architecture\n"
    fatal = (
        "F0729 12:58:37.2 109 u.cc:504] Failed call to cudaGetFuncBySymbol: no kernel image is "
        "available for execution on the device\n*** Check failure stack trace: ***\n"
    )
    assert every_way(tail + "Loading\n" + fatal) == {(C.HIP_RUNTIME_INIT, 1)}


def test_no_opencl_device_counts_only_where_the_output_ends_with_it() -> None:
    fell_back = "No OpenCL device found\nfalling back to CPU\nEpoch 1/3 loss: 0.5\nDone\n"
    assert category(fell_back) == C.NONE


def test_paddles_cross_entropy_given_a_class_its_head_does_not_have() -> None:
    line = (
        "Error: /paddle/paddle/phi/kernels/gpu/cross_entropy_kernel.cu:1008 Assertion `false` "
        "failed. The value of label expected >= 0 and < 7, or == -100, but got 16.\n"
    )
    assert every_way(line) == {(C.CONFIG_ERROR, 1)}


def test_the_web_uis_launch_check_that_torch_sees_a_gpu() -> None:
    text = (
        TRACEBACK + '  File "launch.py", line 38, in <module>\n'
        "RuntimeError: Error running command.\n"
        'Command: "/sd/venv/bin/python3" -c "import torch; assert torch.cuda.is_available(), '
        "'Torch is not able to use GPU; add --skip-torch-cuda-test to COMMANDLINE_ARGS "
        "variable to disable this check'\"\n"
        "Error code: 1\nstdout: <empty>\nstderr: Traceback (most recent call last):\n"
    )
    assert category(text) == C.HIP_RUNTIME_INIT


def test_a_worker_crash_the_training_goes_on_after_was_lived_through() -> None:
    crash = "ERROR: Unexpected segmentation fault encountered in worker.\n"
    before, after = "Train Epoch: 1515 [70%]\n", "====> Epoch: 1515\nTrain Epoch: 1516 [5%]\n"
    assert category(before + crash + after) == C.NONE
    assert category(before + crash) == C.DATALOADER_WORKER


def test_an_abort_whose_what_names_a_broken_socket_is_a_lost_link() -> None:
    abort = "terminate called after throwing an instance of 'std::system_error'\n"
    assert category(abort + "  what():  Broken pipe\n") == C.NCCL_DISTRIBUTED
    assert category(abort + "  what():  Resource temporarily unavailable\n") == C.SEGFAULT_ABORT


def test_a_model_neither_cached_nor_reachable() -> None:
    hub = (
        "OSError: We couldn't connect to 'https://huggingface.co' to load this model, couldn't "
        "find it in the cached files and it looks like x is not the path to a directory.\n"
        "Checkout your internet connection or see how to run the library in offline mode.\n"
    )
    assert category(hub) == C.CONFIG_ERROR
    gated = "OSError: You are trying to access a gated repo.\nMake sure to have access to it.\n"
    assert category(gated) == C.CONFIG_ERROR


def test_a_click_programs_usage_error_and_a_program_the_shell_cannot_find() -> None:
    usage = "Usage: train.py [OPTIONS]\nTry 'train.py --help' for help.\n\n"
    assert category(usage + "Error: No such option: --epochs\n") == C.CONFIG_ERROR
    missing = "train.sh: line 3: python: command not found\n"
    assert category("Loading config\n" + missing) == C.CONFIG_ERROR
    assert category("Epoch 2/10\n" + missing) == C.UNKNOWN  # after training: not setup
    lmdb = "F0312 18:13:06.1 31210 db_lmdb.hpp:15] Check failed: mdb_status == 0 (2 vs. 0) No "
    assert category(lmdb + "such file or directory\n*** Check failure stack trace: ***\n") == (
        C.CONFIG_ERROR
    )
    ray = "(head, rank=0, pid=1113) bash: torchrun: command not found\n"
    assert category("Launching\n" + ray) == C.CONFIG_ERROR
    env = (
        "ValueError: Error initializing torch.distributed using env:// rendezvous: environment "
        "variable MASTER_ADDR expected, but not set\n"
    )
    assert category(TRACEBACK + env) == C.CONFIG_ERROR
    label = (
        "W tensorflow/core/framework/op_kernel.cc:975] Invalid argument: Received a label "
        "value of 255 which is outside the valid range of [0, 10).\n"
    )
    assert category("Filling queue\n" + label) == C.CONFIG_ERROR


def test_an_exception_that_ended_a_thread_other_than_the_main_one() -> None:
    cancelled = "tensorflow.python.framework.errors_impl.CancelledError: Enqueue cancelled\n"
    thread = "iteration: 200000 loss: 0.0010\nException in thread Thread-1:\n" + TRACEBACK
    assert category(thread + cancelled) == C.NONE  # the thread died, the program did not
    chained = "\nDuring handling of the above exception, another exception occurred:\n\n"
    assert category(thread + cancelled + chained + TRACEBACK + "KeyError: 'x'\n") == C.NONE
    assert category(TRACEBACK + cancelled) == C.CONFIG_ERROR  # raised in the main thread
    # a cause a signature knows still counts, and so does a frame that names one
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert category(thread + oom) == C.OOM
    pin = '  File "/torch/utils/data/_utils/pin_memory.py", line 49, in _pin_memory_loop\n'
    assert category(thread + pin + "ValueError: not enough values to unpack\n") == (
        C.DATALOADER_WORKER
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "RuntimeError: CUDA error: an uncorrectable NVLink error was detected",
            C.GPU_MEMORY_FAULT,
        ),
        ("RuntimeError: CUDA error: operation not supported", C.HIP_RUNTIME_INIT),
        # documented status words of the GPU runtimes and libraries, by what they mean
        ("RuntimeError: CUDA error: device kernel image is invalid", C.HIP_RUNTIME_INIT),
        ("RuntimeError: CUDA error: invalid device symbol", C.HIP_RUNTIME_INIT),
        ("RuntimeError: CUDA error: PTX JIT compiler library not found", C.HIP_RUNTIME_INIT),
        ("RuntimeError: CUDA error: CUDA driver is a stub library", C.HIP_RUNTIME_INIT),
        (
            "RuntimeError: CUDA error: OS call failed or operation not supported on this OS",
            C.HIP_RUNTIME_INIT,
        ),
        ("RuntimeError: HIP error: hipErrorInvalidImage", C.HIP_RUNTIME_INIT),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_VERSION_MISMATCH", C.HIP_RUNTIME_INIT),
        ("CUBLAS_STATUS_ARCH_MISMATCH when calling `cublasCreate(handle)`", C.HIP_RUNTIME_INIT),
        ("HSA_STATUS_ERROR_NOT_INITIALIZED: An API other than hsa_init", C.HIP_RUNTIME_INIT),
        (
            "RuntimeError: Unable to initialize backend 'cuda': INTERNAL: no supported devices "
            "found for platform CUDA",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: CUDA error: operation not supported on global/shared address space",
            C.GPU_MEMORY_FAULT,
        ),
        ("RuntimeError: cuDNN error: CUDNN_STATUS_MAPPING_ERROR", C.GPU_MEMORY_FAULT),
        ("MIOpen Error: miopenStatusAllocFailed", C.OOM),
        ("THCudaCheck FAIL file=/p/THC/THCGeneral.cpp line=405 error=2 : out of memory", C.OOM),
        ("Last error:\nCuda failure 'out of memory'", C.OOM),
        ("free(): double free detected in tcache 2", C.SEGFAULT_ABORT),
        ("*** stack smashing detected ***: terminated", C.SEGFAULT_ABORT),
        ("terminate called without an active exception", C.SEGFAULT_ABORT),
        ("Floating point exception", C.SEGFAULT_ABORT),
        ("Trace/breakpoint trap (core dumped)", C.SEGFAULT_ABORT),
        ("Process finished with exit code -1073741571 (0xC00000FD)", C.SEGFAULT_ABORT),
        (
            "python: malloc.c:2379: sysmalloc: Assertion `(old_top == initial_top (av))' failed.",
            C.SEGFAULT_ABORT,
        ),
        (
            "mpirun noticed that process rank 1 with PID 0 on node n2 exited on signal 7 "
            "(Bus error).",
            C.SEGFAULT_ABORT,
        ),
        (
            "mpirun noticed that process rank 1 with PID 0 on node n2 exited on signal 9 (Killed).",
            C.HOST_OOM,
        ),
        ("RuntimeError: Stop_waiting response is expected", C.NCCL_DISTRIBUTED),
        ("RuntimeError: DataLoader worker exited unexpectedly", C.DATALOADER_WORKER),
        (
            "ERROR: Unexpected BUS error encountered in DataLoader worker. This might be caused "
            "by insufficient shared memory (shm)",
            C.DATALOADER_WORKER,
        ),
        ("MemoryError: bad allocation: cudaErrorMemoryAllocation: out of memory", C.OOM),
        (
            'docker: Error response from daemon: could not select device driver "" with '
            "capabilities: [[gpu]].",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: Native API failed. Native API returns: 20 (UR_RESULT_ERROR_DEVICE_LOST)",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "2020-09-28 10:29:04.8: F tensorflow/core/common_runtime/dml/dml_command_recorder.cc:"
            "366] Check failed: (((HRESULT)((dml_device_->GetDeviceRemovedReason()))) >= 0)",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "CUDA kernel failed : no kernel image is available for execution on the device",
            (C.HIP_RUNTIME_INIT),
        ),
        (
            "RuntimeError: Malloc for kernel output failed, Memory isn't enough, node:Cast-op4",
            C.OOM,
        ),
        (
            "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
            C.UNKNOWN,
        ),
        (
            "Monitored metric val_loss = nan is not finite. Previous best value was 0.123. "
            "Signaling Trainer to stop.",
            C.UNKNOWN,
        ),
        (
            "F1221 14:39:47.1 1 u.cc:517] Failed call to hipGetFuncBySymbol: hipError_t(98)",
            (C.HIP_RUNTIME_INIT),
        ),
        ("71885 Killed                  python -m kauldron.main --cfg=x.py", C.HOST_OOM),
        (
            "WARNING tune.py:716 -- Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray "
            "Tune run. Press CTRL+C (or send SIGINT/SIGKILL/SIGTERM) to skip.",
            C.KILLED,
        ),
        (
            "tensorflow.python.framework.errors_impl.UnknownError:  Failed to get convolution "
            "algorithm. This is probably because cuDNN failed to initialize, so try looking",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: DNN library "
            "initialization failed.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "  what():  [17:54:40] mshadow/./stream_gpu-inl.h:198: Check failed: e == "
            "cudaSuccess CUDA: out of memory",
            C.OOM,
        ),
        (
            "RuntimeError: tensorflow/compiler/xla/xla_client/mesh_service.cc:316 : Check "
            "failed: impl_->channel->WaitForConnected(",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "OSError: /env/lib/libcublas.so.11: symbol free_gemm_select version "
            "libcublasLt.so.11 not defined in file libcublasLt.so.11 with link time reference",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "2024-03-27 06:33:23 [E:onnxruntime:Default, provider_bridge_ort.cc:1548] "
            "onnxruntime::ProviderLibrary::Get() [ONNXRuntimeError] : 1 : FAIL : Failed to load "
            "library libonnxru",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "PreconditionNotMetError: The third-party dynamic library (cudnn64_7.dll) that "
            "Paddle depends on is not configured correctly. (error code is 126)",
            C.HIP_RUNTIME_INIT,
        ),
        ("mpi4py.MPI.Exception: MPI_ERR_TRUNCATE: message truncated", C.NCCL_DISTRIBUTED),
        # the last lines of the output (scope: tail)
        (
            "math_functions.cu:79]  cudaSuccess (77 vs. 0)  an illegal memory access was "
            "encountered",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "2025-04-23 20:35:34.618070: F external/xla/xla/service/gpu/autotuning/"
            "gemm_fusion_autotuner.cc:1099] Non-OK-status: executable.status()",
            C.SEGFAULT_ABORT,
        ),
        (
            "onnxruntime::BFCArena::AllocateRawInternal(size_t, bool) Failed to allocate memory "
            "for requested buffer of size 939524096",
            C.OOM,
        ),
        ("EI0006: 2024-08-05-18:15:21.270.506 Getting socket times out.", C.NCCL_DISTRIBUTED),
        ("RPC: /tensorflow.CoordinationService/RegisterTask", C.NCCL_DISTRIBUTED),
        (
            "E coordination_service.cc:1170] /job:jax_worker/replica:0/task:0 has been set to "
            "ERROR in coordination service: UNAVAILABLE: Task heartbeat timeout.",
            C.NCCL_DISTRIBUTED,
        ),
        ("Connection to 10.0.0.5 closed by remote host.", C.KILLED),
        ("ERROR [12/20 18:16:20 d2.engine.train_loop]: Exception during training:", C.UNKNOWN),
        ("Worker timed out after 120 seconds. This might be caused by ", C.DATALOADER_WORKER),
        (
            "Could not load library libcudnn_cnn_train.so.8. Error: /usr/local/cuda/lib64/"
            "libcudnn_cnn_train.so.8: undefined symbol: _ZN5cudnn3cnn34layerNormFwd",
            C.HIP_RUNTIME_INIT,
        ),
        ("Could not load library cudnn_cnn_infer64_8.dll. Error code 193", C.HIP_RUNTIME_INIT),
        ("RuntimeError: CUDNN_STATUS_NOT_INITIALIZED", C.HIP_RUNTIME_INIT),
        (
            "THCudaCheck FAIL file= torch/extra/cutorch/lib/THC/THCGeneral.c line=70 error=30 : "
            "unknown error",
            C.HIP_RUNTIME_INIT,
        ),
        ("  what():  HIP error: no ROCm-capable device is detected", C.HIP_RUNTIME_INIT),
        (
            "THCudaCheck FAIL file=/pytorch/torch/lib/THC/THCGeneral.c line=66 error=30 : "
            "unknown error",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "TVMError: ROCM HIP Error: hipModuleLoadData(&(module_[device_id]), data_.c_str()) "
            "failed with error: shared object initialization failed",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Error during Intel loadBinary: ZE_RESULT_ERROR_MODULE_BUILD_FAILURE",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: Native API failed. Native API returns: -996 (Function exists but "
            "address is not available)",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "ExternalError: Hip error(1), invalid arguement. (at rocm_info.cc: 137)",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "EH9999  [Init][Env]init env failed![FUNC:ReportInnerError][FILE:log_inner.cpp]",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "open device 0 failed, runtime result = 107001.[FUNC:ReportCallError]",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "ray.exceptions.RayTaskError(NcclError): ray::Worker.compute() (pid=2574988)",
            C.NCCL_DISTRIBUTED,
        ),
        ("PyTorch no longer supports this GPU because it is too old.", C.HIP_RUNTIME_INIT),
        (
            "ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "E cuda_driver.cc:1125] failed to load PTX text as a module: "
            "CUDA_ERROR_UNSUPPORTED_PTX_VERSION: the provided PTX was compiled with an "
            "unsupported toolchain.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "ggml_cuda_init: failed to initialize ROCm: no ROCm-capable device is detected",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "ptxas application ptx input, line 9; fatal   : Unsupported .version 7.3; current "
            "version is '7.2'",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Exception in device=TPU:6: tensorflow/compiler/xla/xla_client/mesh_service.cc:294 : "
            "Failed to meet rendezvous 'loss_reduce': Socket closed (14)",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "13:54:28 ERROR    Uncaught exception: Could not allocate memory: C:\\tiny-cuda-nn/"
            "gpu_memory.h:112 cudaMalloc(&rawptr, n_bytes+DEBUG_GUARD_SIZE*2) failed with",
            C.OOM,
        ),
        (
            "dgl._ffi.base.DGLError: [12:48:37] /opt/dgl/src/array/cuda/rowwise_sampling.cu:332: "
            "Check failed: e == cudaSuccess || e == cudaErrorCudartUnloading: CUDA: an illegal "
            "memory access was encountered",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "RuntimeError: Bad StatusOr access: RESOURCE_EXHAUSTED: Error allocating device "
            "buffer: Attempting to allocate 129.50M. That was not possible.",
            C.OOM,
        ),
        (
            "init.cc:1582 NCCL WARN Cuda failure 'CUDA driver version is insufficient for CUDA "
            "runtime version'",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "nrtd[1]: [NRTD:nrtd_main] Failed to initialize devices: , attempt: 1",
            C.HIP_RUNTIME_INIT,
        ),
        (
            " 332066:332438 ERROR   ENC:ncclBootstrapRecv   [nec_dev 20] bootstrapSend failed",
            C.NCCL_DISTRIBUTED,
        ),
        ("ERROR:tensorflow:Model diverged with loss = NaN.", C.UNKNOWN),
        (
            "RESOURCE_EXHAUSTED: Ran out of memory in memory space vmem while allocating on stack",
            C.OOM,
        ),
        (
            "RuntimeError: Could not allocate tensor with 2123366400 bytes. There is not enough "
            "GPU video memory available!",
            C.OOM,
        ),
        (
            "libc++abi: terminating due to uncaught exception of type std::runtime_error: "
            "[malloc_or_wait] Unable to allocate 9663676416 bytes.",
            C.OOM,
        ),
        ("level_zero backend failed with error: 39 [UR_RESULT_ERROR_OUT_OF_DEVICE_MEMORY]", C.OOM),
        (
            "EE9999  fftsplus task execute failed, dev_id=5, err_type=13[hccl fftsplus timeout]"
            "[FUNC:GetError][FILE:stream.cc][LINE:1512]",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "Kernel task happen error, retCode=0x26, [aicore exception].[FUNC:PreCheckTaskErr]",
            C.GPU_MEMORY_FAULT,
        ),
        ("Error: llama runner process has terminated: signal: killed", C.HOST_OOM),
        (
            "0%|   | 0/19 [00:00<?, ?it/s]/AppleInternal/Library/BuildRoots/91a3/Library/Caches/"
            "MPSNDArrayGatherND.mm:256: failed assertion `Rank of updates array (1) must be'",
            C.SEGFAULT_ABORT,
        ),
        (
            "subprocess.CalledProcessError: Command '['python.exe', 'flux_train.py']' returned "
            "non-zero exit status 3221225477",
            C.SEGFAULT_ABORT,
        ),
        (
            "E1027 15:11:27.184481 3266602 cuda_dnn.cc:456] Loaded runtime CuDNN library: 9.10.1 "
            "but source was compiled with: 9.13.1.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Memory on the node (IP: 10.1.180.84, ID: ba65c80c8aec6b1c) where the task (task ID: "
            "d221d262, name=head, rank=0,, pid=4503, memory used",
            C.HOST_OOM,
        ),
        (
            "-[IOGPUMetalCommandBuffer validate]:213: failed assertion `commit an already "
            "committed command buffer'",
            C.SEGFAULT_ABORT,
        ),
        (
            "xe 0000:2c:00.0: [drm] GT0: Engine reset: engine_class=ccs, logical_mask: 0x1",
            C.GPU_MEMORY_FAULT,
        ),
        ("[ERROR]  acl set device 0 failed, errorCode = 507033", C.HIP_RUNTIME_INIT),
        (
            "E0808 00:12:51.413208   31287 tpu_hal.cc:249] Failed to initialize TPU system with "
            "error: FAILED_PRECONDITION: Couldn't mmap",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: SetPrecisionMode: NPU function error: at_npu::native::AclSetCompileopt("
            "aclCompileOpt::ACL_PRECISION_MODE, precision_mode), error code is 500001",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Loading shards:   0%|     | 0/2 [00:00<?, ?it/s]zsh: killed     python a.py",
            C.HOST_OOM,
        ),
        (
            "A process in the process pool was terminated abruptly while the future was running "
            "or pending.",
            C.HOST_OOM,
        ),
        (
            "CUDA Runtime error cudaEventCreate(&begin_) # the provided PTX was compiled with an "
            "unsupported toolchain., code = cudaErrorUnsupportedPtxVersion [ 222 ]",
            C.HIP_RUNTIME_INIT,
        ),
        ("Error named symbol not found at line 90 in file ops.cu", C.HIP_RUNTIME_INIT),
        (
            "RuntimeError: Attempting to use hipBLASLt on a unsupported architecture!",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "[W] [TRT] CUDA initialization failure with error: 222. Please check your CUDA "
            "installation",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: Native API failed. Native API returns: -1102 (PI_ERROR_UNINITIALIZED)",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=10.2",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "E tensorflow/stream_executor/cuda/cuda_driver.cc:1204] could not retrieve CUDA device "
            "count: CUDA_ERROR_NOT_INITIALIZED: initialization error",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "kernel: amdgpu 0000:c2:00.0: ring gfx_0.0.0 timeout, signaled seq=166926",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "[W1019 18:43:28.514 4242 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=2)"
            ": Connection reset by peer",
            C.NCCL_DISTRIBUTED,
        ),
        (
            ':{"description":"Error received from peer ipv4:10.244.14.61:2222",'
            '"grpc_message":"Socket closed","grpc_status":14}',
            C.NCCL_DISTRIBUTED,
        ),
        (
            "F0116 10:18:51.745707 14095 syncedmem.hpp:33] Check failed: *ptr host allocation of "
            "size 29935616 failed",
            C.HOST_OOM,
        ),
        (
            "Refer to the documentation on how to address the out of memory issue: "
            "https://docs.ray.io/en/latest/ray-core/scheduling/ray-oom-prevention.html.",
            C.HOST_OOM,
        ),
        (
            "E pjrt_stream_executor_client.cc:2085] Execution of replica 0 failed: "
            "RESOURCE_EXHAUSTED: Attempting to reserve 11.35G at the bottom of memory.",
            C.OOM,
        ),
        (
            "ray.memory_monitor.RayOutOfMemoryError: More than 95% of the memory on node Local "
            "is used (15.98 / 16.82 GB).",
            C.HOST_OOM,
        ),
        (
            "rocBLAS error: Cannot read C:\\Program Files\\AMD\\ROCm\\5.7\\bin\\rocblas\\library\\"
            "/TensileLibrary.dat: No such file or directory for GPU arch : gfx1032",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "trainer/0 [1]:[E socket.cpp:610] [c10d] The client socket has failed to connect "
            "to any network address of (05, 40323).",
            C.NCCL_DISTRIBUTED,
        ),
        ("tests/gpt2_test.py Fatal Python error: Aborted", C.SEGFAULT_ABORT),
        ("RuntimeError: Triton Error [CUDA]: misaligned address", C.GPU_MEMORY_FAULT),
        (
            "src/storage/./pooled_storage_manager.h:111: cudaMalloc failed: out of memory",
            C.OOM,
        ),
        (
            "*** Error in python': free(): corrupted unsorted chunks: 0x00007f3e9009cdd0 ***",
            (C.SEGFAULT_ABORT),
        ),
        (
            "An unexpected error occurred during CUDA execution. The CUDA error was:\n"
            "all CUDA-capable devices are busy or unavailable",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Exception in main training loop: out of memory to allocate 205520896 bytes (total "
            "16068929536 bytes)",
            C.OOM,
        ),
        (
            "systemd-oomd[588]: Killed /user.slice/app.slice/vte-spawn-f65.scope due to memory "
            "pressure for /user.slice being 95.63% > 50.00% for > 20s with reclaim activity",
            C.HOST_OOM,
        ),
        (
            'Error received from peer ipv4:10.0.0.2:37937 "grpc_message":"Collective ops is '
            "aborted by: Socket closed",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "stream_gpu-inl.h:55: Check failed: e == cudaSuccess CUDA: an illegal memory access "
            "was encountered",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "Error: cudaGetDeviceCount failed in paddle::platform::GetCUDADeviceCountImpl, error "
            "code : 35",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "stderr: nvidia-container-cli: initialization error: nvml error: driver/library "
            "version mismatch: unknown",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "CUDA backend failed to initialize: Found cuDNN version 8600, but JAX was built "
            "against version 8906, which is newer.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "E cuda_driver.cc:314] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable "
            "device is detected",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "Check failed: error == cudaSuccess (46 vs. 0)  all CUDA-capable devices are busy "
            "or unavailable",
            C.HIP_RUNTIME_INIT,
        ),
        ("CUDA kernel failed : invalid device function", C.HIP_RUNTIME_INIT),
        (
            "W platform_util.cc:198] unable to create StreamExecutor for CUDA:0: INTERNAL: failed "
            "call to cuDevicePrimaryCtxRetain: CUDA_ERROR_UNKNOWN: unknown error",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION: No visible GPU devices.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. "
            "Barrier_id: PjRT_Client_Connect.",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "OSError: (External)  Nccl error, unhandled cuda error  (at collective_helper.cc:100)",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "[1763]   1%|▏   | 24/1752 [01:08<1:22:56,  2.88s/it][rank5]:[E602 11:17:52.18 "
            "ProcessGroupNCCL.cpp:632] [Rank 5] Watchdog caught collective operati",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "slurmstepd: error: StepId=7284712.0 exceeded memory limit (1295467052032 > "
            "1288490188800), being killed",
            C.HOST_OOM,
        ),
        (
            "(raylet) node_manager.cc:3277: 2 Workers (tasks / actors) killed due to memory "
            "pressure (OOM), 0 Workers crashed due to other reasons",
            C.HOST_OOM,
        ),
        ("CUDA Error: an illegal instruction was encountered", C.GPU_MEMORY_FAULT),
        (
            "RuntimeError: InnerRunOpApi:OpParamMaker.cpp:281 OPS function error: "
            "HcclAllreduce, error code is 6",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "  what():  unhandled cuda error at [/paddle/fluid/platform/nccl_helper.h:70]",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on "
            "memory.",
            C.HOST_OOM,
        ),
        (
            "E cuda_driver.cc:152] failed call to cuInit: INTERNAL: CUDA error: Failed call to "
            "cuInit: CUDA_ERROR_UNKNOWN: unknown error",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: cuda runtime error (802) : system not yet initialized at THCGeneral.cpp",
            C.HIP_RUNTIME_INIT,
        ),
        ("E ../checkpoint/model.ckpt-10051.tempstate138; No space left on device", C.UNKNOWN),
        (
            "pytorch_lightning.utilities.exceptions.MisconfigurationException: CUDAAccelerator "
            "can not run on your system since the accelerator is not available.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "E tensorflow/core/common_runtime/ring_reducer.cc:369] Aborting RingReduce with "
            "Unavailable: Socket closed",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "mxnet.base.MXNetError: [14:02:47] src/engine/threaded_engine.cc:320: Check failed: "
            "device_count_ > 0 (-1 vs. 0) GPU usage requires at least 1 GPU",
            C.HIP_RUNTIME_INIT,
        ),
        # the end of a tf.data epoch, logged by every TensorFlow run: not a failure
        (
            "W base_collective_executor.cc:217] BaseCollectiveExecutor::StartAbort Out of range: "
            "End of sequence",
            C.NONE,
        ),
        ("The node was low on resource: memory. Container train was using 61Gi", C.HOST_OOM),
        ("RuntimeError: Resource exhausted: Failed to allocate request for 100.00MiB", C.OOM),
        (
            "*** Error in `/opt/conda/bin/python': malloc(): memory corruption (fast): "
            "0x000055a9cabee518 ***",
            C.SEGFAULT_ABORT,
        ),
        # an old NCCL's WARN that InfiniBand is missing: it falls back to sockets
        ("0623:350:457 [0] misc/ibvwrap.cu:60 WARN Failed to open libibverbs.so[.1]", C.NONE),
        (
            "[ 2742.46] [drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring page1 timeout, signaled "
            "seq=2216, emitted seq=2218",
            C.GPU_MEMORY_FAULT,
        ),
        ("[ 2742.46] amdgpu 0000:2b:00.0: amdgpu: GPU reset begin!", C.GPU_MEMORY_FAULT),
        (
            "[  603.02] [drm:amdgpu_device_ip_init [amdgpu]] *ERROR* hw_init of IP block <psp> "
            "failed -22",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: CUDA failed with error forward compatibility was attempted on non "
            "supported HW",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "UnknownError:  ncclCommInitRank failed: unhandled system error",
            C.NCCL_DISTRIBUTED,
        ),
        # c10 frees an event on a context a kernel's fault already lost
        (
            "[W CUDAGuardImpl.h:124] Warning: CUDA warning: an illegal memory access was "
            "encountered (function destroyEvent)",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "[rank0]:[W1025 10:12:01.123 1 c10/cuda/CUDAGuardImpl.h:119] Warning: CUDA warning: "
            "an illegal memory access was encountered (function destroyEvent)",
            C.GPU_MEMORY_FAULT,
        ),
        # a spawned worker cannot find a function defined inside another one
        (
            "AttributeError: Can't get local object 'main.<locals>.worker_init_fn'",
            C.DATALOADER_WORKER,
        ),
        # cuBLAS cannot run the operation on this device (a translation layer, an old card)
        (
            "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling "
            "`cublasLtMatmulAlgoGetHeuristic( ltHandle, computeDesc.descriptor(), ...)`",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "RuntimeError: Unknown backend rocm. Available backends are ['cpu']",
            C.HIP_RUNTIME_INIT,
        ),
        # torch_xla on a TPU: device memory too fragmented or too small
        (
            "2021-11-10 17:01:24.065497: W tensorflow/core/framework/op_kernel.cc:1692] "
            "OP_REQUIRES failed at tpu_execute_op.cc:266 : Resource exhausted: Attempting to "
            "reserve 5.88G at the bottom of memory. That was not possible.",
            C.OOM,
        ),
        (
            "libc++abi: terminating due to uncaught exception of type std::runtime_error: "
            "[METAL] Command buffer execution failed: Internal Error (0000000e:Internal Error)",
            C.GPU_MEMORY_FAULT,
        ),
        (
            "Exception: Skipped 50 iterations in a row due to Overflow - Exiting training.",
            C.UNKNOWN,
        ),
        # Ultralytics asked for a GPU that torch cannot see (a CPU build, no driver)
        (
            "ValueError: Invalid CUDA 'device=0' requested. Use 'device=cpu' or pass valid CUDA "
            "device(s) if available, i.e. 'device=0' or 'device=0,1,2,3' for Multi-GPU.",
            C.HIP_RUNTIME_INIT,
        ),
        # thrust's exception from a kernel that faulted, under "terminate called"
        (
            "  what():  /src/predictor/gpu_predictor.cu(322): unspecified launch failure",
            C.GPU_MEMORY_FAULT,
        ),
        # Windows: 0xC0000094, an integer division by zero in native code
        (
            "torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with exit "
            "code 3221225620",
            C.SEGFAULT_ABORT,
        ),
        ("Process finished with exit code -1073741676 (0xC0000094)", C.SEGFAULT_ABORT),
        # the C++ stack of an exception the NCCL watchdog thread threw
        (
            "frame #3: c10d::ProcessGroupNCCL::ncclCommWatchdog() + 0x119 (0x7f65160c9e79 in "
            "/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so)",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "Exception raised from ncclCommWatchdog at /opt/conda/conda-bld/pytorch/work/torch/"
            "csrc/distributed/c10d/ProcessGroupNCCL.cpp:1418 (most recent call first):",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "node5:240:240 [6] misc/socket.cc:533 NCCL WARN socketPollConnect: Connect to "
            "10.0.0.4<56849> returned 113(No route to host) errno 115",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "w-0:16:63 [0] NCCL INFO Call to connect returned Connection refused, retrying",
            C.NCCL_DISTRIBUTED,
        ),
        ("Epoch 1 of 10:   0%|    | 0/10 [00:00<?, ?it/szsh: bus error  python", C.SEGFAULT_ABORT),
        ("[1]    47124 abort      python segment/train.py --img 640", C.SEGFAULT_ABORT),
        ("RuntimeError: HIP error: hipErrorLaunchOutOfResources", C.GPU_MEMORY_FAULT),
        ("RuntimeError: Error: out of memory while building the graph", C.OOM),
        ("tensorflow ... OOM error while running the step", C.OOM),
        ("RuntimeError: NCCL communicator hit an error on rank 3", C.NCCL_DISTRIBUTED),
        ("torch.distributed.DistError: store wait failed", C.NCCL_DISTRIBUTED),
        (
            "[E ProcessGroupNCCL.cpp:1316] [PG 5 Rank 0] Heartbeat monitor timed out!",
            (C.NCCL_DISTRIBUTED),
        ),
        (
            "h:1:2 [1] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer",
            (C.NCCL_DISTRIBUTED),
        ),
        ("  exitcode  : -11 (pid: 4242)", C.SEGFAULT_ABORT),
        ("*** SIGSEGV received at time=1700000000 on cpu 3 ***", C.SEGFAULT_ABORT),
        ("[launch.py:350:main] Process 4242 exits with return code = -11", C.SEGFAULT_ABORT),
        ("Caught signal 11 (Segmentation fault: address not mapped to object)", C.SEGFAULT_ABORT),
        ("Abort trap: 6", C.SEGFAULT_ABORT),
        ('*** Aborted at 1700000000 (unix time) try "date -d @1700000000"', C.SEGFAULT_ABORT),
        ("RuntimeError: unable to mmap 4096 bytes: Cannot allocate memory", C.HOST_OOM),
        ("Process finished with exit code 130", C.KILLED),
        ("std::bad_alloc", C.HOST_OOM),
        (
            "math_functions.cu:79] Check failed: error == cudaSuccess (74 vs. 0)  misaligned",
            (C.GPU_MEMORY_FAULT),
        ),
        ("11/06/2019 14:54:53  L    Simulation: preempting job", C.KILLED),
        ("  Process exceeded running time limit (4h)", C.KILLED),
        ("forrtl: error (200): program aborting due to control-C event", C.KILLED),
        (
            "enforce fail at CPUAllocator.cpp:56] posix_memalign(&data, a, n) == 0. 12 vs 0",
            (C.HOST_OOM),
        ),
        (
            "THCudaCheck FAIL file=roi_align_kernel.cu line=140 error=48 : unrecognized error",
            (C.HIP_RUNTIME_INIT),
        ),
        ("WARNING: non-finite loss, ending training  tensor([nan, 0.2])", C.UNKNOWN),
        ("  exitcode  : -9 (pid: 4242)", C.HOST_OOM),
        ("165376/296960 [=====>.....] - ETA: 365s - loss: 2.1371Killed", C.HOST_OOM),
        (
            "[CUDA ERROR] at file train_gpt2.cu:501:\nno CUDA-capable device is detected",
            C.HIP_RUNTIME_INIT,
        ),
        ("2026-06-29T14:19:56 [info] double free or corruption (!prev)", C.SEGFAULT_ABORT),
        ("terminate called after throwing an instance of 'gloo::IoException'", C.NCCL_DISTRIBUTED),
        ("RuntimeError: Pin memory thread exited unexpectedly", C.DATALOADER_WORKER),
        (
            "RuntimeError: $ Torch: not enough memory: you tried to allocate 2GB. Buy new RAM! at "
            "/pytorch/aten/src/TH/THGeneral.cpp:201",
            C.HOST_OOM,
        ),
        (
            "E cuda_driver.cc:538] failed to load PTX text as a module: CUDA_ERROR_INVALID_IMAGE: "
            "device kernel image is invalid",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "CUDA Runtime error create_frustum_kernel # a PTX JIT compilation failed, code = "
            "cudaErrorInvalidPtx [ 218 ] in file camera-geometry.cu:209",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "2024-11-22T13:56:02Z  WARN ThreadId(108) environment.rs:419: CUDA failure 700: an "
            "illegal memory access was encountered ; GPU=0",
            C.GPU_MEMORY_FAULT,
        ),
        ("2025-01-01T10:31:54Z Windows fatal exception: code 0xc0000374", C.SEGFAULT_ABORT),
        (
            "Timed out initializing process group in store based barrier on rank: 0, for key: "
            "store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:02:00)",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "2025-04-05 18:39:10.838153: F external/xla/xla/pjrt/distributed/client.h:80] "
            "Terminating process because the JAX distributed service detected fatal errors.",
            C.NCCL_DISTRIBUTED,
        ),
        (
            "SystemError: (Fatal) DataLoader process (pid 10222) exited is killed by signal: "
            "Killed. (at /paddle/fluid/imperative/data_loader.cc:181)",
            C.DATALOADER_WORKER,
        ),
        (
            "F0407 01:31:07.673615  5759 math_functions.cpp:250] Check failed: a <= b (0 vs. -1)",
            C.SEGFAULT_ABORT,
        ),
        (
            "F0407 01:31:07.67  5759 common.cpp:152] Check failed: error == cudaSuccess (46 vs. "
            "0)  all CUDA-capable devices are busy or unavailable",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "onnxruntime::CudaCall CUDA failure 2: out of memory ; GPU=0 ; hostname=DESKTOP ; "
            "expr=cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);",
            C.OOM,
        ),
        (
            "nvidia-container-cli: initialization error: cuda error: no cuda-capable device is "
            "detected",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "GPUAccelerator can not run on your system since the accelerator is not available.",
            C.HIP_RUNTIME_INIT,
        ),
        (
            "libc++abi: terminating due to uncaught exception of type std::runtime_error: [METAL] "
            "Command buffer execution failed: Insufficient Memory "
            "(00000008:kIOGPUCommandBufferCallbackErrorOutOfMemory)",
            C.OOM,
        ),
        (
            "xgboost.core.XGBoostError: Memory allocation error on worker 0: std::bad_alloc: "
            "out_of_memory: CUDA error at: /opt/conda/include/rmm/mr/device/cuda_memory_resource",
            C.OOM,
        ),
        (
            "h:74737:75914 [1] transport/net_socket.cc:488 NCCL WARN NET/Socket : peer "
            "10.0.5.194<41988> message truncated : receiving 4 bytes instead of 2.",
            C.NCCL_DISTRIBUTED,
        ),
        ("worker 3 was stopped with SIGKILL", C.HOST_OOM),
        ("qsub: job 1234.server killed: walltime 86440 exceeded limit 86400", C.KILLED),
        ("Job was preempted", C.KILLED),
        ("Exit code: 143", C.KILLED),
        ("Got signal: SIGTERM", C.KILLED),
        ("Container killed by YARN for exceeding memory limits", C.HOST_OOM),
        ("  exitcode  : -15 (pid: 4242)", C.KILLED),
        ("[rank: 3] Received SIGTERM: 15", C.KILLED),
        (
            "slurmstepd: error: *** STEP 42.0 CANCELLED AT 2024-01-01T00:00:00 DUE TO PREEMPTION",
            (C.KILLED),
        ),
    ],
)
def test_a_line_naming_a_family_decides_when_nothing_specific_does(
    line: str, expected: str
) -> None:
    assert category("Epoch 2/10\n" + line + "\n") == expected


def test_family_lines_rank_below_specific_causes() -> None:
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert category(oom + "  exitcode  : -6 (pid: 1)\n") == C.OOM
    assert category(oom + "RuntimeError: CUDA error: something new\n") == C.OOM
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered\n"
    assert category("[E ProcessGroupNCCL.cpp:1484] watchdog: " + illegal) == C.GPU_MEMORY_FAULT


def test_harmless_lines_that_name_a_family() -> None:
    for line in (
        "h:1:1 [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]",
        "Setting SIGTERM handler for graceful shutdown",
        "[W socket.cpp:601] [c10d] The client socket has failed to connect to [::1]:29500",
        "UserWarning: CUDA error: the initialisation was retried",
        "shutdown process 412854 via Signals.SIGINT, forcefully exiting via Signals.SIGKILL",
        "MIOpen(HIP): Error [FlushUnsafe] File is unreadable: /home/u/.config/miopen//x.ufdb.txt",
    ):
        assert category("Epoch 2/10\n" + line + "\nEpoch 3/10\n") == C.NONE, line
        assert category(line + "\n") == C.NONE, line


def test_a_lost_connection_in_a_distributed_job_is_a_distributed_failure() -> None:
    frame = '  File "/venv/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line 3\n'
    reset = "ConnectionResetError: [Errno 104] Connection reset by peer\n"
    assert category("Epoch 2/10\n" + TRACEBACK + frame + reset) == C.NCCL_DISTRIBUTED
    ranked = "[rank1]: " + TRACEBACK.replace("\n  ", "\n[rank1]:   ")
    assert category("Epoch 2/10\n" + ranked + "[rank1]: " + reset) == C.NCCL_DISTRIBUTED
    # in a job of one process it is the network of something else: unknown
    assert category("Epoch 2/10\n" + TRACEBACK + reset) == C.UNKNOWN


def test_a_gpu_runtime_that_did_not_start_explains_a_later_unknown_death() -> None:
    warned = (
        "/venv/torch/cuda/__init__.py:88: UserWarning: CUDA initialization: Unexpected error "
        "from cudaGetDeviceCount(). Error 804: forward compatibility was attempted\n"
        "  return torch._C._cuda_getDeviceCount() > 0\n"
    )
    cut = TRACEBACK + '  File "train.py", line 93, in main\n    model.to(args.device\n'
    assert category(warned + cut) == C.HIP_RUNTIME_INIT
    assert category(warned + TRACEBACK + "RuntimeError: something\n") == C.HIP_RUNTIME_INIT
    # a GPU is there and its runtime broke: the job trained no further, it had no GPU
    assert category(warned + "YOLOv5 torch 1.8.0 CPU\n") == C.HIP_RUNTIME_INIT
    # a job that trains after it lived through it (on the CPU)
    assert category(warned + "Epoch 1/3: 10/100 loss 0.9\nEpoch 2/3: 20/100\n") == C.NONE


def test_no_nvidia_driver_warned_alone_is_a_cpu_only_machine() -> None:
    absent = (
        "/venv/torch/cuda/__init__.py:52: UserWarning: CUDA initialization: Found no NVIDIA "
        "driver on your system. Please check that you have an NVIDIA GPU and installed a "
        "driver from http://www.nvidia.com/Download/index.aspx\n"
        "  return torch._C._cuda_getDeviceCount() > 0\n"
    )
    assert category(absent + "YOLOv5 torch 1.8.0 CPU\n") == C.NONE
    assert category(absent + TRACEBACK + "RuntimeError: something\n") == C.HIP_RUNTIME_INIT


def test_an_exception_whose_message_is_on_the_next_line_is_read_with_it() -> None:
    bnb = (
        "RuntimeError: \n"
        "        CUDA Setup failed despite GPU being available. Please run the following "
        "command to get more information:\n"
    )
    assert category(bnb) == C.HIP_RUNTIME_INIT
    assert_first = TRACEBACK + '  File "t.py", line 3, in <module>\n    torch.cuda.FloatTensor(1)\n'
    message = "Found no NVIDIA driver on your system. Please check that you\n"
    assert category(assert_first + "AssertionError: \n" + message) == C.HIP_RUNTIME_INIT
    # with no message at all it is still an exception no signature knows
    assert category(assert_first + "AssertionError: \n") == C.CONFIG_ERROR


def test_messages_that_show_an_epoch_ran() -> None:
    error = TRACEBACK + '  File "t.py", line 9, in <module>\n    f()\nZeroDivisionError: x\n'
    assert category("Epoch 1 of 30 took 28.3s\n" + error) == C.UNKNOWN
    assert category("Epoch 1 of 30\n" + error) == C.CONFIG_ERROR
    stepped = TRACEBACK + '  File "t.py", line 9, in <module>\n    sched.step()\n'
    over = "ValueError: Tried to step 60002 times. The specified number of total steps is 60000\n"
    assert category(stepped + over) == C.UNKNOWN
    # the ranks' gradients are compared every so many updates
    drift = "AssertionError: Fatal error: gradients are inconsistent between workers\n"
    assert category(stepped + drift) == C.UNKNOWN
    # an epoch-end callback looked for a metric the epoch did not log: an epoch ran
    plateau = "MisconfigurationException: ReduceLROnPlateau conditioned on metric val_loss "
    assert category(stepped + plateau + "which is not available. Available: [a]\n") == C.UNKNOWN
    monitored = "`ModelCheckpoint(monitor='val/acc')` could not find the monitored key in the "
    assert (
        category(stepped + "MisconfigurationException: " + monitored + "returned metrics: [a]\n")
        == C.UNKNOWN
    )
    # NaN in TensorFlow's wording names values gone bad, not a setup mistake
    nan = "InvalidArgumentError: Nan in summary histogram for: conv2d/kernel_0\n"
    assert category(stepped + nan) == C.UNKNOWN
    # the older Lightning wording, and the Trainer's best-model metric at an evaluation
    older = "MisconfigurationException: ModelCheckpoint(monitor='val_loss') not found in the "
    assert category(stepped + older + "returned metrics: ['loss']\n") == C.UNKNOWN
    best = "KeyError: \"The `metric_for_best_model` training argument is set to 'eval_loss', "
    assert category(stepped + best + 'which is not found in the evaluation metrics."\n') == (
        C.UNKNOWN
    )


def test_a_launchers_tag_before_each_line_is_read_past() -> None:
    ray = "(RayWorkerWrapper pid=92234, ip=172.19.24.110) "
    line = "[rank1]:[E1224 13:23:05.48 ProcessGroupNCCL.cpp:542] [Rank 12] Collective failed\n"
    assert category("Epoch 2/10\n" + ray + line) == C.NCCL_DISTRIBUTED


def test_a_traceback_the_poster_indented_as_a_whole_counts_by_its_exception() -> None:
    indented = (
        "   Traceback (most recent call last):\n"
        '     File "train.py", line 12, in <module>\n'
        "       new = empty(newshape, arr.dtype, arrorder)\n"
        "      MemoryError\n"
    )
    assert category(indented) == C.HOST_OOM


def test_a_cause_outranks_the_signals_and_wrappers_it_leads_to() -> None:
    wrapped = (
        "W1219 torch/multiprocessing/spawn.py:169] Terminating process 252 via signal SIGTERM\n"
        + TRACEBACK
        + "torch.multiprocessing.spawn.ProcessRaisedException:\n\n"
        + "-- Process 0 terminated with the following error:\n"
        + TRACEBACK
        + "OSError: [Errno 28] No space left on device\n"
    )
    assert diagnose_text(wrapped, catalogue=shipped()).signature == "disk-full"
    # an exception no signature knows is the weakest evidence of all
    unknown_first = TRACEBACK + "KeyError: 'x'\n" + "Segmentation fault (core dumped)\n"
    assert category(unknown_first) == C.SEGFAULT_ABORT


def live(text: str, at: int) -> str:
    """The verdict of the live classifier fed `text` in two chunks split at `at`."""
    classifier = LiveClassifier(shipped())
    data = text.encode()
    classifier.feed(data[:at])
    classifier.feed(data[at:])
    classifier.close()
    return classifier.verdict().category


def test_the_line_above_a_traceback_is_read_the_same_live_and_offline() -> None:
    ignored = (
        "Exception ignored in: <function _MultiProcessingDataLoaderIter.__del__ at 0x7f>\n"
        + TRACEBACK
        + "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly\n"
    )
    assert category(ignored) == live(ignored, ignored.index("Traceback")) == C.NONE
    # a retry announced without a colon does not introduce the traceback; a known cause counts
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    retry = "Retrying in 5s\n" + TRACEBACK + oom
    assert category(retry) == live(retry, retry.index("Traceback")) == C.OOM
    logged = "ERROR [retry.py] Retry attempt failed:\n" + TRACEBACK + oom
    assert category(logged) == C.OOM


def test_a_traceback_cut_off_in_a_wait_for_a_child_was_an_interrupt_of_a_waiting_job() -> None:
    launcher = (
        TRACEBACK + '  File "/torch/distributed/launch.py", line 253, in main\n'
        "    process.wait()\n"
        '  File "/usr/lib/python3.7/subprocess.py", line 1611, in _try_wait\n'
        "    (pid, sts) = os.waitpid(self.pid, wait_flags)\n"
    )
    diagnosis = diagnose_text(launcher, catalogue=shipped())
    assert (diagnosis.category, diagnosis.signature) == (C.HANG, C.INFERRED_WAIT_INTERRUPTED)
    # a known cause outranks it, and an exception line decides as before
    assert category("Epoch 1/3\nRuntimeError: NCCL error: unhandled system error\n" + launcher) == (
        C.NCCL_DISTRIBUTED
    )
    assert category(launcher + "KeyboardInterrupt\n") == C.KILLED
    # Python 3.11+ prints carets under the code; a launcher's tag may lead every line
    carets = launcher + "                 ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
    assert category(carets) == C.HANG
    tagged = "".join("[default0]:" + row + "\n" for row in launcher.splitlines())
    assert category(tagged) == C.HANG


def test_a_lone_exception_line_counts_where_nothing_but_redraws_follow_it() -> None:
    assert category("loading\nKeyError: 'boxes'\n") == C.CONFIG_ERROR
    assert category("loading\nKeyError: 'boxes'\nmore output\n") == C.NONE
    assert category("Loading data\nMeanSquaredError: 0.0234\n") == C.NONE  # a metric
    # the bar's last redraw, printed as the program exits, is no output going on
    lone = "MisconfigurationException: ReduceLROnPlateau conditioned on metric val_loss\n"
    redraw = "Epoch 0: 100%|##########| 106/106 [01:20<00:00,  1.31it/s]\n"
    assert category(lone + redraw) == live(lone + redraw, len(lone) + 3) == C.UNKNOWN
    assert category(lone + redraw + "Epoch 1:  10%|#         | 11/106\n") == C.NONE
    # any other row is output going on: a first one not at its total, another bar, another
    # epoch, an epoch-only row, and rows under a rank's prefix
    key = "KeyError: 'boxes'\n"
    for after in (
        "Epoch 0:   1%|          | 1/106 [00:01<01:00]\n",
        "Loading shards: 100%|##| 3/3 [00:01<00:00]\nMap: 100%|##| 1000/1000 [00:01<00:00]\n",
        "Epoch 0 | batch 1 | loss 0.9\nEpoch 0 | batch 2 | loss 0.8\n",
        "[rank0]: Epoch 0:   1%|| 1/106 [00:01<01:00]\n"
        "[rank0]: Epoch 0:   2%|| 2/106 [00:02<01:00]\n",
    ):
        assert category(key + after) == C.NONE, after
    assert category("Epoch 5/10\n" + key + "Epoch 1/10\n") == C.NONE
    # a bar at 0 shows nothing done: tqdm draws it so as the exception closes it
    zero = "  0%|          | 0/3 [00:00<?, ?it/s]\n"
    assert every_way("AttributeError: 'AdamW' object has no attribute 'train'\n" + zero) == {
        (C.CONFIG_ERROR, 1)
    }
    # a bar at 0 that shows an epoch, a worded counter at 0, or a new row after progress on
    # another one: the program went on
    for after in (
        "Epoch 2:   0%|          | 0/3 [00:00<?, ?it/s]\n",
        "step 0, loss: 2.3026\n",
        "iter 0/1000 lr 0.01\n",
    ):
        assert category("Epoch 1/10\n" + key + after) == C.NONE, after
    seen = "Epoch 1: 100%|#| 100/100 [00:10<00:00]\n" + key
    assert category(seen + "Validation:   0%|   | 0/20 [00:00<?, ?it/s]\n") == C.NONE


def test_a_lone_exception_line_with_its_message_under_it() -> None:
    spawn = "RuntimeError:\n        An attempt has been made to start a new process before the\n"
    assert category(spawn + "        current process has finished its bootstrapping phase.\n"
                    "more output\n") == C.DATALOADER_WORKER  # fmt: skip
    # unknown to every signature: counts, as any lone exception line, only at the end
    assert category("setup\nValueError:\n  bad value in cfg\n") == C.CONFIG_ERROR
    assert category("setup\nValueError:\n  bad value in cfg\nEpoch 1/3 loss 0.3\n") == C.NONE
    # a message that runs on over several indented lines is still its message
    assert category("setup\nValueError:\n  bad value\n  in cfg: lr\n") == C.CONFIG_ERROR
    # under an exception line that had its message, an indented line is output going on
    assert category("setup\nKeyError: 'lr'\n    model.fit(x)\n") == C.NONE


def test_nccls_return_code_trace_is_a_failure_and_its_other_info_lines_are_not() -> None:
    trace = "h:687:748 [0] NCCL INFO init.cc:903 -> 2\n"
    assert category("Epoch 2/10\n" + trace) == C.NCCL_DISTRIBUTED
    assert category(trace + "Epoch 1/10 loss 0.5\nEpoch 2/10 loss 0.4\n") == C.NONE  # lived
    healthy = "h:687:748 [0] NCCL INFO Channel 00 : 0[0] -> 1[1] via P2P/IPC\n"
    assert category("Epoch 2/10\n" + healthy) == C.NONE
    checked_in = "h:1:2 [0] bootstrap.cc:131 NCCL WARN Bootstrap Root : rank 1 of 8 ranks has "
    assert category(checked_in + "already checked in\n") == C.NCCL_DISTRIBUTED


def test_torchs_words_for_a_gpu_it_cannot_use_even_printed_as_a_warning() -> None:
    too_old = "The NVIDIA driver on your system is too old (found version 6050).\n"
    assert category(too_old) == C.HIP_RUNTIME_INIT
    arch = (
        "  NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the "
        "current PyTorch installation.\n"
    )
    assert category(arch) == C.HIP_RUNTIME_INIT
    assert category(arch + "Epoch 1/10 loss 0.5\nEpoch 2/10 loss 0.4\n") == C.NONE  # lived


def test_a_stop_the_launcher_sends_after_a_rank_failed_does_not_hide_the_failure() -> None:
    rank = "[rank1]: " + TRACEBACK.replace("\n  ", "\n[rank1]:   ") + "[rank1]: KeyError: 'l'\n"
    closing = "W api.py:857] Sending process 4567 closing signal SIGTERM\n"
    assert category(rank + closing) == C.CONFIG_ERROR
    assert category("Epoch 2/10\n" + closing) == C.KILLED  # alone it is the cause
    hup = "W api.py:857] Sending process 4567 closing signal SIGHUP\n"
    assert category(rank + hup) == C.KILLED  # the launcher itself got SIGHUP and passes it on


def test_an_nccl_connect_retry_that_training_follows_was_lived_through() -> None:
    retry = "w-0:16:63 [0] NCCL INFO Call to connect returned Connection refused, retrying\n"
    bar = "Epoch 1/3:  {n}%| | {n}/100 [00:01<00:19,  5.0it/s]\n"
    assert category(bar.format(n=5) + retry) == C.NCCL_DISTRIBUTED
    assert category(bar.format(n=5) + retry + bar.format(n=6)) == C.NONE
    # an INFO line that names no failure is a healthy run's
    assert category("w-0:16:63 [0] NCCL INFO Channel 00/02 :    0   1\n") == C.NONE


def test_an_evaluation_the_training_loop_calls_with_its_epoch_shows_training() -> None:
    def failing_in(call: str) -> str:
        return (
            TRACEBACK
            + f'  File "main.py", line 54, in main_worker\n    {call}\n'
            + '  File "train.py", line 182, in evaluate\n    loss = stat[epoch]\nKeyError: 10\n'
        )

    assert category(failing_in("trainer.test(epoch)")) == C.UNKNOWN
    assert category(failing_in("eval_one_epoch(sess, model, epoch, n_epochs)")) == C.UNKNOWN


def test_an_exception_raised_in_an_evaluation_is_not_a_setup_mistake() -> None:
    def under(*names: str, exception: str = "ZeroDivisionError: float division by zero") -> str:
        frames = "".join(f'  File "t.py", line {n}, in {name}\n' for n, name in enumerate(names))
        return TRACEBACK + frames + exception + "\n"

    for name in ("evaluate", "evaluate_prediction", "validation_step", "val_step"):
        assert category(under("main", name)) == C.UNKNOWN, name
        # a file or module missing is still the job's setup: an evaluation script of its own
        missing = "FileNotFoundError: [Errno 2] No such file or directory: 'best.pt'"
        assert category(under("main", name, exception=missing)) == C.CONFIG_ERROR, name
    # Lightning's sanity check runs validation_step before the first training step
    sanity = under("fit", "_run_sanity_check", "run", "validation_step")
    assert category(sanity) == C.CONFIG_ERROR
    # checks that validate a setting are setup, not an evaluation (jsonschema's and
    # GenerationConfig's `validate` too), and so is the Trainer's evaluation before training
    for name in ("validate", "validate_config", "validate_args", "build_evaluator", "_evaluate"):
        assert category(under("main", name, exception="ValueError: bad lr")) == C.CONFIG_ERROR
    # a setup mistake a signature knows stays one under an evaluation
    mismatch = "RuntimeError: Error(s) in loading state_dict for Net:"
    assert category(under("main", "evaluate", exception=mismatch)) == C.CONFIG_ERROR


def test_a_config_error_that_a_bars_last_redraw_shows_came_mid_training_is_unknown() -> None:
    error = (
        TRACEBACK
        + '  File "collate.py", line 174, in collate_tensor_fn\n    torch.stack(batch)\n'
        + "RuntimeError: stack expects each tensor to be equal size, but got [0] at entry 0 "
        + "and [1024] at entry 1\n"
    )
    bar = "Epoch 0:   0%|▏   | 245/122081 [02:04<17:07:50,  1.98it/s, loss=1.23]\n"
    assert category(error) == C.CONFIG_ERROR
    assert category(error + "\n" + bar) == C.UNKNOWN
    # an exception no signature knows, the same way
    unknown = TRACEBACK + "KeyError: 'boxes'\n"
    assert category(unknown) == C.CONFIG_ERROR
    assert category(unknown + bar) == C.UNKNOWN


BROKEN_GPU = (
    "UserWarning: CUDA initialization: The NVIDIA driver on your system is too old (found "
    "version 10010).\n"
)


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        (TRACEBACK + "ModuleNotFoundError: No module named 'timm'\n", C.CONFIG_ERROR),
        ("Segmentation fault (core dumped)\n", C.SEGFAULT_ABORT),
        ("RuntimeError: NCCL error in: x, unhandled system error\n", C.NCCL_DISTRIBUTED),
        (TRACEBACK + "KeyboardInterrupt\n", C.KILLED),
    ],
)
def test_a_cause_named_after_a_broken_gpu_warning_outranks_it(after: str, expected: str) -> None:
    assert category(BROKEN_GPU + after) == expected


def test_a_broken_gpu_warning_is_survivable_live_and_a_driverless_machine_is_no_fault() -> None:
    found = LiveClassifier(shipped()).feed(BROKEN_GPU.encode())
    assert [f.category for f in found] == [C.HIP_RUNTIME_INIT] and found[0].survivable
    no_gpu = "UserWarning: CUDA initialization: CUDA driver initialization failed, you might "
    assert category(no_gpu + "not have a CUDA gpu.\n") == C.NONE
    # TensorFlow logs cuInit failing on a CPU-only machine, then trains on the CPU
    tf = "E cuda_driver.cc:314] failed call to cuInit: CUDA_ERROR_NO_DEVICE: no CUDA-capable\n"
    epochs = "Epoch 1/2\n10/10 [====] - 1s - loss: 0.3\nEpoch 2/2\n10/10 [====] - 1s - loss: 0.2\n"
    assert category(tf) == C.HIP_RUNTIME_INIT
    assert category(tf + epochs) == C.NONE
    # a ROCm build's words, and the runtime error they name is no GPU fault of its own
    hip = (
        "UserWarning: HIP initialization: Unexpected error from hipGetDeviceCount(). \n"
        "Error 101: hipErrorInvalidDevice (Triggered internally at  /pytorch/c10/hip/"
        "HIPFunctions.cpp:110.)\n"
    )
    assert category(hip + "False\n") == C.HIP_RUNTIME_INIT
    assert category(hip + epochs) == C.NONE
    # heard without an error word on its line too, and explaining a later unknown death
    quiet = "UserWarning: HIP initialization: Found no usable GPU on your system.\n"
    death = TRACEBACK + '  File "t.py", line 3, in <module>\nZeroDivisionError: boom\n'
    assert category(quiet + death) == C.HIP_RUNTIME_INIT


def test_an_exception_message_on_the_next_line_reads_past_rank_prefixes() -> None:
    rank = "[rank0]: "
    trace = "".join(rank + line + "\n" for line in TRACEBACK.splitlines())
    text = trace + rank + "AssertionError: \n" + rank + "\n" + rank
    assert category(text + "Torch not compiled with CUDA enabled\n") == C.CONFIG_ERROR


@pytest.mark.parametrize(
    "text",
    [
        "Epoch 0: data loading done\n" + TRACEBACK + "FileNotFoundError: data/x\n",
        TRACEBACK.rstrip("\n") + "\n    loader = get_test_loader(cfg, epoch=0)\nKeyError: 3\n",
    ],
)
def test_setup_lines_are_not_training(text: str) -> None:
    assert category(text) == C.CONFIG_ERROR


def test_zsh_job_lines_and_an_info_line_naming_an_error() -> None:
    assert category("[2]  + 1234 bus error  python a.py\n") == C.SEGFAULT_ABORT
    info = "INFO: CUDA arch list includes sm_86; invalid device function means a wrong arch\n"
    assert category(info) == C.NONE


def test_a_run_whose_last_progress_line_prints_a_nan_loss_diverged() -> None:
    row = "Epoch [1][{n}/742]  lr: 5.000e-05, time: 0.396, loss_cls: {v}, loss: {v}\n"
    nan = row.format(n=658, v="nan") + row.format(n=659, v="nan")
    diagnosis = diagnose_text(nan, catalogue=shipped())
    assert diagnosis.category == C.UNKNOWN
    assert diagnosis.signature == C.INFERRED_LOSS_NOT_FINITE and diagnosis.line == 2
    # a loss that came back, or only a validation loss gone bad, is not a diverged run
    assert category(nan + row.format(n=660, v="0.41")) == C.NONE
    assert category("Epoch 3/10 step 5/9 train_loss: 0.4 val_loss: nan\n") == C.NONE
    # the cause named when the run was stopped for it
    assert (
        category(nan + "slurmstepd: error: *** JOB 12 CANCELLED AT 2024 DUE TO TIME LIMIT ***\n")
        == C.UNKNOWN
    )


def test_the_last_training_loss_printed_before_the_end_being_nan_is_a_diverged_run() -> None:
    # Keras: the last row, cut off, prints no loss; the one before it printed nan
    keras = (
        "Epoch 4/5\n52/53 [============================>.] - ETA: 0s - loss: nan\n"
        "Epoch 00004: val_loss did not improve from 213.78286\n"
        "53/53 [==============================] - 34s 643ms/step - l"
    )
    assert every_way(keras) == {(C.UNKNOWN, 2)}
    assert diagnose_text(keras, catalogue=shipped()).signature == C.INFERRED_LOSS_NOT_FINITE
    # the forms trainers print it in, progress rows or not
    for text in (
        "Pass 0, batch 500, loss [     nan 9.211133      nan]\nPass 0 end, spent: 50.6\n",
        "speechbrain.core - Loss is nan.\nParameter containing:\ntensor([[nan, nan]])\n",
        "logits printed\nloss:  tensor(nan, device='mps:0', grad_fn=<NllLossBackward0>)\nX: 1\n",
        "{'loss': nan, 'learning_rate': 9.7e-06, 'epoch': 0.53}\n",
    ):
        assert category(text) == C.UNKNOWN, text
    # a loss that came back (on a line that is no progress row too), a validation, test, dev
    # or best loss, another quantity after the training loss, or none at all
    for text in (
        "step 3 loss: nan\nstep 4 loss: 0.52\ndone\n",
        "Epoch 3: 100%|#| 50/50 [00:05<00:00, loss=nan]\n{'train_runtime': 10.0, 'train_loss': "
        "0.42}\n",
        "Epoch 3/10 - loss: 0.41 - val_loss: nan\n",
        "Epoch 9: 100%|#| 50/50 [00:01<00:00, loss=0.123]\nwandb: Run summary:\n"
        "wandb:   train/loss 0.41\nwandb:     val/loss nan\n",
        "Train Epoch: 3 [59520/60000 (99%)]\tLoss: 0.012\n\nTest set: Average loss: nan, "
        "Accuracy: 10/100\n",
        "Starting training\nbest loss: inf\nepoch 1 done\n",
        "train loss 0.41, val. loss nan\n",
        "epoch 3 train loss 0.41\nepoch 3 dev loss: nan\n",
        "step 9 loss: 1.2\nAttempted loss scale: inf, reducing to 32768\n",
        "step 9 loss: 1.2\n{'loss': 0.0, 'grad_norm': nan, 'epoch': 0.53}\n",
        "cross_entropy: [nan]\n",
    ):
        assert category(text) == C.NONE, text
    # the end of the output reads the same however an overlong line before it came
    long = "speechbrain.core - Loss is nan.\n" + "x" * 17000 + "\ndone\n"
    assert len(every_way(long)) == 1
    # TensorFlow's CheckNumerics op failing the step
    check = (
        "W tensorflow/core/common_runtime/executor.cc:1027] Compute status: Invalid argument: "
        "ReluGrad input is not finite. : Tensor had NaN values\n"
    )
    assert category("step 2, training accuracy 0.14\n" + check) == C.UNKNOWN


def test_a_file_a_recipe_needs_missing_at_the_end_is_a_config_error() -> None:
    said = "steps/make_fbank_pitch.sh: no such file data/char_eval/wav.scp\n"
    assert category("stage 1: Feature Generation\n" + said) == C.CONFIG_ERROR
    kohya = "prepare dataset\nNo data found. Please verify arguments / 画像がありません\n"
    assert category(kohya) == C.CONFIG_ERROR
    assert category(kohya.replace("No data", "ERROR    No data")) == C.CONFIG_ERROR
    ultra = "RuntimeError: Dataset 'bvn.yaml' error\nDataset 'bvn.yaml' images not found\n"
    assert category(ultra + "Note dataset download directory is 'D:\\datasets'\n") == (
        C.CONFIG_ERROR
    )
    paddle = ", error happened with msg: ./train_datas/t000.png does not exist!\n"
    assert category("root ERROR: When parsing line t000.png\n" + paddle) == C.CONFIG_ERROR
    # a segfault the output names explains a broken process pool better
    pool = "A process in the process pool was terminated abruptly while the future was running\n"
    assert category(pool + "Segmentation fault (core dumped)\n") == C.SEGFAULT_ABORT


def test_more_words_that_tell_an_exception_is_not_a_setup_mistake() -> None:
    scale = "RuntimeError: grad_scale is too small, exiting: 1.2924697071141057e-26\n"
    assert category(TRACEBACK + scale) == C.UNKNOWN  # the fp16 loss scale collapsed
    store = '  File "/torch/distributed/rendezvous.py", line 143, in _env_rendezvous_handler\n'
    lost = "ValueError: host not found: Name or service not known\n"
    assert category(TRACEBACK + store + lost) == C.NCCL_DISTRIBUTED  # the master is not up
    worker = (
        '  File "/torch/utils/data/_utils/signal_handling.py", line 66, in handler\n'
        "    _error_if_any_worker_fails()\nRuntimeError: DataLo"
    )
    assert category(TRACEBACK + worker) == C.DATALOADER_WORKER  # cut off, told by its frame


def test_an_operator_a_backend_lacks_is_a_setup_mistake_even_with_a_temporary_fix_offered() -> None:
    mps = (
        "NotImplementedError: The operator 'aten::hardsigmoid.out' is not currently implemented "
        "for the MPS device. As a temporary fix, you can set PYTORCH_ENABLE_MPS_FALLBACK=1\n"
    )
    assert category(mps) == C.CONFIG_ERROR
    dns = "OSError: [Errno -3] Temporary failure in name resolution\n"
    assert category(TRACEBACK + dns) != C.CONFIG_ERROR  # what comes and goes is not setup


def test_consequences_a_distributed_job_prints_yield_to_their_cause() -> None:
    reset = (
        "[rank1]:[W1019 18:43:28.514 4242 TCPStore.cpp:125] [c10d] recvValue failed on "
        "SocketImpl(fd=2): Connection reset by peer\n"
    )
    assert category(reset) == C.NCCL_DISTRIBUTED
    # rank 0 died of its own exception: the store it held went with it
    died = "Epoch 3/10\n" + TRACEBACK + "ValueError: bad thing\n"
    assert category(died + reset) == C.UNKNOWN
    # any gRPC client prints this while it retries: training going on excuses it
    grpc = 'W grpc debug_error_string = "UNKNOWN:Error received from peer ipv4:1.2.3.4:443"\n'
    assert category("Epoch 3/10\n" + grpc) == C.NCCL_DISTRIBUTED
    assert category("Epoch 3/10\n" + grpc + "Epoch 4/10\nEpoch 5/10\nTerminated\n") == (C.KILLED)
    hccl = "EE9999  fftsplus task execute failed, err_type=13[hccl fftsplus timeout]\n"
    assert category(hccl) == C.NCCL_DISTRIBUTED


def test_cuda_shutting_down_as_the_process_exits_is_no_cause() -> None:
    step = "2017-03-17 00:24:34.693612: step 9990, loss = 0.79\n"
    deinit = (
        "E tensorflow/stream_executor/cuda/cuda_event.cc:49] Error polling for event status: "
        "failed to query event: CUDA_ERROR_DEINITIALIZED\n"
    )
    assert category(step + deinit) == C.NONE
    assert category(step + deinit + "Aborted (core dumped)\n") == C.SEGFAULT_ABORT


def test_arguments_a_cli_rejects_are_a_config_error() -> None:
    usage = "usage: main.py [-h] {fit,validate,test,predict} ...\n"
    for said in (
        "error: argument subcommand: invalid choice: 'train'",
        "main.py: error: argument --lr: invalid float value: 'x'",
    ):
        assert category(usage + said + "\n") == C.CONFIG_ERROR, said


def test_a_port_already_taken_is_a_config_error() -> None:
    bind = "RuntimeError: The server socket has failed to bind to [::]:44796 (errno: 98 - "
    assert category(TRACEBACK + bind + "Address already in use).\n") == C.CONFIG_ERROR
    # the store's own words once every address failed, after two warnings saying why
    listen = "[E socket.cpp:435] [c10d] The server socket has failed to listen on any local "
    assert category(listen + "network address.\n") == C.CONFIG_ERROR
    # as the exception line, its reasons on the lines under it
    raised = "RuntimeError: The server socket has failed to listen on any local network address.\n"
    assert category(raised + "The server socket has failed to bind to [::]:29500\n") == (
        C.CONFIG_ERROR
    )


def test_a_list_of_what_might_have_happened_names_no_cause() -> None:
    ray = (
        "(raylet) A worker died or was killed while executing a task by an unexpected system "
        "error. Worker exit type: SYSTEM_ERROR. There are some potential root causes. (1) The "
        "process is killed by SIGKILL by OOM killer due to high memory usage. (2) ray stop\n"
    )
    watchdog = "[rank1]:[E1224 13:23:05.48 ProcessGroupNCCL.cpp:542] [Rank 12] Collective\n"
    assert category("Epoch 2/10\n" + ray + watchdog) == C.NCCL_DISTRIBUTED


def test_an_exception_line_indented_with_its_traceback_counts() -> None:
    indented = (
        '    File "/envs/lib/python3.8/site-packages/torch/distributed/distributed_c10d.py", '
        "line 2420, in barrier\n"
        "      work = default_pg.barrier(opts=opts)\n"
        "  RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:825, invalid usage\n"
        "  vm1:7389:7453 [0] NCCL INFO init.cc:665 -> 2\n"
        "  v"
    )
    assert category(indented) == C.NCCL_DISTRIBUTED


def test_the_details_under_a_config_validation_error() -> None:
    pydantic = "decoder.clip\n  Field required [type=missing, input_value={}, input_type=dict]\n"
    visit = "    For further information visit https://errors.pydantic.dev/2.4/v/missing\n"
    assert category(pydantic + visit) == C.CONFIG_ERROR
    omegaconf = "Key 'period' not in 'ModelCheckpointConf'\n    full_key: checkpoint.period\n"
    assert category(omegaconf + "    object_type=ModelCheckpointConf\n") == C.CONFIG_ERROR


def test_deepspeeds_batch_sizes_that_do_not_multiply_out() -> None:
    check = "AssertionError: Check batch related parameters. train_batch_size is not equal to "
    assert category(TRACEBACK + check + "micro_batch_per_gpu * gradient_acc_step\n") == (
        C.CONFIG_ERROR
    )


def test_hydra_could_not_build_what_the_config_names() -> None:
    hydra = "Error in call to target 'tactile_ssl.data.VisionTactileDataset':\n"
    assert category(hydra + "ConfigAttributeError('Missing key sensor')\n") == C.CONFIG_ERROR


def test_tensorflow_reports_a_full_disk_as_resource_exhausted() -> None:
    full = "tensorflow.python.framework.errors_impl.ResourceExhaustedError: model/variables; "
    assert category(full + "No space left on device [Op:SaveV2]\n") == C.UNKNOWN
    assert category("ResourceExhaustedError: OOM when allocating tensor\n") == C.OOM
    tmp = "InternalError (see above for traceback): Error writing (tmp) checkpoint file: "
    assert (
        category(tmp + "/ckpt/model.ckpt-6.tempstate97: Resource exhausted: /ckpt\n") == C.UNKNOWN
    )


def test_values_gone_bad_in_a_distribution_are_not_a_setup_mistake() -> None:
    invalid = "ValueError: The parameter loc has invalid values\n"
    assert category(TRACEBACK + invalid) == C.UNKNOWN


def test_hugging_face_trainer_rows_are_progress() -> None:
    def row(epoch: float) -> str:
        return f"{{'loss': 0.69, 'grad_norm': 1.2, 'learning_rate': 5e-05, 'epoch': {epoch}}}\n"

    missing = TRACEBACK + "FileNotFoundError: [Errno 2] No such file or directory: 'x.json'\n"
    assert category(row(0.0) + missing) == C.CONFIG_ERROR  # no step taken yet
    assert category(row(0.53) + missing) == C.UNKNOWN  # the job had trained
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert category(row(0.5) + oom + row(0.5)) == C.OOM  # the same row again: a redraw
    assert category(row(0.5) + oom + row(0.5) + row(0.51)) == C.NONE  # it went on


def test_an_exception_line_a_harmless_entry_knows_is_no_failure() -> None:
    warned = "WARNING  A matching Triton is not available, some optimizations will not be enabled\n"
    frames = '  File "/xformers/__init__.py", line 57, in _is_triton_available\n    import triton\n'
    assert category(
        warned + TRACEBACK + frames + "ModuleNotFoundError: No module named 'triton'\n"
    ) == (C.NONE)
    assert category(TRACEBACK + "ModuleNotFoundError: No module named 'tritonx'\n") == (
        C.CONFIG_ERROR
    )


def test_paddles_gpu_allocator_check() -> None:
    enforce = "paddle.fluid.core.EnforceNotMet: enforce allocating <= available failed, 10 > 1\n"
    assert category(TRACEBACK + enforce) == C.OOM


def test_review_cases_that_must_stay_as_they_were() -> None:
    # a dict that ends in 'epoch' but is no Trainer log row is no progress
    settings = "{'lr': 0.001, 'batch_size': 64, 'epoch': 100}\n"
    assert category(settings + TRACEBACK + "FileNotFoundError: [Errno 2] x\n") == C.CONFIG_ERROR
    # a lone exception line takes only an indented message; a line that is not one is
    # output going on
    assert category("Epoch 1/10 loss 0.5\nValueError:\nEpoch 2/10 loss 0.4\n") == C.NONE
    assert category("setup\nException:\nconfig.yaml loaded\n") == C.NONE
    # a pin-memory thread that died while training went on
    thread = "Epoch 3/10\nException in thread Thread-2:\n" + TRACEBACK
    pin = '  File "/torch/utils/data/_utils/pin_memory.py", line 28, in _pin_memory_loop\n'
    assert category(thread + pin + "EOFError\nEpoch 4/10\nEpoch 5/10\n") == C.NONE
    # a validation error a program logged and handled is outranked by a real cause
    logged = (
        "WARNING optional settings ignored: 1 validation error for Settings\n"
        "    For further information visit https://errors.pydantic.dev/2.4/v/literal_error\n"
    )
    nccl = "h:1:2 [0] bootstrap.cc:131 NCCL WARN Bootstrap : connection refused\n"
    assert category(logged + nccl) == C.NCCL_DISTRIBUTED


def test_the_line_above_a_traceback_is_read_past_blank_lines_live_too() -> None:
    text = "Exception in thread Thread-1:\n\n" + TRACEBACK + "KeyError: 1\n"
    assert category(text) == C.NONE
    blank = text.index("\n\n")
    for cut in range(blank - 2, blank + 5):  # chunks that end around the blank line
        classifier = LiveClassifier(shipped())
        classifier.feed(text[:cut].encode())
        classifier.feed(text[cut:].encode())
        classifier.close()
        assert classifier.verdict().category == C.NONE, cut


def test_round_39_wordings() -> None:
    # Thrust's device sort failing to get scratch memory is the GPU's memory running out
    thrust = (
        "terminate called after throwing an instance of 'thrust::system::system_error'\n"
        "  what():  radix_sort: failed to get memory buffer: out of memory\n"
    )
    assert category("global iter = 0\n" + thrust) == C.OOM
    # a gloo pair failing inside a task of torch's thread pool (the RPC agent)
    pool = (
        "[E thread_pool.cpp:112] Exception in thread pool task: [/pytorch/third_party/gloo/"
        "gloo/transport/tcp/pair.cc:563] Read error [10.0.0.2]:8835: Connection reset by peer\n"
    )
    assert category("Process process 2:\n" + pool * 3) == C.NCCL_DISTRIBUTED
    # ps-lite's van failing to connect a parameter-server job
    van = "mxnet.base.MXNetError: [13:30:33] src/van.cc:63: Check failed: !ip.empty() no ip\n"
    assert category(TRACEBACK + van) == C.NCCL_DISTRIBUTED
    # saving the model a script fit comes after training, even with no progress shown
    save = (
        '  File "train.py", line 184, in main\n'
        '    model.save(out["model_dir"], save_traces=False)\n'
        "TypeError: Unable to serialize 0.0 to JSON.\n"
    )
    assert category(TRACEBACK + save) == C.UNKNOWN
    assert category(TRACEBACK + save.replace("model.save(", "model.build(")) == C.CONFIG_ERROR


def test_round_40_wordings() -> None:
    # a progress bar glued to the shell's crash line
    glued = "epochs:   0%|          | 0/200 [00:00<?, ?it/sSegmentation fault (core dumped)\n"
    assert category(glued) == C.SEGFAULT_ABORT
    # NCCL's words as the what() of an uncaught C++ exception, above the abort
    terminate = "terminate called after throwing an instance of 'std::runtime_error'\n"
    abort = '*** Aborted at 1680299961 (unix time) try "date -d @1680299961"\n'
    nccl = terminate + "  what():  unhandled system error\n" + abort
    assert category(nccl) == C.NCCL_DISTRIBUTED
    # a trainer's own loss check as that what(): the run diverged
    assert category(terminate + "  what():  Loss is NaN value\n" + abort) == C.UNKNOWN
    assert category(terminate + "  what():  basic_string::_M_create\n" + abort) == (
        C.SEGFAULT_ABORT
    )


def test_round_41_wordings() -> None:
    # Theano's MemoryError names the GPU's memory
    cnmem = (
        "MemoryError: Error allocating 52428800 bytes of device memory "
        "(CNMEM_STATUS_OUT_OF_MEMORY).\n"
    )
    assert category(cnmem) == C.OOM
    assert category("MemoryError: Unable to allocate 3.2 GiB for an array\n") == C.HOST_OOM
    # TensorFlow's op that found no cuDNN, under the node that failed
    node = "Node: 'sequential_2/conv2d_2/Conv2D'\nDNN library is not found.\n"
    assert category(node + "\t [[{{node sequential_2/conv2d_2/Conv2D}}]]\n") == (C.HIP_RUNTIME_INIT)
    # an index kernel's device-side assert at the first batch: labels out of range
    index = (
        "Train epoch 0:   0%|          | 0/31 [00:00<?, ?it/s]../aten/src/ATen/native/cuda/"
        "IndexKernel.cu:92: operator(): block: [56,0,0], thread: [64,0,0] Assertion `index >= "
        '-sizes[i] && index < sizes[i] && "index out of bounds"` failed.\n'
    )
    assert category(index) == C.CONFIG_ERROR
    # IPython's form of the DataLoader starting its workers
    notebook = (
        "BrokenPipeError                           Traceback (most recent call last)\n"
        "<ipython-input-7-e3bcf05e3377> in <module>()\n"
        "----> 2 dataiter = iter(vis_dataloader)\n\n"
        "D:\\Anaconda3\\lib\\site-packages\\torch\\utils\\data\\dataloader.py in __init__"
        "(self, loader)\n"
        "    238                 w.daemon = True\n"
        "--> 239                 w.start()\n"
        "    240 \n"
    )
    assert category(notebook) == C.DATALOADER_WORKER


def test_round_42_wordings() -> None:
    # the dynamic loader: a program's own library is a setup mistake, the GPU runtime's is not
    loader = "target/debug/app: error while loading shared libraries: {}: cannot open shared "
    loader += "object file: No such file or directory\n"
    assert category(loader.format("libtorch_cuda.so")) == C.CONFIG_ERROR
    assert category(loader.format("libcudart.so.11.0")) == C.HIP_RUNTIME_INIT
    assert category(loader.format("libhsa-runtime64.so.1")) == C.HIP_RUNTIME_INIT
    assert category(loader.format("libnccl.so.2")) == C.HIP_RUNTIME_INIT
    # a helper the job runs (nvidia-smi in a container without GPUs) failing so, and the job
    # going on: the line counts only where the output ends with it
    smi = loader.replace("target/debug/app", "nvidia-smi").format("libnvidia-ml.so.1")
    assert category("Using device: cpu\n" + smi + "Training finished.\n") == C.NONE
    # CTranslate2 and faster-whisper finding no cuBLAS or cuDNN parts
    ct2 = "RuntimeError: Library libcublas.so.11 is not found or cannot be loaded\n"
    assert category(TRACEBACK + ct2) == C.HIP_RUNTIME_INIT
    parts = (
        "Unable to load any of {libcudnn_ops.so.9.1.0, libcudnn_ops.so.9}\n"
        "Invalid handle. Cannot load symbol cudnnCreateTensorDescriptor\n"
    )
    assert category(parts) == C.HIP_RUNTIME_INIT
    glued = "⠴ Transcribing... 0:00:00Could not locate cudnn_ops64_9.dll. Please make sure it is "
    assert category(glued + "in your library path!\n") == C.HIP_RUNTIME_INIT
    # an Ascend NPU that cannot be set, a Gaudi the kernel driver gave up on
    npu = (
        "RuntimeError: Initialize:torch_npu/csrc/core/npu/sys_ctrl/npu_sys_ctrl.cpp:146 NPU "
        "function error: c10_npu::SetDevice(device_id_), error code is 507033\n"
    )
    assert category(TRACEBACK + npu) == C.HIP_RUNTIME_INIT
    gaudi = "[   73.02] habanalabs 0000:34:00.0: Failed to initialize hl6. Device is NOT usable !\n"
    assert category(gaudi) == C.HIP_RUNTIME_INIT
    # cargo naming the status a Rust trainer died of
    cargo = (
        "error: process didn't exit successfully: `target\\release\\train.exe` "
        "(exit code: 0xc0000409, STATUS_STACK_BUFFER_OVERRUN)\n"
    )
    assert category("[00:04:29] 2804/61262 Training Progress\n" + cargo) == C.SEGFAULT_ABORT
    # a ClearML task stopped from outside
    stopped = "clearml.Task - WARNING - ### TASK STOPPED - USER ABORTED - STATUS CHANGED ###\n"
    assert category("Epoch 3/10\n" + stopped) == C.KILLED
    # icefall's collapsed gradient scale: the training diverged
    note = "        If you see this error, it means that the gradient scale is too small.\n"
    assert category("Epoch 2, batch 400, loss[loss=0.31]\n" + note) == C.UNKNOWN


def test_round_43_wordings() -> None:
    # zsh's job line printed after a prompt on the same line
    zsh = "$ python repro.py          [1]    181810 illegal hardware instruction (core dumped)"
    assert category(zsh + "  python repro.py\n") == C.SEGFAULT_ABORT
    assert category("Top-k [1] 12 abort rate: 0.1\n") == C.NONE  # not after a prompt
    # gloo refusing a peer's address while the process group forms
    enforce = (
        "RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/address.cc:45] "
        "sizeof(impl_) == bytes.size(). 136 vs 68\n"
    )
    assert category(TRACEBACK + enforce) == C.NCCL_DISTRIBUTED
    # torch without the backend asked for: a launch that cannot fit the platform
    nccl = "RuntimeError: Distributed package doesn't have NCCL built in\n"
    assert category(TRACEBACK + nccl) == C.CONFIG_ERROR
    # a CI runner cancelling the job
    cancelled = "..................................... [ 75%]\nError: The operation was canceled.\n"
    assert category(cancelled) == C.KILLED
    # faceswap's own words for the GPU's memory, jetson-inference's [cuda] lines
    faceswap = (
        "02/15/2020 15:10:09 MainProcess _training_0 multithreading run DEBUG Error in thread "
        "(_training_0): You do not have enough GPU memory available to train the selected model\n"
    )
    assert category(faceswap) == C.OOM
    launch = (
        "[cuda]   cudaGetLastError()\n[cuda]      unspecified launch failure (error 4) (hex 0x04)\n"
    )
    assert category(launch) == C.GPU_MEMORY_FAULT
    # edge accelerators whose runtime cannot open the device
    coral = "ValueError: Failed to load delegate from libedgetpu.so.1\n"
    assert category(TRACEBACK + coral) == C.HIP_RUNTIME_INIT
    tpu = (
        "F20220715 11:31:30.963634 1069849 tflite_utils.h:236] Check failed: "
        "'GetEdgeTpuContext(device_type, device_index, options)' Must be non NULL \n"
        "*** Check failure stack trace: ***\nAborted\n"
    )
    assert category(tpu) == C.HIP_RUNTIME_INIT
    rknn = "E init_runtime: Exception: RKNN init failed. error code: RKNN_ERR_DEVICE_UNAVAILABLE\n"
    assert category(rknn) == C.HIP_RUNTIME_INIT


def test_round_44_wordings() -> None:
    # glibc's heap report copied without its leading "*** "
    glibc = (
        "Error in `/opt/conda/bin/python': corrupted size vs. prev_size: 0x000055b2bcb5c690 ***\n"
    )
    assert category(glibc) == C.SEGFAULT_ABORT
    # without the "***", only with glibc's address: a data reader's own "Error in" is not it
    skipped = "Error in `data/x.tfrecord': corrupted record at 1234, skipping\n"
    assert category("step 10/100 loss 0.5\n" + skipped + "step 11/100 loss 0.5\n") == C.NONE
    # an NFS file handle gone stale under a file the job writes
    stale = "OSError: [Errno 116] Stale file handle\n"
    assert category(TRACEBACK + stale) == C.UNKNOWN
    # the line above the traceback announces an evaluation: the job had trained
    error = "AttributeError: 'NoneType' object has no attribute 'items'\n"
    evaluating = "evaluating validation preformance... -1/5000 (2.649871)\n"
    assert category(evaluating + TRACEBACK + error) == C.UNKNOWN
    assert category("Validating config...\n" + TRACEBACK + error) == C.CONFIG_ERROR
    checks = "Running validation checks on the config\n"
    assert category(checks + TRACEBACK + error) == C.CONFIG_ERROR
    assert category(TRACEBACK + error) == C.CONFIG_ERROR


def test_round_45_wordings() -> None:
    # TensorFlow's kernel warning for a tensor in the machine's RAM: host memory, not the GPU's
    cpu = (
        "W tensorflow/core/framework/op_kernel.cc:1763] OP_REQUIRES failed at cast_op.cc:109 :"
        " Resource exhausted: OOM when allocating tensor with shape[1,559,512,3] and type float"
        " on /job:localhost/replica:0/task:0/device:CPU:0 by allocator cpu\n"
    )
    assert category(cpu) == C.HOST_OOM
    gpu = cpu.replace("device:CPU:0 by allocator cpu", "device:GPU:0 by allocator GPU_0_bfc")
    assert category(gpu) == C.OOM
    # an older SLURM's step daemon killing a job over its memory limit (no "error:")
    slurm = "slurmstepd: Job 1171978 exceeded memory limit (18202456 > 16384000), being killed\n"
    assert category("step 10 loss 0.5\n" + slurm) == C.HOST_OOM
    # Go's os/exec wording for a Windows access violation (a runner process under a server)
    runner = "Error: llama runner process has terminated: exit status 0xc0000005\n"
    assert category(runner) == C.SEGFAULT_ABORT
    # the amdgpu driver's firmware scheduler (MES) no longer answering
    mes = (
        "[39009.866590] amdgpu 0000:c3:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE\n"
        "[39009.866606] amdgpu 0000:c3:00.0: amdgpu: MES might be in unrecoverable state, issue"
        " a GPU reset\n"
    )
    assert category(mes) == C.GPU_MEMORY_FAULT
    # a firmware timeout the workload usually survives is not one
    misc = (
        "[  100.1] amdgpu 0000:03:00.0: amdgpu: MES failed to respond to msg=MISC (WAIT_REG_MEM)\n"
    )
    assert category(misc) == C.NONE


def test_round_46_wordings() -> None:
    # PyCharm's exit line in Chinese for an access violation
    assert category("进程已结束,退出代码-1073741819 (0xC0000005)\n") == C.SEGFAULT_ABORT
    # a fused kernel's misaligned address, named by its source file only
    fused = (
        "RuntimeError: /pytorch/torch/csrc/jit/fuser/cuda/fused_kernel.cpp:202:"
        " misaligned address\n"
    )
    assert category(fused) == C.GPU_MEMORY_FAULT
    # Windows spawning a process: every multiprocessing start passes through this frame
    # (torch.multiprocessing.spawn for DDP too), so it says nothing of DataLoader workers
    spawn = (
        "Traceback (most recent call last):\n"
        '  File "C:\\env\\lib\\multiprocessing\\popen_spawn_win32.py", line 65, in __init__\n'
        "    reduction.dump(process_obj, to_child)\n"
        '  File "C:\\env\\lib\\multiprocessing\\reduction.py", line 60, in dump\n'
        "    ForkingPickler(file, protocol).dump(obj)\n"
        "TypeError: cannot pickle 'generator' object\n"
    )
    assert category(spawn) == C.CONFIG_ERROR
    # a launcher that cannot reach another node with ssh, and one that cannot ssh to itself
    check = (
        "subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no node2"
        " hostname' returned non-zero exit status 255.\n"
    )
    assert category(TRACEBACK + check) == C.NCCL_DISTRIBUTED
    assert category("pdsh@head: node2: ssh exited with exit code 255\n") == C.NCCL_DISTRIBUTED
    local = (
        "localhost: user@localhost: Permission denied (publickey,password).\n"
        "pdsh@head: localhost: ssh exited with exit code 255\n"
    )
    assert category(local) == C.CONFIG_ERROR
    # the runner's check and pdsh aimed at the machine itself: setup, whatever the wording
    for itself in (
        "pdsh@node1: 127.0.0.1: ssh exited with exit code 255\n",
        "pdsh@node1: node1: ssh exited with exit code 255\n",
        TRACEBACK + check.replace("node2", "localhost"),
        TRACEBACK + "RuntimeError: Using hostfile at /job/hostfile but host=localhost was not"
        " reachable via ssh.\n",
    ):
        assert category(itself) == C.CONFIG_ERROR, itself
    other = (
        "RuntimeError: Using hostfile at /job/hostfile but host=node2 was not reachable via ssh.\n"
    )
    assert category(TRACEBACK + other) == C.NCCL_DISTRIBUTED


def test_round_47_wordings() -> None:
    # TensorFlow's two-root-errors summary: cuDNN would not initialize (no "Error" on the line)
    conv = (
        "UnknownError: 2 root error(s) found.\n"
        "  (0) Unknown: Failed to get convolution algorithm. This is probably because cuDNN"
        " failed to initialize, so try looking to see if a warning log message was printed"
        " above.\n"
        "\t [[{{node conv3d/Conv3D}}]]\n"
    )
    assert category(conv) == C.HIP_RUNTIME_INIT
    dnn = (
        "FailedPreconditionError: Exception encountered when calling layer 'e2e' (type E2E).\n"
        "\n"
        "DNN library initialization failed. Look at the errors above for more details."
        " [Op:__forward_call_1074]\n"
    )
    assert category(dnn) == C.HIP_RUNTIME_INIT
    summary = "  (0) Failed precondition: DNN library initialization failed. Look above.\n"
    assert category(TRACEBACK + "FailedPreconditionError: 2 root error(s) found.\n" + summary) == (
        C.HIP_RUNTIME_INIT
    )
    # a GPU out of memory before it is the cause: cuDNN could not get memory for its handle
    starved = (
        "I tensorflow/stream_executor/cuda/cuda_driver.cc:830] failed to allocate 3.75G"
        " (4026531840 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
    )
    assert category(starved + conv) == C.OOM
    # and so in the wordings that name the exception (TensorFlow's, JAX's)
    raised = (
        "tensorflow.python.framework.errors_impl.UnknownError: Failed to get convolution"
        " algorithm. This is probably because cuDNN failed to initialize, so try looking\n"
    )
    assert category(TRACEBACK + raised) == C.HIP_RUNTIME_INIT
    assert category(starved + TRACEBACK + raised) == C.OOM
    jax = (
        "jaxlib.xla_extension.XlaRuntimeError: FAILED_PRECONDITION:"
        " DNN library initialization failed.\n"
    )
    assert category(starved + TRACEBACK + jax) == C.OOM
    # a CUDA extension's kernel wrapper reporting the runtime's initialization error
    ext = "CUDA kernel failed : initialization error\n"
    assert category(ext) == C.HIP_RUNTIME_INIT
    # gin-config's notes under the exception it re-raised are more of that exception
    gin = (
        "ValueError: There is not enough capacity to cover update_horizon and stack_size.\n"
        "  In call to configurable 'ReplayBuffer' (<function ReplayBuffer.__init__ at 0x7f75>)\n"
        "  In call to configurable 'Runner' (<function Runner.__init__ at 0x7f76>)\n"
    )
    assert category(gin) == C.CONFIG_ERROR
    binding = (
        "ValueError: Configurable 'utils.run' doesn't have a parameter named 'mesh_devices'.\n"
        "  In bindings string line 2\n"
        "    utils.run.mesh_devices = ['gpu:0']\n"
    )
    assert every_way(binding) == {(C.CONFIG_ERROR, 1)}
    assert every_way(gin) == {(C.CONFIG_ERROR, 1)}
    # the binding may hold a trigger word; gin's caret goes under it
    caret = (
        "ValueError: No configurable matching reference '@ConvNet()'.\n"
        '  In file "configs/common.gin", line 22\n'
        "    DataLoader.encoder = @ConvNet()\n"
        "                         ^\n"
    )
    assert every_way(caret) == {(C.CONFIG_ERROR, 1)}
    # an indented line that is not gin's still means the output went on, and so does one
    # no deeper than gin's note, or any indented line under a note that names no binding
    assert category(binding.replace("  In bindings", "  Training on")) == C.NONE
    assert category(caret + "  Evaluating on 1000 episodes\n") == C.NONE
    assert category(gin + "    Evaluating on 1000 episodes\n") == C.NONE
    # only the binding line and its caret: a second deeper line is output going on, and a
    # binding that looks like progress is still the binding
    assert category(binding + "    Evaluating on 1000 episodes\n") == C.NONE
    assert every_way(binding.replace("['gpu:0']", "'Epoch 3'")) == {(C.CONFIG_ERROR, 1)}


def test_round_48_wordings() -> None:
    # the GPU driver's library missing from the interpreter's reach (WSL2, a container)
    driver = (
        "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory\n"
    )
    assert category(TRACEBACK + driver) == C.HIP_RUNTIME_INIT
    toolkit = (
        "ImportError: libfoo.so.1: cannot open shared object file: No such file or directory\n"
    )
    assert category(TRACEBACK + toolkit) == C.CONFIG_ERROR
    wsl = "OSError: /usr/lib/wsl/lib/libcuda.so.1: cannot open shared object file: No such file\n"
    assert category(TRACEBACK + wsl) == C.HIP_RUNTIME_INIT
    # printed for an optional import, and the job trained on
    optional = "cupy unavailable, using numpy\nepoch 1 step 10 loss 0.5\nepoch 2 step 10 loss 0.4\n"
    assert category(TRACEBACK + driver + optional) == C.NONE
    # TensorFlow's distributed master that could not reach the other tasks
    master = (
        "E tensorflow/core/distributed_runtime/master.cc:269] Master init: Unavailable: OS Error\n"
    )
    assert category(master) == C.NCCL_DISTRIBUTED
    # TF1's MonitoredTrainingSession creates the session again: a run that trains on after it
    # is not failed by it
    steps = "".join(f"INFO:tensorflow:loss = 0.{i}, step = {i}\n" for i in range(1, 9))
    assert category(master + steps) == C.NONE
    # gRPC retrying a connection ends a healthy parameter server's output too (it prints
    # nothing while the workers train): no finding of its own
    retry = (
        "ps 0, running\n"
        "I0320 05:57:29.309786369    3803 subchannel.cc:484]          Retry in 998 milliseconds\n"
        "I0320 05:57:30.307312499    3796 subchannel.cc:437]          Failed to connect to"
        " channel, retrying\n"
    )
    assert category(retry) == C.NONE
    error = "RuntimeError: shape '[16, 32, 32]' is invalid for input of size 11264\n"
    # an evaluation called with the epoch as `e`, a callback IPython names with its class,
    # a scalar written to TensorBoard: the job had trained
    by_e = '  File "train.py", line 205, in <module>\n    test_loss = test(e)\n'
    assert category("Traceback (most recent call last):\n" + by_e + error) == C.UNKNOWN
    ipython = (
        "---------------------------------------------------------------------------\n"
        "StopIteration                             Traceback (most recent call last)\n"
        "Cell In[47], line 1\n"
        "----> 1 model.fit(train, epochs=100, callbacks=[example_callback])\n"
        "\n"
        "Cell In[42], line 6, in ProduceExample.on_epoch_end(self, epoch, logs)\n"
        "      5 def on_epoch_end(self, epoch, logs=None) -> None:\n"
        "----> 6     data = self.dataset.next()\n"
        "\n"
        "StopIteration: \n"
    )
    assert category(ipython) == C.UNKNOWN
    assert category(ipython.replace("on_epoch_end(self", "on_setup(self")) == C.CONFIG_ERROR
    scalar = (
        '  File "/env/lib/python3.8/site-packages/torch/utils/tensorboard/writer.py", line 353,'
        " in add_scalar\n    summary = scalar(\n"
    )
    assert category(TRACEBACK + scalar + error) == C.UNKNOWN
    # an argument that only begins with "e" is no epoch
    by_name = '  File "train.py", line 205, in <module>\n    test_loss = test(env)\n'
    assert category("Traceback (most recent call last):\n" + by_name + error) == C.CONFIG_ERROR
    by_ep = '  File "train.py", line 205, in <module>\n    acc = test(model, loader, ep)\n'
    assert category("Traceback (most recent call last):\n" + by_ep + error) == C.UNKNOWN
    # `e` passed to Python's eval, to a check, to a name that only holds "test" or
    # "evaluate", or the epochs a setup call is given: setup
    for setup in (
        "    x = [load_test_split(e) for e in cfg.datasets]",
        "    x = [numexpr.evaluate(e) for e in cfg.sizes]",
        '    dims = [eval(e) for e in args.dims.split(",")]',
        "    sizes = [ast.literal_eval(e) for e in cfg.sizes]",
        "    samples = [e for e in samples if is_valid(e)]",
        "    validate(e)",
        "    validate(val_loader, model, criterion, start_epoch)",
        "    check_valid_config(cfg, max_epochs)",
    ):
        frame = '  File "train.py", line 12, in <module>\n' + setup + "\n"
        assert category("Traceback (most recent call last):\n" + frame + error) == (
            C.CONFIG_ERROR
        ), setup
    tbx = (
        '  File "/env/lib/python3.8/site-packages/tensorboardX/writer.py", line 412,'
        " in add_scalars\n    self._check_caffe2_blob(tag)\n"
    )
    assert category(TRACEBACK + tbx + error) == C.UNKNOWN


def test_round_49_wordings() -> None:
    # a CPU-only torch asked for the GPU: a setup mistake, not a GPU runtime that failed
    cpu_only = (
        '  File "C:\\Anaconda3\\lib\\site-packages\\torch\\cuda\\__init__.py", line 210,'
        " in _lazy_init\n"
        '    raise AssertionError("Torch not compiled with CUDA enabled")\n'
        "AssertionError: Torch not compiled with CUDA enabled\n"
    )
    assert category(TRACEBACK + cpu_only) == C.CONFIG_ERROR
    # printed as a script tried the GPU, and the job trained on with the CPU
    cpu = "epoch 1 step 10 loss 0.5\nepoch 2 step 10 loss 0.4\n"
    assert category(TRACEBACK + cpu_only + cpu) == C.NONE
    # PaddlePaddle's error summary for the GPU's memory, under the MemoryError it raises
    paddle = (
        "MemoryError:\n"
        "\n"
        "----------------------\n"
        "Error Message Summary:\n"
        "----------------------\n"
        "ResourceExhaustedError:\n"
        "\n"
        "Out of memory error on GPU 0. Cannot allocate 128.000000MB memory on GPU 0,"
        " 7.995605GB memory has been allocated and available memory is only 0.000000B.\n"
    )
    assert category(paddle) == C.OOM


def test_round_51_wordings() -> None:
    # PaddlePaddle's loader that cannot open cuDNN, as Paddle 1 and Paddle 2 print it
    paddle1 = (
        "Error Message Summary:\n"
        "----------------------\n"
        "Error: Cannot load cudnn shared library. Cannot invoke method cudnnGetVersion at"
        " (/paddle/paddle/fluid/platform/dynload/cudnn.cc:63)\n"
    )
    assert category(paddle1) == C.HIP_RUNTIME_INIT
    paddle2 = (
        "PreconditionNotMetError: Cannot load cudnn shared library. Cannot invoke method"
        " cudnnGetVersion.\n"
        "  [Hint: cudnn_dso_handle should not be null.] (at /paddle/phi/backends/dynload/"
        "cudnn.cc:64)\n"
    )
    assert category(paddle2) == C.HIP_RUNTIME_INIT
    # Paddle's loader on ROCm
    miopen = (
        "RuntimeError: (PreconditionNotMet) Cannot load miopen shared library. Cannot invoke"
        " method miopenGetVersion.\n"
    )
    assert category(TRACEBACK + miopen) == C.HIP_RUNTIME_INIT
    # a healthy loader's warning that names an error and a library it looked for
    looked = (
        "W0101 00:00:00.000000 1 dynamic_loader.cc:278] The third-party dynamic library"
        " (libcudnn.so) that Paddle depends on is not configured correctly. (error code is"
        " libcudnn.so: cannot open shared object file)\n"
    )
    assert category(looked) == C.NONE
    # Caffe2's gloo pair that never connected to its peer
    gloo = (
        TRACEBACK + "RuntimeError: [/src/third_party/gloo/gloo/transport/tcp/pair.cc:611]"
        " Connect timeout [172.17.27.13]:27023\n"
    )
    assert category(gloo) == C.NCCL_DISTRIBUTED
    # one SLURM task failed on its own and srun cancelled the step: the failure, not a kill
    failed_first = (
        "srun: error: node1: task 5: Exited with exit code 1\n"
        "srun: launch/slurm: _step_signal: Terminating StepId=43575862.0\n"
        "slurmstepd: error: *** STEP 43575862.0 ON node1 CANCELLED AT 2021-07-14T08:00:36 ***\n"
        "srun: error: node1: tasks 3,7: Killed\n"
    )
    assert category(failed_first) == C.UNKNOWN
    # a requeue (or a time limit) first: the tasks' exits under it are the cancel's doing
    cancelled_first = (
        "slurmstepd: error: *** JOB 608 ON node1 CANCELLED AT 2022-08-12T02:06:12"
        " DUE TO JOB REQUEUE ***\n"
        "srun: error: node1: tasks 2-3: Exited with exit code 1\n"
    )
    assert category(cancelled_first) == C.KILLED
    # a shell's 128 + signal is a signal, not the task's own error
    signalled = "srun: error: node1: task 0: Exited with exit code 143\n"
    assert category(signalled) == C.KILLED
    # a failed earlier step of the batch script, then training, then the time limit
    prep = "srun: error: node1: task 0: Exited with exit code 1\n"
    epochs = "Epoch 1/20 loss 0.8\nEpoch 2/20 loss 0.7\nEpoch 7/20 loss 0.2\n"
    limit = (
        "slurmstepd: error: *** JOB 608 ON node1 CANCELLED AT 2021-07-14T08:00:36"
        " DUE TO TIME LIMIT ***\n"
    )
    assert category(prep + epochs + limit) == C.KILLED
    # the task's own error above still names the cause
    oom = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    assert category(TRACEBACK + oom + failed_first) == C.OOM


def test_round_52_wordings() -> None:
    # torch's JIT compiler too old for the card
    nvrtc = "RuntimeError: nvrtc: error: invalid value for --gpu-architecture (-arch)\n"
    assert category(TRACEBACK + nvrtc) == C.HIP_RUNTIME_INIT
    # torch's too-old-GPU warning: the end of the output, or excused by the job going on
    old = (
        "/x/torch/cuda/__init__.py:87: UserWarning: \n"
        "    Found GPU0 Ellesmere [Radeon RX 470/480/570/570X/580/580X] which is of cuda"
        " capability 3.0.\n"
        "    PyTorch no longer supports this GPU because it is too old.\n"
        "    The minimum cuda capability that we support is 3.5.\n"
        "    \n"
        "  warnings.warn(old_gpu_warn % (d, name, major, capability[1]))\n"
    )
    assert category(old) == C.HIP_RUNTIME_INIT
    assert category(old + "tensor([9], device='cuda:0')\n") == C.NONE
    no_kernel = (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device\n"
    )
    assert category(old + "Processing: 01.jpg\n" + TRACEBACK + no_kernel) == C.HIP_RUNTIME_INIT
    # a checkpoint that does not fit the model, its RuntimeError line cut off
    mismatch = "".join(
        f"\tsize mismatch for layer4.{i}.bn2.bias: copying a param with shape"
        " torch.Size([512]) from checkpoint, the shape in current model is torch.Size([2048]).\n"
        for i in range(3)
    )
    assert category(mismatch) == C.CONFIG_ERROR
    assert category(mismatch + "Epoch [1][50/500] loss: 1.2\n") == C.NONE  # a loader that warns
    # multiprocessing's bootstrapping message without its RuntimeError line
    bootstrap = (
        " An attempt has been made to start a new process before the\n"
        "        current process has finished its bootstrapping phase.\n"
        "\n"
        "        This probably means that you are not using fork to start your\n"
    )
    assert category(bootstrap) == C.DATALOADER_WORKER
    # Windows: a spawned worker given a tensor whose storage cannot be shared
    mapping = (
        "RuntimeError: Couldn't open shared file mapping: <torch_13684_4004974554>,"
        " error code: <0>\n"
    )
    assert category(TRACEBACK + mapping) == C.DATALOADER_WORKER


def test_round_53_wordings() -> None:
    # Caffe refusing the net it was given: a setup mistake, not a native crash
    glog = "F1009 16:28:01.030027 19950 net.cpp:753] Check failed: "
    stack = (
        "*** Check failure stack trace: ***\n    @     0x7f4c2c149f5d  google::LogMessage::Fail()\n"
    )
    for refused in (
        "registry.count(type) == 1 (0 vs. 1) Unknown layer type: Python (known types: AbsVal)",
        "registry.count(type) == 0 (1 vs. 0) Layer type Convolution already registered.",
        "target_blobs.size() == source_layer.blobs_size() (1 vs. 2) Incompatible number of"
        " blobs for layer conv0",
        "target_blobs[j]->shape() == source_blob->shape() Cannot copy param 0 weights from"
        " layer 'fc8'; shape mismatch.",
    ):
        assert category(glog + refused + "\n" + stack) == C.CONFIG_ERROR, refused
    # another CHECK is still a native abort
    assert category(glog + "count_ == other.count() (4 vs. 8)\n" + stack) == C.SEGFAULT_ABORT
    # TensorFlow 1 restoring a checkpoint of another graph
    restore = (
        "NotFoundError (see above for traceback): Key BoxPredictor_0/BoxEncodingPredictor/"
        "biases/ExponentialMovingAverage not found in checkpoint\n"
        "         [[Node: save/RestoreV2 = RestoreV2[dtypes=[DT_FLOAT, DT_INT64]]]\n"
    )
    assert category(restore) == C.CONFIG_ERROR
    # cuBLAS that could not start: the runtime, unless the GPU's memory ran out with it
    cublas = (
        "RuntimeError: cublas runtime error : library not initialized at"
        " /b/wheel/pytorch-src/torch/lib/THC/THCGeneral.c:394\n"
    )
    assert category(TRACEBACK + cublas) == C.HIP_RUNTIME_INIT
    hipblas = (
        "RuntimeError: CUDA error: HIPBLAS_STATUS_NOT_INITIALIZED when calling"
        " `hipblasCreate(handle)`\n"
    )
    assert category(TRACEBACK + hipblas) == C.HIP_RUNTIME_INIT  # the same on ROCm
    oom = (
        "E tensorflow/stream_executor/cuda/cuda_driver.cc:890] failed to alloc 2.00G:"
        " CUDA_ERROR_OUT_OF_MEMORY: out of memory\n"
    )
    status = (
        "E tensorflow/stream_executor/cuda/cuda_blas.cc:238] failed to create cublas handle:"
        " CUBLAS_STATUS_NOT_INITIALIZED\n"
    )
    assert category(oom + status) == C.OOM
    # ranks that disagree on a collective
    mismatch = (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running"
        " collective: CollectiveFingerPrint(SequenceNumber=14370, OpType=BROADCAST)\n"
    )
    assert category(TRACEBACK + mismatch) == C.NCCL_DISTRIBUTED
    horovod = (
        "[1,2]<stderr>:tensorflow.python.framework.errors_impl.FailedPreconditionError:"
        " Mismatched ALLREDUCE CPU/GPU device selection: One rank specified device GPU, but"
        " another rank specified device CPU.\n"
    )
    assert category(horovod) == C.NCCL_DISTRIBUTED


def test_round_54_wordings() -> None:
    # (Lua) Torch's allocator out of RAM, its line holding no "Error", above a Lua traceback
    lua = (
        "/usr/local/torch/install/bin/luajit: $ Torch: not enough memory: you tried to"
        " allocate 2GB. Buy new RAM! at /tmp/torch7/lib/TH/THGeneral.c:266\n"
        "stack traceback:\n"
        "\t[C]: in function 'Tensor'\n"
        "\ttrain.lua:337: in function 'train'\n"
    )
    assert category(lua) == C.HOST_OOM
    # TensorFlow on ROCm failing to allocate on the device, and nothing after it
    rocm = "".join(
        f"2019-06-11 09:44:13.45216{i}: E tensorflow/stream_executor/rocm/rocm_driver.cc:630]"
        f" failed to allocate {size} (6951051776 bytes) from device: hipError_t(1002)\n"
        for i, size in enumerate(("6.47G", "5.83G", "5.24G"))
    )
    assert category(rocm) == C.OOM
    named = rocm.replace("hipError_t(1002)", "HIP_ERROR_OutOfMemory")  # later ROCm builds
    assert category(named) == C.OOM
    # the allocator shrinking its request and training going on: lived through
    trained = "Epoch 1/10\n10/100 [==>...] - loss: 0.52\n20/100 [====>...] - loss: 0.49\n"
    assert category(rocm + trained) == C.NONE


def test_round_55_wordings() -> None:
    # NumPy 1.24's notes under a removed alias are more of its AttributeError
    numpy = (
        "AttributeError: module 'numpy' has no attribute 'float'.\n"
        "`np.float` was a deprecated alias for the builtin `float`. To avoid this error in"
        " existing code, use `float` by itself.\n"
        "The aliases was originally deprecated in NumPy 1.20; for more details and guidance"
        " see the original release note at:\n"
        "    https://numpy.org/devdocs/release/1.20.0-notes.html#deprecations\n"
    )
    assert category(numpy) == C.CONFIG_ERROR
    assert category(numpy.splitlines(True)[0] + "epoch 1 step 5 loss 0.3\n") == C.NONE
    # MPS's assertion, its path without the leading slash and quoted with '
    mps = (
        "AppleInternal/Library/BuildRoots/20d6c351/Library/Caches/com.apple.xbs/Sources/"
        "MetalPerformanceShaders/MPSCore/Types/MPSNDArray.mm:705: failed assertion"
        " '[MPSNDArray initWithDevice:descriptor:] Error: product of dimension sizes > 2**31'\n"
    )
    assert category(mps) == C.SEGFAULT_ABORT
    # an abort glued to the message before it
    faiss = (
        "Faiss assertion index.ntotal == 0 failed in virtual void faiss::Clustering::train("
        "faiss::Clustering::idx_t, const float*, faiss::Index&) at Clustering.cpp:152Aborted"
        " (core dumped)\n"
    )
    assert category(faiss) == C.SEGFAULT_ABORT
    # macOS shells name the signal's number
    bar = "  0%|                                          | 0/409 [00:00<?, ?b/s]"
    assert category(bar + "Bus error: 10\n") == C.SEGFAULT_ABORT
    assert category("Illegal instruction: 4\n") == C.SEGFAULT_ABORT
    assert category("loss: Bus error: 10 samples skipped, go on\n") == C.NONE


def test_round_56_wordings() -> None:
    # vLLM with too little GPU memory left for its KV cache
    blocks = (
        "ValueError: No available memory for the cache blocks. Try increasing"
        " `gpu_memory_utilization` when initializing the engine.\n"
    )
    assert category(TRACEBACK + blocks) == C.OOM
    seq = (
        "The model's max seq len (29000) is larger than the maximum number of tokens that can"
        " be stored in KV cache (23648). Try increasing `gpu_memory_utilization` or decreasing"
        " `max_model_len` when initializing the engine.\n"
    )
    assert category("# GPU blocks: 1478, # CPU blocks: 2048\n" + seq) == C.OOM
    assert category(TRACEBACK + "ValueError: " + seq) == C.OOM
    # Windows: torch cannot load its GPU DLLs (any locale); its CPU library is not this
    dll = (
        "OSError: [WinError 126] {}. Error loading"
        ' "C:\\app\\venv\\lib\\site-packages\\torch\\lib\\{}.dll" or one of its dependencies.\n'
    )
    gpu = dll.format("The specified module could not be found", "caffe2_nvrtc")
    assert category(TRACEBACK + gpu) == C.HIP_RUNTIME_INIT
    zh = dll.format("找不到指定的模块。", "caffe2_nvrtc")
    assert category(TRACEBACK + zh) == C.HIP_RUNTIME_INIT
    cpu = dll.format("The specified module could not be found", "c10")
    assert category(TRACEBACK + cpu) == C.CONFIG_ERROR
    # torch's warning for a GPU its build has no kernels for, on the warning's own line
    sm = (
        "/x/torch/cuda/__init__.py:125: UserWarning: NVIDIA RTX A6000 with CUDA capability"
        " sm_86 is not compatible with the current PyTorch installation.\n"
    )
    assert category(sm) == C.HIP_RUNTIME_INIT
    assert category(sm + "epoch 1 step 10 loss 0.5\nepoch 2 step 10 loss 0.4\n") == C.NONE
    assert category("/x/a.py:3: UserWarning: the sm_86 build is slow\n") == C.NONE
    # a quantized model loaded on another device than the training one
    quant = (
        "ValueError: You can't train a model that has been loaded in 8-bit precision on a"
        " different device than the one you're training on. Make sure you loaded\n"
        "the model on the correct device using for example `device_map={'':0}`\n"
    )
    assert category(quant) == C.CONFIG_ERROR
    # Ascend HCCL's error code after the failure's name
    hccl = (
        "[PID: 749] 2025-12-29-03:16:15.787.356 Get_Socket_Timeout(EI0006): Getting socket"
        " times out. Reason: 1. The remote does not initiate a connect request.\n"
        "        Solution: 1. Check the rank service processes with other errors.\n"
    )
    assert category(hccl) == C.NCCL_DISTRIBUTED


def test_round_51_56_review_cases() -> None:
    # cuBLAS that could not start after a device-side assert: the assert (a label or token
    # out of range) is the cause
    assert_line = (
        "../aten/src/ATen/native/cuda/Indexing.cu:699: indexSelectLargeIndex: block: [0,0,0],"
        " thread: [0,0,0] Assertion `srcIndex < srcSelectDimSize` failed.\n"
    )
    cublas = (
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling"
        " `cublasCreate(handle)`\n"
    )
    assert category(assert_line + TRACEBACK + cublas) == C.CONFIG_ERROR
    # Horovod's other mismatches between ranks
    for said in (
        "Mismatched data types: One rank had type float32, but another rank had type int64.",
        "Mismatched operations: One rank did an ALLREDUCE, but another rank did an ALLGATHER.",
    ):
        line = "horovod.common.exceptions.HorovodInternalError: " + said + "\n"
        assert category(TRACEBACK + line) == C.NCCL_DISTRIBUTED, said
    # Windows: the same allocator's other message
    view = (
        "RuntimeError: Couldn't map view of shared file <torch_11952_2418289937>,"
        " error code: <1455>\n"
    )
    assert category(TRACEBACK + view) == C.DATALOADER_WORKER
    # a loader that only warned of sizes, then the kill that ended the job
    mismatch = "".join(
        f"\tsize mismatch for layer4.{i}.bn2.bias: copying a param with shape"
        " torch.Size([512]) from checkpoint, the shape in current model is torch.Size([2048]).\n"
        for i in range(3)
    )
    assert category(mismatch + "Killed\n") == C.HOST_OOM
    # PyTorch 1.x's reallocation out of RAM
    realloc = (
        "RuntimeError: $ Torch: not enough memory: you tried to reallocate 1GB. Buy new RAM!"
        " at /pytorch/aten/src/TH/THGeneral.cpp:204\n"
    )
    assert category(TRACEBACK + realloc) == C.HOST_OOM
    # TF 1's other words for a checkpoint of another graph
    for restore in (
        'NotFoundError (see above for traceback): Tensor name "bert/embeddings/LayerNorm/beta"'
        " not found in checkpoint files ./model.ckpt\n",
        "InvalidArgumentError (see above for traceback): Restoring from checkpoint failed. This"
        " is most likely due to a mismatch between the current graph and the graph from the"
        " checkpoint.\n",
    ):
        assert category(restore) == C.CONFIG_ERROR, restore
    # older Caffe's weights that do not fit, and a solver type the build lacks
    glog = "F0101 00:00:00.000000 1 blob.cpp:470] Check failed: "
    stack = "*** Check failure stack trace: ***\n"
    for refused in (
        "ShapeEquals(proto) shape mismatch (reshape not set)",
        "registry.count(type) == 1 (0 vs. 1) Unknown solver type: Adam (known types: SGD)",
    ):
        assert category(glog + refused + "\n" + stack) == C.CONFIG_ERROR, refused
    # macOS shells' kill and stop, an abort glued after a word
    assert category("epoch 3\nKilled: 9\n") == C.HOST_OOM
    assert category("epoch 3\nTerminated: 15\n") == C.KILLED
    assert category("  what():  CUDA errorAborted (core dumped)\n") == C.SEGFAULT_ABORT


def test_round_57_wordings() -> None:
    # THC's initialisation failing with the CUDA driver's unknown error
    thc = (
        "RuntimeError: cuda runtime error (999) : unknown error at"
        " /opt/conda/conda-bld/pytorch/work/aten/src/THC/THCGeneral.cpp:47\n"
    )
    assert category(TRACEBACK + thc) == C.HIP_RUNTIME_INIT
    # a device-side assert reported there is still the assert (a label out of range)
    assert_at_thc = (
        "RuntimeError: cuda runtime error (59) : device-side assert triggered at"
        " /pytorch/aten/src/THC/THCGeneral.cpp:663\n"
    )
    assert category(TRACEBACK + assert_at_thc) == C.UNKNOWN
    # ComfyUI's log line for torch's OutOfMemoryError, its traceback cut off
    comfy = (
        "2024-12-16 17:10:56,767 - root - ERROR - !!! Exception during processing !!!"
        " Allocation on device \n"
        "2024-12-16 17:10:56,770 - root - ERROR - Traceback (most recent call last):\n"
        '  File "/root/ComfyUI/execution.py", line 317, in execute\n'
    )
    assert category(comfy) == C.OOM
    assert category("- **Exception Message:** Allocation on device \n") == C.OOM


def test_round_58_wordings() -> None:
    # FlashAttention on a GPU older than Ampere
    flash = "[rank0]: RuntimeError: FlashAttention only supports Ampere GPUs or newer.\n"
    assert category(flash + "  0%|          | 0/1500 [00:00<?, ?it/s]\n") == C.HIP_RUNTIME_INIT
    # a CUDA extension that cannot load the CUDA runtime it was built against
    cudart = (
        '  File "pcdet/ops/roiaware_pool3d/roiaware_pool3d_utils.py", line 4, in <module>\n'
        "    from . import roiaware_pool3d_cuda\n"
        "ImportError: libcudart.so.8.0: cannot open shared object file: No such file or"
        " directory\n"
    )
    assert category(TRACEBACK + cudart) == C.HIP_RUNTIME_INIT
    # an optional import that fails so while the job trains on
    trains = "epoch 1 step 10 loss 0.5\nepoch 2 step 10 loss 0.4\n"
    assert category(cudart.splitlines(True)[-1] + trains) == C.NONE


def test_round_59_wordings() -> None:
    # XGBoost's device allocator out of GPU memory
    xgb = (
        "ml.dmlc.xgboost4j.java.XGBoostError: [22:22:41] src/tree/updater_gpu_hist.cu:712:"
        " Exception in gpu_hist: [22:22:41] src/common/device_helpers.cuh:428: Memory"
        " allocation error on worker 3: Caching allocator\n"
        "- Free memory: 224067584\n"
        "- Requested memory: 878511352\n"
    )
    assert category(xgb) == C.OOM
    # OpenCL's allocation failure as Boost.Compute throws it (LightGBM on the GPU)
    opencl = (
        "terminate called after throwing an instance of"
        " 'boost::wrapexcept<boost::compute::opencl_error>'\n"
        "  what():  Memory Object Allocation Failure\n"
    )
    assert category(opencl) == C.OOM


def test_second_review_cases() -> None:
    trains = "epoch 1 step 10 loss 0.5\nepoch 2 step 20 loss 0.4\n"
    # ComfyUI catches the GPU's out of memory and serves the next prompt
    comfy = (
        "got prompt\n"
        "2024-12-16 17:10:56,767 - root - ERROR - !!! Exception during processing !!!"
        " Allocation on device\n"
    )
    assert category(comfy) == C.OOM
    served = "Prompt executed in 5.21 seconds\ngot prompt\nPrompt executed in 12.00 seconds\n"
    assert category(comfy + served) == C.NONE
    # FlashAttention 3's words; a program that falls back to another attention and trains
    hopper = "RuntimeError: FlashAttention-3 only supports Hopper GPUs or newer.\n"
    assert category(TRACEBACK + hopper) == C.HIP_RUNTIME_INIT
    fallback = (
        "WARNING:root:flash_attn error: FlashAttention only supports Ampere GPUs or newer."
        " Falling back to SDPA.\n"
    )
    assert category(fallback + trains) == C.NONE
    # a task that failed while another rank printed one more step: still the task's failure
    rank_went_on = (
        "Epoch 5 step 100/500 loss 0.3\n"
        "srun: error: node2: task 3: Exited with exit code 1\n"
        "Epoch 5 step 110/500 loss 0.3\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
        "slurmstepd: error: *** STEP 123.0 ON node1 CANCELLED AT 2021-07-14T08:00:36 ***\n"
    )
    assert category(rank_went_on) == C.UNKNOWN
    # vLLM V1's words for a KV cache too small for the model's length
    v1 = (
        "(EngineCore_DP0 pid=1094) ValueError: To serve at least one request with the models's"
        " max seq len (262144), (24.0 GiB KV cache is needed, which is larger than the available"
        " KV cache memory (3.18 GiB).\n"
    )
    assert category(v1) == C.OOM
    # current accelerate's wording for a quantized model on another device
    quant = (
        "ValueError: You can't train a model that has been loaded in 8-bit or 4-bit precision"
        " on a different device than the one you're training on.\n"
    )
    found = diagnose_text(TRACEBACK + quant, catalogue=shipped())
    assert found.signature == "quantized-model-wrong-device"
    # a bus error counted by a PCIe report is not a crash
    assert category("epoch 3\nPCIe AER summary: corrected Bus error: 10\n") == C.NONE
    # torch's Windows GPU DLLs with other names
    dll = (
        'OSError: [WinError 126] The specified module could not be found. Error loading "C:\\a'
        '\\torch\\lib\\nvrtc-builtins64_118.dll" or one of its dependencies.\n'
    )
    assert category(TRACEBACK + dll) == C.HIP_RUNTIME_INIT
    # THC's initialisation error (3) in a forked DataLoader worker is not the GPU runtime
    worker = (
        "RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/x/torch/utils/data/_utils/worker.py", line 178, in _worker_loop\n'
        "RuntimeError: cuda runtime error (3) : initialization error at"
        " /pytorch/aten/src/THC/THCGeneral.cpp:50\n"
    )
    assert category(TRACEBACK + worker) == C.CONFIG_ERROR
