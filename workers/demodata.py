"""A small synthetic thermal data set in YOLO format, made at run time.

Warm blobs of a few classes (each class has its own shape and size) on a cold, noisy
background; grayscale PNGs written with zlib and struct, so nothing is downloaded and
only the standard library is needed::

    python -m rsup.workers.demodata DIR [--train 64] [--val 16] [--size 160]
                                        [--classes 3] [--seed 0]

The same arguments always give the same bytes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import struct
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path

BASE_NAMES = ("person", "vehicle", "animal")

# Background: cold (dark) values with sensor noise; blobs: warm values with a hot core.
_COLD_LOW, _COLD_SPAN = 18, 34
_WARM_EDGE, _WARM_CORE = 150, 250


@dataclass(frozen=True)
class Blob:
    """One object: class id and its box in pixels (centre and half sizes)."""

    cls: int
    cx: float
    cy: float
    rx: float
    ry: float


def png_bytes(width: int, height: int, pixels: bytes) -> bytes:
    """Encode 8-bit grayscale pixels (row-major, width*height bytes) as a PNG file."""
    if len(pixels) != width * height:
        raise ValueError(f"expected {width * height} pixels, got {len(pixels)}")
    raw = bytearray()
    for y in range(height):
        raw.append(0)  # filter type 0 (None) for every scanline
        raw += pixels[y * width : (y + 1) * width]

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(bytes(raw), 6))
        + chunk(b"IEND", b"")
    )


def class_names(classes: int) -> list[str]:
    """Names for `classes` classes: the base three, then class3, class4..."""
    return [BASE_NAMES[i] if i < len(BASE_NAMES) else f"class{i}" for i in range(classes)]


def _blob_size(cls: int, size: int, rng: random.Random) -> tuple[float, float]:
    """Half width and half height for a blob of class `cls` (shape differs by class)."""
    unit = size / 160.0
    # Classes past the base three reuse the shapes, larger.
    scale = 1.0 + 0.35 * (cls // len(BASE_NAMES))
    jitter = rng.uniform(0.8, 1.25) * scale * unit
    kind = cls % len(BASE_NAMES)
    if kind == 0:  # tall ellipse
        return 7.0 * jitter, 17.0 * jitter
    if kind == 1:  # wide rectangle
        return 22.0 * jitter, 10.0 * jitter
    return 11.0 * jitter, 8.0 * jitter  # small round-ish blob


def _place_blobs(size: int, classes: int, rng: random.Random) -> list[Blob]:
    blobs: list[Blob] = []
    for _ in range(rng.randint(1, 4)):
        cls = rng.randrange(classes)
        rx, ry = _blob_size(cls, size, rng)
        rx, ry = min(rx, size / 2 - 1), min(ry, size / 2 - 1)
        cx = rng.uniform(rx, size - rx)
        cy = rng.uniform(ry, size - ry)
        blobs.append(Blob(cls, cx, cy, rx, ry))
    return blobs


def _inside(blob: Blob, dx: float, dy: float) -> float:
    """Normalised distance from the centre (< 1 inside); rectangles use the max norm."""
    nx, ny = abs(dx) / blob.rx, abs(dy) / blob.ry
    if blob.cls % len(BASE_NAMES) == 1:
        return max(nx, ny)
    return math.sqrt(nx * nx + ny * ny)


def _paint(pixels: bytearray, size: int, blob: Blob) -> None:
    x0, x1 = max(0, int(blob.cx - blob.rx)), min(size, int(blob.cx + blob.rx) + 1)
    y0, y1 = max(0, int(blob.cy - blob.ry)), min(size, int(blob.cy + blob.ry) + 1)
    span = _WARM_CORE - _WARM_EDGE
    for y in range(y0, y1):
        row = y * size
        dy = y + 0.5 - blob.cy
        for x in range(x0, x1):
            d = _inside(blob, x + 0.5 - blob.cx, dy)
            if d < 1.0:
                value = _WARM_EDGE + int(span * (1.0 - d))
                if value > pixels[row + x]:
                    pixels[row + x] = value


_NOISE_TABLE = bytes(_COLD_LOW + (b * _COLD_SPAN) // 256 for b in range(256))


def make_image(size: int, classes: int, rng: random.Random) -> tuple[bytes, list[Blob]]:
    """One image: noisy cold background plus warm blobs; returns pixels and blobs."""
    pixels = bytearray(rng.randbytes(size * size).translate(_NOISE_TABLE))
    blobs = _place_blobs(size, classes, rng)
    for blob in blobs:
        _paint(pixels, size, blob)
    return bytes(pixels), blobs


def label_lines(blobs: list[Blob], size: int) -> str:
    """YOLO label text: `cls xc yc w h`, normalised to 0..1, one line per blob."""
    lines = []
    for b in blobs:
        x0, x1 = max(0.0, b.cx - b.rx), min(float(size), b.cx + b.rx)
        y0, y1 = max(0.0, b.cy - b.ry), min(float(size), b.cy + b.ry)
        xc, yc = (x0 + x1) / 2 / size, (y0 + y1) / 2 / size
        w, h = (x1 - x0) / size, (y1 - y0) / size
        lines.append(f"{b.cls} {xc:.6f} {yc:.6f} {w:.6f} {h:.6f}")
    return "\n".join(lines) + "\n"


def _clear_split(images: Path, labels: Path) -> None:
    """Remove what an earlier run left (stale images, labels, label caches)."""
    for folder, suffixes in ((images, (".png",)), (labels, (".txt", ".cache"))):
        for entry in folder.iterdir():
            if entry.is_file() and entry.suffix in suffixes:
                entry.unlink()
    for cache in labels.parent.glob("*.cache"):
        cache.unlink()


def write_split(root: Path, split: str, count: int, size: int, classes: int, seed: int) -> None:
    """Write `count` images and labels for one split under root/images and root/labels."""
    images, labels = root / "images" / split, root / "labels" / split
    images.mkdir(parents=True, exist_ok=True)
    labels.mkdir(parents=True, exist_ok=True)
    _clear_split(images, labels)
    rng = random.Random(f"{seed}:{split}")
    for i in range(count):
        pixels, blobs = make_image(size, classes, rng)
        stem = f"{split}_{i:05d}"
        (images / f"{stem}.png").write_bytes(png_bytes(size, size, pixels))
        (labels / f"{stem}.txt").write_text(label_lines(blobs, size), encoding="utf-8")


def data_yaml(root: Path, names: list[str]) -> str:
    """data.yaml text with an absolute dataset path (JSON strings are valid YAML scalars)."""
    lines = [f"path: {json.dumps(str(root))}", "train: images/train", "val: images/val"]
    lines.append(f"nc: {len(names)}")
    lines.append("names:")
    lines += [f"  {i}: {json.dumps(name)}" for i, name in enumerate(names)]
    return "\n".join(lines) + "\n"


def generate(
    out_dir: str | os.PathLike[str],
    train: int = 64,
    val: int = 16,
    size: int = 160,
    classes: int = 3,
    seed: int = 0,
) -> Path:
    """Make the data set under out_dir and return the path of its data.yaml."""
    if train < 1 or val < 1 or size < 32 or classes < 1:
        raise ValueError("need train >= 1, val >= 1, size >= 32 and classes >= 1")
    root = Path(out_dir).resolve()
    write_split(root, "train", train, size, classes, seed)
    write_split(root, "val", val, size, classes, seed)
    path = root / "data.yaml"
    path.write_text(data_yaml(root, class_names(classes)), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; prints the data.yaml path."""
    parser = argparse.ArgumentParser(
        prog="python -m rsup.workers.demodata",
        description="Make a small synthetic thermal data set in YOLO format.",
    )
    parser.add_argument("dir", help="output folder (created if missing)")
    parser.add_argument("--train", type=int, default=64, help="training images (default 64)")
    parser.add_argument("--val", type=int, default=16, help="validation images (default 16)")
    parser.add_argument("--size", type=int, default=160, help="image side in pixels (default 160)")
    parser.add_argument("--classes", type=int, default=3, help="number of classes (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    try:
        path = generate(args.dir, args.train, args.val, args.size, args.classes, args.seed)
    except (ValueError, OSError) as exc:
        print(f"demodata: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
