"""Received chunks of a file, written at their offsets and summed (adler32) on worker threads.

A transfer hands each full buffer to :class:`ChunkWriter` and goes on receiving into the next
free one; the workers sum the buffer and ``pwrite`` it at its offset.  zlib's adler32 and
``pwrite`` release the GIL (ISA-L's adler32 keeps it, for a fifth of zlib's time), so summing
and writing run on other cores while the receiving thread (or threads, one per connection)
keeps the socket drained.  Each chunk's adler32 is kept with its offset;
:func:`glidein_ext.cache.checksum.adler32_of_pieces` combines them into the whole file's
checksum (zlib's adler32_combine), which also proves the chunks tile the file.
"""

from __future__ import annotations

import os
import queue
import threading
import zlib
from types import TracebackType

from glidein_ext.cache.checksum import ADLER32_START, Adler32Function, adler32_of_pieces

Piece = tuple[int, int, int]  # (offset, length, adler32)


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written


class ChunkWriter:
    """Sum and write chunks into the open file ``fd`` on ``threads`` worker threads.

    ``take()`` a free buffer (``chunk`` bytes), fill it, ``submit()`` it with its offset;
    ``finish()`` waits for the workers and returns the whole file's adler32.  A write error
    (``OSError``) stops the work and is raised again from the next ``take``/``submit``/
    ``finish``.  Use as a context manager: the workers are always joined on exit.
    """

    def __init__(
        self,
        fd: int,
        *,
        threads: int,
        chunk: int,
        buffers: int,
        adler32: Adler32Function = zlib.adler32,
    ) -> None:
        if threads < 1 or chunk < 1 or buffers < 1:
            raise ValueError("threads, chunk and buffers must be at least 1")
        self.chunk = chunk
        self._adler32 = adler32
        self._fd = fd
        self._free: queue.Queue[bytearray] = queue.Queue()
        for _ in range(buffers):
            self._free.put(bytearray(chunk))
        self._work: queue.Queue[tuple[bytearray, int, int] | None] = queue.Queue()
        self._pieces: list[Piece] = []
        self._lock = threading.Lock()
        self._error: OSError | None = None
        self._workers = [
            threading.Thread(target=self._run, name=f"chunk-adler32-{i}") for i in range(threads)
        ]
        self._joined = False

    def __enter__(self) -> ChunkWriter:
        for worker in self._workers:
            worker.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._join()

    def take(self) -> bytearray:
        """A free buffer of ``chunk`` bytes (waits while all are being summed or written)."""
        buf = self._free.get()
        if self._error is not None:
            self._free.put(buf)
            raise self._error
        return buf

    def give_back(self, buf: bytearray) -> None:
        """Return a buffer that will not be submitted (its transfer failed)."""
        self._free.put(buf)

    def submit(self, buf: bytearray, offset: int, length: int) -> None:
        """Sum and write ``buf[:length]`` at ``offset``; the buffer returns to the free ones."""
        if self._error is not None:
            self._free.put(buf)
            raise self._error
        self._work.put((buf, offset, length))

    def finish(self, size: int) -> int:
        """Wait for every submitted chunk; the adler32 of bytes ``0..size`` of the file.

        ValueError when the chunks written do not tile ``0..size`` exactly.
        """
        self._join()
        if self._error is not None:
            raise self._error
        return adler32_of_pieces(self._pieces, size)

    def _join(self) -> None:
        if self._joined:
            return
        self._joined = True
        for _ in self._workers:
            self._work.put(None)
        for worker in self._workers:
            if worker.ident is not None:
                worker.join()

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            buf, offset, length = item
            view = memoryview(buf)[:length]
            try:
                if self._error is None:
                    value = self._adler32(view, ADLER32_START)
                    _pwrite_all(self._fd, view, offset)
                    with self._lock:
                        self._pieces.append((offset, length, value))
            except OSError as exc:
                with self._lock:
                    self._error = self._error or exc
            finally:
                view.release()
                self._free.put(buf)
