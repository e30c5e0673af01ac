"""Where a skill script's prints go: into its own call's buffers, never onto the terminal.

Private to ``agentsim.skills``. ``sys.stdout`` and ``sys.stderr`` are process globals, and
many script calls run at once (tasks of one loop, worker threads), so swapping them per
call would race: one call would restore the stream another is still printing to. Instead
each stream is wrapped once by a ``_Switch`` that looks up a contextvar on every write: a
call sets the contextvar to its own buffer (tasks and the runner's worker threads start from
a copy of the caller's context, so they inherit it) and everything else writes through to
the stream that was there before. ``capturing()`` re-installs the switch when someone (a
test harness, say) has replaced the stream since.

Not covered: writes to ``sys.__stdout__``, to file descriptor 1 (``os.write``, C
extensions, child processes an inline script starts itself), and prints from threads that
a script starts on its own (a new thread starts with an empty context). Use ``process``
isolation for scripts that do that.
"""

from __future__ import annotations

import contextlib
import contextvars
import sys
import threading
from collections.abc import Iterator
from typing import Any, TextIO, cast

from agentsim.skills._outcome import CappedWriter

__all__ = ["capturing", "route_to"]

_OUT: contextvars.ContextVar[CappedWriter | None] = contextvars.ContextVar(
    "agentsim_script_stdout", default=None
)
_ERR: contextvars.ContextVar[CappedWriter | None] = contextvars.ContextVar(
    "agentsim_script_stderr", default=None
)
_INSTALL_LOCK = threading.Lock()


class _Switch:
    """A stream that writes to the current call's buffer, or else to ``inner``."""

    def __init__(self, inner: TextIO, var: contextvars.ContextVar[CappedWriter | None]) -> None:
        self._inner = inner
        self._var = var

    def write(self, text: str) -> int:
        sink = self._var.get()
        if sink is not None:
            return sink.write(text)
        return self._inner.write(text)

    def flush(self) -> None:
        if self._var.get() is None:
            self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        # encoding, isatty, fileno, buffer...: whatever the wrapped stream offers.
        return getattr(self._inner, name)


def _install() -> None:
    for name, var in (("stdout", _OUT), ("stderr", _ERR)):
        if not isinstance(getattr(sys, name), _Switch):
            with _INSTALL_LOCK:
                current = getattr(sys, name)
                if not isinstance(current, _Switch):
                    setattr(sys, name, cast(TextIO, _Switch(current, var)))


@contextlib.contextmanager
def capturing(out: CappedWriter, err: CappedWriter) -> Iterator[None]:
    """Within the block (and in tasks and runner threads started from it), prints to
    ``sys.stdout`` go to ``out`` and to ``sys.stderr`` go to ``err``."""
    _install()
    out_token = _OUT.set(out)
    err_token = _ERR.set(err)
    try:
        yield
    finally:
        _ERR.reset(err_token)
        _OUT.reset(out_token)


def route_to(out: CappedWriter, err: CappedWriter) -> None:
    """Send this context's prints to ``out`` / ``err`` from now on. Call it inside a context
    of the call's own (``Context.run``, a task's context, a worker thread's copy): it does
    not undo itself."""
    _install()
    _OUT.set(out)
    _ERR.set(err)
