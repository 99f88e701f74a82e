"""Progress output: tqdm bars on a terminal, plain lines everywhere else.

Every long phase (a run's iterations, a validation, a wait for the trainer, pretraining, a
bench) opens a :func:`bar`. On a terminal it is a tqdm bar (done/total, rate, ETA) that the
project's own lines (:func:`line`) scroll above. When the output is not a terminal (CI, ``|
tee``, a file, ``ray job submit``'s log) there are no bars and no carriage returns: a bar prints
one plain status line at most every ``every_s`` seconds, and none at all with ``every_s=None``
(for phases whose lines are already printed, like a run's ``[iter N/M]`` lines).

``SPOTLIGHT_PROGRESS=plain`` forces plain lines on a terminal, ``=bars`` forces bars.
"""

from __future__ import annotations

import os
import time
from typing import TextIO

from tqdm import tqdm

ENV = "SPOTLIGHT_PROGRESS"


def use_bars(stream: TextIO | None) -> bool:
    """Whether ``stream`` gets tqdm bars (a terminal, unless :data:`ENV` says otherwise)."""
    if stream is None:
        return False
    forced = os.environ.get(ENV, "").strip().lower()
    if forced in ("plain", "bars"):
        return forced == "bars"
    if os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        if not (isatty and isatty()):
            return False
    except ValueError:  # a closed stream
        return False
    try:  # a terminal of no width (a pty nobody sized) would show nothing at all
        return os.get_terminal_size(stream.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):
        return True


def line(stream: TextIO | None, text: str) -> None:
    """Print one of the project's lines; an open bar is redrawn below it."""
    if stream is not None:
        tqdm.write(text, file=stream)
        stream.flush()


class PlainBar:
    """A bar for a stream that is not a terminal: a status line every ``every_s`` seconds."""

    def __init__(
        self,
        stream: TextIO | None,
        desc: str,
        total: int | None,
        initial: int,
        every_s: float | None,
        unit: str,
    ):
        self.stream, self.desc, self.total, self.n = stream, desc, total, initial
        self.every_s, self.unit = every_s, unit
        self.postfix = ""
        self._t0 = time.monotonic()
        self._last = self._t0

    def update(self, n: int = 1) -> None:
        self.n += n
        self._maybe_print()

    def set(self, n: int, postfix: str | None = None) -> None:
        self.n = n
        if postfix is not None:
            self.postfix = postfix
        self._maybe_print()

    def set_postfix_str(self, s: str) -> None:
        self.postfix = s

    def status(self) -> str:
        waited = f"{time.monotonic() - self._t0:.0f} s"
        if self.total:
            head = f"{self.n}/{self.total} {self.unit}, {waited}"
        elif self.n:
            head = f"{self.n} {self.unit}, {waited}"
        else:  # a wait with nothing to count
            head = waited
        tail = f", {self.postfix}" if self.postfix else ""
        return f"  {self.desc}: {head}{tail}"

    def _maybe_print(self) -> None:
        if self.every_s is None or self.stream is None:
            return
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            line(self.stream, self.status())

    def close(self) -> None:
        pass

    def __enter__(self) -> PlainBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class TqdmBar:
    """A tqdm bar with :class:`PlainBar`'s interface."""

    def __init__(
        self,
        stream: TextIO,
        desc: str,
        total: int | None,
        initial: int,
        unit: str,
        leave: bool,
        delay_s: float,
    ):
        self._bar = tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            file=stream,
            leave=leave,
            delay=delay_s,
            dynamic_ncols=True,
            mininterval=0.5,
            # a wait with nothing to count shows how long it has lasted
            bar_format=None if total else "{desc}: {elapsed}{postfix}",
        )

    @property
    def n(self) -> int:
        return self._bar.n

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def set(self, n: int, postfix: str | None = None) -> None:
        if postfix is not None:
            self._bar.set_postfix_str(postfix, refresh=False)
        self._bar.update(n - self._bar.n)

    def set_postfix_str(self, s: str) -> None:
        self._bar.set_postfix_str(s)

    def close(self) -> None:
        self._bar.close()

    def __enter__(self) -> TqdmBar:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def bar(
    stream: TextIO | None,
    desc: str,
    total: int | None = None,
    *,
    initial: int = 0,
    unit: str = "it",
    every_s: float | None = 30.0,
    leave: bool = False,
    delay_s: float = 1.0,
) -> PlainBar | TqdmBar:
    """A progress bar on ``stream`` (see the module docstring). ``every_s``: the plain status
    line's period (None: no plain lines); ``leave``: keep the finished bar on screen;
    ``delay_s``: show a terminal bar only once the phase has lasted this long."""
    if use_bars(stream):
        assert stream is not None
        return TqdmBar(stream, desc, total, initial, unit, leave, delay_s)
    return PlainBar(stream, desc, total, initial, every_s, unit)
