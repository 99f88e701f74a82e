"""Ctrl-C and SIGTERM: the signal becomes :class:`Interrupted` in the main thread, held back
while a checkpoint is being written, and the command exits 128 + the signal's number.

```
signal ──> handler ──(not held)──> raise Interrupted  (a ray.get, a sleep: left at once)
              │
              └──(held: a checkpoint is being written)──> remembered ──> raised when it is written
```

``spotlight``'s entry point runs each command inside :func:`handled`; the command adds the one
line to print (:attr:`Interrupted.line`: the checkpoint kept and the ``--resume`` command), the
entry point prints it and returns :attr:`Interrupted.exit_code` (130 for SIGINT, 143 for
SIGTERM). A second signal while the first unwinds (Ray shutting down) is ignored. ``ray.init``
puts its own SIGTERM handler in place: :func:`rearm` puts this one back. No Ray here.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interrupted(KeyboardInterrupt):
    """A SIGINT or SIGTERM, raised in the main thread (a KeyboardInterrupt, so code that lets
    Ctrl-C through lets it through too)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.line: str | None = None
        """What to print: set by the command that knows what was kept."""

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class _State:
    active = False
    held = 0
    pending: int | None = None
    raised = False
    previous: dict[int, object] = {}  # noqa: RUF012 (one state per process)


def _handler(signum: int, _frame) -> None:
    if _State.raised:  # the first is unwinding: let it
        return
    if _State.held:
        _State.pending = _State.pending or signum
        return
    _State.raised = True
    raise Interrupted(signum)


def _install() -> None:
    for s in SIGNALS:
        signal.signal(s, _handler)


@contextlib.contextmanager
def handled() -> Iterator[None]:
    """SIGINT and SIGTERM raise :class:`Interrupted` inside; the previous handlers come back
    after. Outside the main thread it does nothing (signals reach the main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.previous = {s: signal.getsignal(s) for s in SIGNALS}
    _State.active, _State.held, _State.pending, _State.raised = True, 0, None, False
    _install()
    try:
        yield
    finally:
        _State.active = False
        for s, h in _State.previous.items():
            signal.signal(s, h)


def rearm() -> None:
    """Put the handlers back (after ``ray.init``, which installs its own for SIGTERM)."""
    if _State.active and threading.current_thread() is threading.main_thread():
        _install()


@contextlib.contextmanager
def held() -> Iterator[None]:
    """A signal that arrives inside (a checkpoint being written) is raised at its end, so what
    is written is whole. Nests."""
    _State.held += 1
    try:
        yield
    finally:
        _State.held -= 1
    if not _State.held and _State.pending is not None and not _State.raised:
        signum, _State.pending = _State.pending, None
        _State.raised = True
        raise Interrupted(signum)
