"""The synthetic thermal data set: valid PNGs, valid YOLO labels, deterministic."""

from __future__ import annotations

import hashlib
import struct
import time
import zlib
from pathlib import Path

import pytest
from rsup.workers import demodata


def decode_gray_png(data: bytes) -> tuple[int, int, bytes]:
    """Decode an 8-bit grayscale PNG with filter type 0 rows; returns width, height, pixels."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : pos + 12 + length])
        assert zlib.crc32(kind + body) & 0xFFFFFFFF == crc
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert (depth, color) == (8, 0)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw = zlib.decompress(idat)
    assert len(raw) == height * (width + 1)
    rows = [raw[y * (width + 1) : (y + 1) * (width + 1)] for y in range(height)]
    assert all(row[0] == 0 for row in rows)
    return width, height, b"".join(row[1:] for row in rows)


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and path.name != "data.yaml":
            h.update(path.relative_to(root).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


def test_images_decode_and_labels_are_valid(tmp_path: Path) -> None:
    yaml_path = demodata.generate(tmp_path, train=6, val=3, size=96, classes=3, seed=1)
    images = sorted((tmp_path / "images" / "train").glob("*.png"))
    assert len(images) == 6 and len(list((tmp_path / "images" / "val").glob("*.png"))) == 3
    for image in images:
        width, height, pixels = decode_gray_png(image.read_bytes())
        assert (width, height) == (96, 96)
        assert max(pixels) >= 150 > min(pixels)  # warm blobs over a cold background
        label = tmp_path / "labels" / "train" / f"{image.stem}.txt"
        for line in label.read_text().splitlines():
            cls, *box = line.split()
            assert 0 <= int(cls) < 3
            xc, yc, w, h = map(float, box)
            assert 0 < w <= 1 and 0 < h <= 1
            assert xc - w / 2 >= 0 and xc + w / 2 <= 1.000001
            assert yc - h / 2 >= 0 and yc + h / 2 <= 1.000001
    text = yaml_path.read_text()
    assert f'path: "{tmp_path.resolve()}"' in text
    assert '  0: "person"' in text and '  2: "animal"' in text


def test_pillow_reads_the_png(tmp_path: Path) -> None:
    pil = pytest.importorskip("PIL.Image")
    demodata.generate(tmp_path, train=1, val=1, size=64)
    with pil.open(next((tmp_path / "images" / "train").glob("*.png"))) as image:
        image.load()
        assert image.size == (64, 64) and image.mode == "L"


def test_same_seed_same_bytes_and_stale_files_go(tmp_path: Path) -> None:
    demodata.generate(tmp_path / "a", train=4, val=2, size=64, seed=3)
    demodata.generate(tmp_path / "b", train=9, val=2, size=64, seed=3)
    demodata.generate(tmp_path / "b", train=4, val=2, size=64, seed=3)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    demodata.generate(tmp_path / "c", train=4, val=2, size=64, seed=4)
    assert digest(tmp_path / "a") != digest(tmp_path / "c")


def test_default_set_is_fast(tmp_path: Path) -> None:
    began = time.monotonic()
    demodata.generate(tmp_path, train=64, val=16, size=160)
    assert time.monotonic() - began < 2.0


def test_cli_prints_data_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert demodata.main([str(tmp_path), "--train", "2", "--val", "1", "--size", "64"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path.resolve() / "data.yaml")
    assert demodata.main([str(tmp_path), "--size", "8"]) == 2
    assert "size >= 32" in capsys.readouterr().err
