"""Sharing a large cold scan between this process and one forked child.

Reading a SKILL.md is mostly pure Python, so a second thread would only queue for the GIL.
A forked child has its own interpreter and, on a machine with a free core, reads the other
half of the folders at the same time. The two sides meet in the middle without knowing the
cost of any folder in advance: the parent takes folders from the front, the child from the
back, and each marks what it takes in a shared byte map (``mmap``, inherited by the child).
A side stops at the first folder the other has marked, so a busy second core only means the
parent reads more itself. The child sends its results back as one pickle through a pipe.

Nothing is lost when the child fails: whatever it did not deliver (it crashed, was killed,
sent a bad pickle or took far longer than the parent) the parent reads itself. When both
sides read the same folder (they can meet on it) the parent's result is kept.

Forking is safe only when no other thread could hold a lock the child would need, so
``fork_ok`` asks the kernel how many threads this process runs (``/proc/self/task``) and
says yes only for one. ``AGENTSIM_SCAN_SPLIT=0`` turns the split off.
"""

from __future__ import annotations

import fcntl
import gc
import mmap
import os
import pickle
import select
import signal
import struct
import time
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

__all__ = ["SPLIT_MIN", "fork_ok", "split_work"]

SPLIT_MIN = 400
"""Folders in a cold scan from which it is split: below this the fork costs more than the
child saves (fork + copy-on-write ~2 ms here, against ~40 µs per folder)."""

_HEADER = struct.Struct("<Q")  # length of the pickle that follows
_FRAME = 64  # results per pickle sent by the child
_GRACE_S = 1.0  # the child may finish this much later than the parent (plus the parent's time)
_PARENT, _CHILD = 1, 2  # claim marks; 0 is free

T = TypeVar("T")


def fork_ok() -> bool:
    """Whether a scan may fork a helper: ``os.fork`` exists, two CPUs are usable, this
    process runs a single thread, and ``AGENTSIM_SCAN_SPLIT`` is not ``0``."""
    if os.environ.get("AGENTSIM_SCAN_SPLIT", "1") == "0" or not hasattr(os, "fork"):
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity (macOS)
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:  # no /proc: the thread count is unknown, so do not fork
        return False


def split_work(count: int, work: Callable[[int], T]) -> list[T]:
    """``[work(0), ..., work(count - 1)]``, computed by this process and a forked child.

    ``work`` must not rely on state it changes (each side changes its own copy after the
    fork) and its results must pickle.

    Signals are blocked across the fork: a handler (or a KeyboardInterrupt) can then run
    neither in the child before it has dropped the parent's handlers, nor in the parent
    before the ``try`` that reaps the child. They are delivered once unblocked.
    """
    try:
        read_fd, write_fd = os.pipe()
    except OSError:  # out of fds: no helper, all of it is read here
        return [work(i) for i in range(count)]
    claims = mmap.mmap(-1, max(count, 1))  # MAP_SHARED | MAP_ANONYMOUS: seen by the child
    _widen(write_fd)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        pid = os.fork()
    except OSError:  # no memory or process slot for a child: all of it is read here
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(read_fd)
        os.close(write_fd)
        claims.close()
        return [work(i) for i in range(count)]
    if pid == 0:  # pragma: no cover - runs in the child, whose coverage is not collected
        _child(count, work, claims, read_fd, write_fd, mask)
    os.close(write_fd)  # signals are still blocked: nothing runs before the ``try``
    results: list[T] = []
    complete = False
    inbox = _Inbox(read_fd)
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.set_blocking(read_fd, False)
        started = time.monotonic()
        for i in range(count):
            if claims[i]:
                break  # the child has read from here on
            claims[i] = _PARENT
            results.append(work(i))
            if i & 31 == 31:
                inbox.drain()  # unpickle as the child sends: the wait at the end is shorter
        mine = len(results)
        complete = mine == count or inbox.finish(
            time.monotonic() + _GRACE_S + (time.monotonic() - started)
        )
    finally:
        os.close(read_fd)
        _reap(pid, kill=not complete)
        claims.close()
    theirs: dict[int, T] = inbox.done
    for i in range(mine, count):  # what the child did not deliver is read here
        results.append(theirs[i] if i in theirs else work(i))
    return results


def _widen(fd: int) -> None:
    """Let the pipe hold 1 MiB (Linux), so the child seldom waits for the parent to read."""
    try:
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
    except OSError:  # over /proc/sys/fs/pipe-max-size, or not Linux: keep the default
        pass


def _child(  # pragma: no cover - runs in the child, whose coverage is not collected
    count: int,
    work: Callable[[int], T],
    claims: mmap.mmap,
    read_fd: int,
    write_fd: int,
    mask: set[int | signal.Signals],
) -> NoReturn:
    """Claim folders from the back and send ``[(index, result), ...]`` in frames of
    ``_FRAME`` results; exit without cleanup (``os._exit``: the parent's atexit hooks and
    buffers are not the child's to run). Starts with signals blocked (see ``split_work``)
    and drops the parent's Python handlers before it lets them in."""
    code = 1
    try:
        for signum in signal.valid_signals():  # the parent's Python handlers are not ours
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(read_fd)
        gc.disable()  # a collection would touch, and so copy, every page of the parent's heap
        done: list[tuple[int, T]] = []
        for i in range(count - 1, -1, -1):
            if claims[i]:
                break
            claims[i] = _CHILD
            done.append((i, work(i)))
            if len(done) == _FRAME:
                _send(write_fd, done)
                done = []
        _send(write_fd, done)
        code = 0
    finally:
        os._exit(code)


def _send(fd: int, done: list[tuple[int, Any]]) -> None:  # pragma: no cover - child
    data = pickle.dumps(done, pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


class _Inbox:
    """The parent's end of the pipe: complete frames are unpickled into ``done``; a frame
    that does not unpickle ends the delivery (its folders are read by the parent)."""

    __slots__ = ("broken", "buffer", "done", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()
        self.done: dict[int, Any] = {}
        self.broken = False

    def drain(self) -> bool:
        """Take what the pipe holds now; True once the child has closed it."""
        closed = False
        while True:
            try:
                chunk = os.read(self.fd, 1 << 20)
            except BlockingIOError:
                break
            if not chunk:
                closed = True
                break
            self.buffer += chunk
        buffer = self.buffer
        size = _HEADER.size
        while not self.broken and len(buffer) >= size:
            end = size + _HEADER.unpack_from(buffer)[0]
            if len(buffer) < end:
                break
            try:
                self.done.update(pickle.loads(memoryview(buffer)[size:end]))
            except Exception:  # a child that broke mid-write: the parent redoes the rest
                self.broken = True
            del buffer[:end]
        return closed

    def finish(self, deadline: float) -> bool:
        """Wait for the child to close the pipe; False if it is late (then it is killed).
        ``poll``, not ``select``: the pipe's fd may be over 1023 in a busy process."""
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while not self.drain():
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                return False
        return True


def _reap(pid: int, *, kill: bool) -> None:
    """Wait for the child, killing it first if asked. A child already reaped by someone
    else (a SIGCHLD handler) is left alone: its pid may belong to another process now."""
    try:
        if kill and os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        elif not kill:
            os.waitpid(pid, 0)
    except ChildProcessError:
        pass
