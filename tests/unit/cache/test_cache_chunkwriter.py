"""ChunkWriter: chunks summed and written at their offsets on worker threads, into a real file."""

from __future__ import annotations

import os
import random
import zlib
from pathlib import Path

import pytest

from glidein_ext.cache.checksum import plan_chunks
from glidein_ext.cache.chunkwriter import ChunkWriter


def _write(fd: int, data: bytes, chunk: int, order: random.Random | None) -> int:
    plan = plan_chunks(0, len(data), chunk)
    if order is not None:
        order.shuffle(plan)
    with ChunkWriter(fd, threads=3, chunk=chunk, buffers=4) as sink:
        for offset, length in plan:
            buf = sink.take()
            buf[:length] = data[offset : offset + length]
            sink.submit(buf, offset, length)
        return sink.finish(len(data))


@pytest.mark.parametrize("size", [0, 1, 4096, 4097, 100_000])
def test_chunks_in_any_order_give_the_file_and_its_adler32(tmp_path: Path, size: int) -> None:
    data = os.urandom(size)
    path = tmp_path / "f"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        value = _write(fd, data, 4096, random.Random(size))
    finally:
        os.close(fd)
    assert value == zlib.adler32(data)
    assert path.read_bytes() == data


def test_a_missing_chunk_is_refused(tmp_path: Path) -> None:
    fd = os.open(tmp_path / "f", os.O_CREAT | os.O_WRONLY)
    try:
        with ChunkWriter(fd, threads=2, chunk=10, buffers=2) as sink:
            buf = sink.take()
            sink.submit(buf, 0, 10)
            with pytest.raises(ValueError, match="cover 10 bytes of 20"):
                sink.finish(20)
    finally:
        os.close(fd)


def test_a_write_error_is_raised_again(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)  # pwrite fails: EBADF
    try:
        with ChunkWriter(fd, threads=1, chunk=10, buffers=1) as sink:
            sink.submit(sink.take(), 0, 10)
            with pytest.raises(OSError):
                sink.take()  # the only buffer comes back after the failed write
            with pytest.raises(OSError):
                sink.finish(10)
    finally:
        os.close(fd)
