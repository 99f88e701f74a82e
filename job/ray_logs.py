"""Ray's own output goes to the run folder's ``ray.log``; the terminal keeps the project's lines.

A Ray job's terminal receives two streams besides the project's lines: the driver's Python
loggers (``ray``, ``ray.serve``, ...: "Started a local Ray instance", Serve's application
lines) and every worker process's stdout/stderr, which Ray forwards to the driver with a
``(ActorName pid=...)`` prefix (Ray Train's controller, the Serve controller, raylets). A
:class:`RayLogRoute` sends both to one file and lets through to the terminal only

* driver log records at ERROR or above, and
* worker lines that :func:`echo_worker_line` accepts: lines tagged ``[spotlight]`` (the
  project's own messages from replicas and the trainer), errors from the project's own
  processes (Serve replicas, Ray Train workers), and the autoscaler's lines on requests it can
  never place; never the rest of the chatter of Ray's system actors.

Worker lines are taken over through Ray's driver-side dispatcher of forwarded output
(``ray._private.ray_logging.global_worker_stdstream_dispatcher``, Ray 2.60, pinned in
pyproject.toml); if that is missing the route still moves the driver loggers and leaves the
worker lines as Ray prints them.
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from spotlight import progress

TAG = "[spotlight]"
FILE_NAME = "ray.log"

RAY_SYSTEM_SOURCES = (
    "TrainController",
    "PlacementGroupCleaner",
    "PreemptionWatcher",
    "ServeController",
    "ProxyActor",
    "raylet",
    "autoscaler",
    "gcs_server",
)
"""Processes of Ray itself, whose output is Ray's business (it goes to ``ray.log`` only)."""

_ERROR = re.compile(r"\b(ERROR|CRITICAL)\b|^Traceback \(most recent call last\)|^\w+Error: ")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REQUEST = re.compile(r"\{([^{}]*)\}")
REPEAT_S = 60.0
"""An autoscaler line already on the terminal is not repeated there within this many seconds."""


def source_of(data: dict[str, Any]) -> str:
    """Who wrote a forwarded batch: the actor's or task's name, else Ray's pid tag."""
    return str(data.get("actor_name") or data.get("task_name") or data.get("pid") or "")


_UNSCHEDULABLE = re.compile(r"No available node types can fulfill|cannot be scheduled")
"""The autoscaler's lines on requests no node type can hold (Ray 2.60:
``autoscaler/v2/event_logger.py``, ``autoscaler/_private/autoscaler.py``): a job that would wait
on them needs to be told, so they reach the terminal although the autoscaler is Ray's."""


def echo_worker_line(source: str, line: str) -> bool:
    """Whether a line a worker process printed belongs on the terminal (module docstring)."""
    if TAG in line:
        return True
    if source.startswith("autoscaler") and _UNSCHEDULABLE.search(line):
        return True
    if any(source.startswith(s) for s in RAY_SYSTEM_SOURCES):
        return False
    return bool(_ERROR.search(line))


class RayLogRoute:
    """Route Ray's output of one run to ``path`` (see the module docstring).

    Use as a context manager around the run: ``__enter__`` moves the driver loggers (do it
    before ``ray.init``, whose first lines it catches), :meth:`take_worker_output` takes over the
    forwarded worker lines (after ``ray.init``), ``__exit__`` puts everything back.
    """

    def __init__(self, path: Path, echo: TextIO | None):
        self.path = Path(path)
        self.echo = echo
        self._file: TextIO | None = None
        self._lock = threading.Lock()
        self._file_handler: logging.Handler | None = None
        self._levels: list[tuple[logging.Handler, int]] = []
        self._dispatcher = None
        self._saved_handlers: list | None = None
        self._echoed_at: dict[str, float] = {}
        self.lines_routed = 0
        self.lines_echoed = 0

    # -- driver loggers -------------------------------------------------------------------
    def __enter__(self) -> RayLogRoute:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a", buffering=1)
        handler = logging.StreamHandler(self._file)
        handler.setFormatter(_PlainFormatter("%(asctime)s %(levelname)s %(name)s -- %(message)s"))
        handler.setLevel(logging.INFO)
        self._file_handler = handler
        with contextlib.suppress(ImportError):  # Serve's driver logger gets its console
            import ray.serve  # noqa: F401  # handler when ray.serve is first imported
        self.quiet_driver_loggers()
        return self

    def quiet_driver_loggers(self) -> None:
        """Send the driver's ``ray*`` loggers to the file and keep only their errors on the
        terminal. Idempotent: call again after Serve or Train configured their loggers."""
        assert self._file_handler is not None, "enter the route first"
        manager = logging.root.manager
        names = ["ray"] + [n for n in list(manager.loggerDict) if n.startswith("ray.")]
        for name in names:
            lg = logging.getLogger(name)
            if lg.propagate and name != "ray":
                continue  # its records reach "ray"'s handlers
            if self._file_handler not in lg.handlers:
                lg.addHandler(self._file_handler)
            for h in lg.handlers:
                if h is self._file_handler or not _is_terminal_handler(h):
                    continue
                if all(h is not saved for saved, _ in self._levels):
                    self._levels.append((h, h.level))
                h.setLevel(max(h.level, logging.ERROR))

    # -- worker output ------------------------------------------------------------------
    def take_worker_output(self) -> bool:
        """Replace Ray's printing of forwarded worker lines with :meth:`handle`; False when
        this Ray has no such dispatcher (the lines then print as Ray prints them)."""
        try:
            from ray._private.ray_logging import global_worker_stdstream_dispatcher as d
        except ImportError:  # pragma: no cover - another Ray version
            return False
        with d._lock:
            if self._saved_handlers is None:
                self._saved_handlers = list(d.handlers)
            d.handlers = [("spotlight_ray_log", self.handle)]
        self._dispatcher = d
        return True

    def handle(self, data: dict[str, Any]) -> None:
        """One forwarded batch: every line to the file, the project's to the terminal."""
        source = source_of(data)
        prefix = f"({source} pid={data.get('pid')}, ip={data.get('ip')}) "
        lines = data.get("lines", [])
        if data.get("pid") == "autoscaler":  # its status table every few seconds: events only
            lines = list(_autoscaler_events(lines))
        echoed = []
        with self._lock:
            for raw in lines:
                text = _ANSI.sub("", raw)
                if self._file is not None:
                    self._file.write(prefix + text + "\n")
                self.lines_routed += 1
                if echo_worker_line(source, text):
                    echoed.append(text)
        for text in echoed:
            if source.startswith("autoscaler") and not self._first_in_a_while(text):
                continue
            self.lines_echoed += 1
            progress.line(self.echo, text if text.startswith(TAG) else prefix + text)

    def _first_in_a_while(self, text: str, now: float | None = None) -> bool:
        """Whether an autoscaler line is news: the autoscaler repeats an unschedulable request
        every second, with its resources in any order; the terminal gets it once a minute."""
        key = _REQUEST.sub(lambda m: "{" + ", ".join(sorted(m[1].split(", "))) + "}", text)
        now = time.monotonic() if now is None else now
        last = self._echoed_at.get(key)
        if last is not None and now - last < REPEAT_S:
            return False
        self._echoed_at[key] = now
        return True

    def __exit__(self, *exc) -> None:
        if self._dispatcher is not None and self._saved_handlers is not None:
            with self._dispatcher._lock:
                self._dispatcher.handlers = self._saved_handlers
        for h, level in self._levels:
            h.setLevel(level)
        if self._file_handler is not None:
            for lg in [logging.getLogger("ray")] + [
                logging.getLogger(n) for n in list(logging.root.manager.loggerDict)
            ]:
                if self._file_handler in getattr(lg, "handlers", []):
                    lg.removeHandler(self._file_handler)
        if self._file is not None:
            with self._lock:
                self._file.close()
                self._file = None


class _PlainFormatter(logging.Formatter):
    """Ray colours some driver messages (the dashboard URL); a file gets them plain."""

    def format(self, record: logging.LogRecord) -> str:
        return _ANSI.sub("", super().format(record))


def _autoscaler_events(lines: list[str]):
    try:
        from ray._private.worker import filter_autoscaler_events
    except ImportError:  # pragma: no cover - another Ray version
        return lines
    return filter_autoscaler_events(lines)


def _is_terminal_handler(h: logging.Handler) -> bool:
    """A handler that writes to a console stream (Ray's own write to stderr), not a file."""
    return isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
