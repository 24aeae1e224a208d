"""The built-in probe stages. Each takes a :class:`StageContext` and returns its details.

Standard library at import time; torch is imported by the ``import`` stage and reached
through ``ctx.torch`` afterwards. Only APIs present since torch 1.13 are used, and no NumPy.
Results computed on the device are compared with the CPU where that is cheap, because a
broken kernel on a consumer card more often returns garbage than raises.
"""

from __future__ import annotations

import importlib
import inspect
import math
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rsup.workers.probeidentity import cpu_identity, gpu_identity
from rsup.workers.probeidentity import kfd_gfx_archs as kfd_gfx_archs

MIB = 1 << 20
# Set by the dataloader remedy: workers stay alive between epochs (and no pinning thread).
ENV_DATALOADER_SPAWN = "RSUP_DATALOADER_SPAWN"

Details = dict[str, Any]


class StageSkipped(Exception):
    """Raised by a stage that does not apply here; the message is the reason."""


class StageContext:
    """What a stage sees: ``device`` (torch device string), ``torch`` and ``info`` (detect)."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.torch: Any = None
        self.info: dict[str, Any] = {}

    @property
    def is_cuda(self) -> bool:
        return self.device.startswith("cuda")


def note(message: str) -> None:
    """A progress note on stderr: the caller quotes the last ones when a stage hangs."""
    sys.stderr.write(f"probe: {message}\n")
    sys.stderr.flush()


def _sync(ctx: StageContext) -> None:
    if ctx.is_cuda:
        ctx.torch.cuda.synchronize(ctx.device)


class _StrictFloat:
    """Turns TF32 off for a block, so device results can be compared with the CPU."""

    def __init__(self, torch: Any) -> None:
        self.backends = torch.backends
        self.saved = (False, False)

    def __enter__(self) -> None:
        self.saved = (self.backends.cuda.matmul.allow_tf32, self.backends.cudnn.allow_tf32)
        self.backends.cuda.matmul.allow_tf32 = False
        self.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc: object) -> None:
        self.backends.cuda.matmul.allow_tf32, self.backends.cudnn.allow_tf32 = self.saved


def _compare(actual: Any, expected: Any, what: str) -> float:
    error = float((actual.float() - expected.float()).abs().max())
    scale = float(expected.abs().max())
    if not math.isfinite(error) or error > 1e-3 * (1.0 + scale):
        raise RuntimeError(
            f"{what} differs from the CPU: max error {error:g} (values up to {scale:g})"
        )
    return error


def _generator(torch: Any, seed: int) -> Any:
    gen = torch.Generator()
    gen.manual_seed(seed)
    return gen


def stage_import(ctx: StageContext) -> Details:
    ctx.torch = importlib.import_module("torch")
    return {"torch": ctx.torch.__version__, "path": os.path.dirname(ctx.torch.__file__),
            "python": platform.python_version(), "executable": sys.executable}  # fmt: skip


def stage_detect(ctx: StageContext) -> Details:
    torch = ctx.torch
    info: Details = {"torch": torch.__version__, "hip": getattr(torch.version, "hip", None),
                     "cuda": torch.version.cuda}  # fmt: skip
    if ctx.device == "cpu":
        info.update(cpu_identity(torch))
    elif ctx.is_cuda:
        info.update(gpu_identity(torch, ctx.device))
    else:
        raise RuntimeError(f"unsupported device {ctx.device!r}: use cpu, cuda or cuda:N")
    ctx.info = info
    return info


def stage_memory(ctx: StageContext) -> Details:
    if ctx.is_cuda:
        mem_get_info = getattr(ctx.torch.cuda, "mem_get_info", None)
        if mem_get_info is None:
            raise StageSkipped("this torch has no torch.cuda.mem_get_info")
        free, total = mem_get_info(ctx.device)
        ctx.info["free_bytes"] = int(free)
        return {"free_bytes": int(free), "total_bytes": int(total), "where": "device"}
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        raise StageSkipped("no /proc/meminfo: host memory unknown") from None
    fields: dict[str, str] = dict(re.findall(r"^(\w+):\s+(\d+) kB", text, re.M))
    if "MemTotal" not in fields:
        raise StageSkipped("/proc/meminfo has no MemTotal")
    free = int(fields.get("MemAvailable", fields.get("MemFree", "0"))) * 1024
    return {"free_bytes": free, "total_bytes": int(fields["MemTotal"]) * 1024, "where": "host"}


def stage_alloc(ctx: StageContext) -> Details:
    torch = ctx.torch
    size = 64 * MIB
    if ctx.is_cuda:
        free = int(ctx.info.get("free_bytes") or 1024 * MIB)
        size = max(MIB, min(256 * MIB, free // 4))
    block = torch.empty(size, dtype=torch.uint8, device=ctx.device)
    block.fill_(1)
    total = int(block.sum().item())
    if total != size:
        raise RuntimeError(f"wrote {size} ones but read back a sum of {total}")
    del block
    chunks = [torch.full((MIB // 4,), float(i), device=ctx.device) for i in range(32)]
    _sync(ctx)
    for i in (0, 15, 31):
        if float(chunks[i][-1].item()) != float(i):
            raise RuntimeError(f"small block {i} holds the wrong value")
    del chunks
    if ctx.is_cuda:
        torch.cuda.empty_cache()
    return {"bytes": size, "small_blocks": 32}


def stage_matmul(ctx: StageContext) -> Details:
    torch = ctx.torch
    n = 512
    a = torch.randn(n, n, generator=_generator(torch, 0)).to(ctx.device)
    with _StrictFloat(torch):
        _compare((a @ torch.eye(n, device=ctx.device)).cpu(), a.cpu(), "a @ I")
        started = time.monotonic()
        for _ in range(4):
            product = a @ a
        _sync(ctx)
        seconds = max(time.monotonic() - started, 1e-9)
    if not bool(torch.isfinite(product).all()):
        raise RuntimeError("matmul produced inf or nan")
    details: Details = {"size": n, "gflops": round(4 * 2 * n**3 / seconds / 1e9, 1)}
    if ctx.is_cuda:
        half = a.half() @ a.half()
        _sync(ctx)
        details["fp16_finite"] = bool(torch.isfinite(half).all())
    return details


def stage_transfer(ctx: StageContext) -> Details:
    torch = ctx.torch
    host = torch.randn(1024, 1024, generator=_generator(torch, 1))
    started = time.monotonic()
    device = host.to(ctx.device)
    back = device.to("cpu")
    seconds = max(time.monotonic() - started, 1e-9)
    if not torch.equal(back, host):
        raise RuntimeError(f"a host -> {ctx.device} -> host round trip changed the data")
    with _StrictFloat(torch):
        result = ((device * 2 + 1) @ device[:, :64]).cpu()
        error = _compare(result, (host * 2 + 1) @ host[:, :64], "transfer result")
    details: Details = {"bytes": 4 * MIB, "round_trip_mb_s": round(8 / seconds, 1)}
    details["max_error"] = error
    if ctx.is_cuda:
        pinned = host.pin_memory().to(ctx.device, non_blocking=True)
        _sync(ctx)
        details["pinned_ok"] = bool(torch.equal(pinned.cpu(), host))
    return details


# (label, input shape, weight shape, stride, padding, groups)
CONV_CASES = (
    ("44x44 3->16 k3", (1, 3, 44, 44), (16, 3, 3, 3), 1, 1, 1),  # the shape that hung RDNA1
    ("64x64 16->32 k3 s2", (2, 16, 64, 64), (32, 16, 3, 3), 2, 1, 1),
    ("32x32 depthwise k3", (2, 32, 32, 32), (32, 1, 3, 3), 1, 1, 32),
    ("32x32 32->64 k1", (2, 32, 32, 32), (64, 32, 1, 1), 1, 0, 1),
)


def stage_conv2d(ctx: StageContext) -> Details:
    torch = ctx.torch
    conv2d = torch.nn.functional.conv2d
    gen = _generator(torch, 2)
    cases: Details = {}
    with _StrictFloat(torch), torch.no_grad():
        for label, x_shape, w_shape, stride, padding, groups in CONV_CASES:
            note(f"conv2d {label}")
            x, w = torch.randn(*x_shape, generator=gen), torch.randn(*w_shape, generator=gen)
            started = time.monotonic()
            out = conv2d(x.to(ctx.device), w.to(ctx.device), None, stride, padding, 1, groups)
            _sync(ctx)
            cases[label] = round(time.monotonic() - started, 4)
            _compare(out.cpu(), conv2d(x, w, None, stride, padding, 1, groups), "conv2d " + label)
    return {"cases": cases}


def _small_cnn(nn: Any) -> Any:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip


def stage_backward(ctx: StageContext) -> Details:
    torch = ctx.torch
    torch.manual_seed(3)
    model = _small_cnn(torch.nn).to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = torch.randn(8, 3, 44, 44).to(ctx.device)
    labels = torch.randint(0, 10, (8,)).to(ctx.device)
    before = [p.detach().clone() for p in model.parameters()]
    losses: list[float] = []
    for step in range(3):
        note(f"backward step {step}")
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.item()))
    if not all(math.isfinite(v) for v in losses):
        raise RuntimeError(f"loss is not finite: {losses}")
    after = list(model.parameters())
    changed = sum(1 for i, old in enumerate(before) if not torch.equal(after[i].detach(), old))
    if not changed:
        raise RuntimeError("the optimizer step changed no parameter")
    return {"losses": [round(v, 5) for v in losses], "parameters_changed": changed}


def _input_grad(forward: Callable[[Any], Any], x: Any) -> Any:
    inp = x.detach().clone().requires_grad_(True)
    forward(inp).sum().backward()
    return inp.grad


def stage_grad_checkpoint(ctx: StageContext) -> Details:
    torch = ctx.torch
    checkpoint = importlib.import_module("torch.utils.checkpoint").checkpoint
    kwargs: Details = {}
    if "use_reentrant" in inspect.signature(checkpoint).parameters:
        kwargs["use_reentrant"] = False
    torch.manual_seed(4)
    nn = torch.nn
    block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
    block = block.to(ctx.device)
    x = torch.randn(2, 8, 32, 32).to(ctx.device)
    with _StrictFloat(torch):
        plain = _input_grad(block, x)
        checked = _input_grad(lambda inp: checkpoint(block, inp, **kwargs), x)
        error = _compare(checked.cpu(), plain.cpu(), "checkpointed gradient")
    return {"use_reentrant": kwargs.get("use_reentrant"), "max_error": error}


def stage_dataloader(ctx: StageContext) -> Details:
    data = importlib.import_module("torch.utils.data")
    # Imported by name (not __main__) so the spawn workers can unpickle it.
    dataset = importlib.import_module("rsup.workers.probe").ProbeDataset(32)
    persistent = os.environ.get(ENV_DATALOADER_SPAWN) == "1"
    loader = data.DataLoader(
        dataset, batch_size=8, num_workers=2, multiprocessing_context="spawn",
        persistent_workers=persistent, pin_memory=ctx.is_cuda and not persistent,
    )  # fmt: skip
    started = time.monotonic()
    first_batch, total, label_sum = 0.0, 0.0, 0
    for images, labels in loader:
        first_batch = first_batch or time.monotonic() - started
        total += float(images.to(ctx.device, non_blocking=True).sum().item())
        label_sum += int(labels.sum().item())
    del loader
    expected_labels = sum(range(32))
    expected_total = 3 * 8 * 8 * expected_labels
    if label_sum != expected_labels or abs(total - expected_total) > 1e-3 * expected_total:
        raise RuntimeError(f"workers delivered wrong data: labels {label_sum}, sum {total:g}")
    return {"batches": 4, "workers": 2, "context": "spawn", "persistent_workers": persistent,
            "first_batch_s": round(first_batch, 3)}  # fmt: skip


BUILTINS: dict[str, Callable[[StageContext], Details]] = {
    "import": stage_import,
    "detect": stage_detect,
    "memory": stage_memory,
    "alloc": stage_alloc,
    "matmul": stage_matmul,
    "transfer": stage_transfer,
    "conv2d": stage_conv2d,
    "backward": stage_backward,
    "grad_checkpoint": stage_grad_checkpoint,
    "dataloader": stage_dataloader,
}
