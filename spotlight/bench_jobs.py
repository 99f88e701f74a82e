"""Several bench runs at once, each in a process of its own. No Ray.

A tiny model uses more than one core poorly: on 2 cores, two runs on one torch thread each did
the work of 1.21 runs on two threads one at a time (docs/benchmarks.md). :func:`run_parallel`
keeps ``jobs`` runs going, each in a fresh (spawned) process whose torch uses ``threads``
threads (a reward's own worker threads are not limited). A run is a function of its config,
not of the thread count (a 3-iteration OCR-mini run wrote a byte-identical checkpoint on 1 and
2 threads; the tests check it on the smoke recipe), so a bench's report is the same whatever
``jobs`` it ran with.

Ctrl-C or SIGTERM stops every run: the runs ignore Ctrl-C, this process sends each SIGTERM, each
commits its checkpoint the way a stopped ``spotlight train`` does, and the interrupt is raised
once all have exited (a run that has not exited within :data:`STOP_GRACE_S` is killed); the
same command resumes them. A run that fails stops the others the same way and is named. A run
whose parent dies gets SIGTERM too (Linux), so no run outlives its bench.
"""

from __future__ import annotations

import multiprocessing
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from spotlight import interrupts

STOP_GRACE_S = 120.0
"""How long a stopped run may take to commit and exit before it is killed."""
STATUS_EVERY_S = 600.0
"""How often ``on_status`` hears which runs are going while none finishes."""

Train = Callable[[Any, Path, bool], Any]
"""``train(config, run_dir, resume)``: module-level, so that a spawned process can load it."""


class RunFailed(RuntimeError):
    """A run's process exited with an error, or was stopped by a signal of its own."""


def run_parallel(
    work: list[tuple[str, Any, Path, bool]],
    train: Train,
    jobs: int,
    threads: int,
    on_done: Callable[[str], None],
    on_start: Callable[[str], None] | None = None,
    on_status: Callable[[list[str]], None] | None = None,
    status_every_s: float = STATUS_EVERY_S,
) -> None:
    """Run each ``(name, config, run_dir, resume)`` of ``work`` as ``train(config, run_dir,
    resume)``, at most ``jobs`` at once, in order of ``work``; ``on_done(name)`` after each
    finishes (in the calling process, in the order they finish), ``on_status(names)`` with the
    runs going every ``status_every_s`` in which none finished.

    Raises:
        RunFailed: a run's process exited with an error (the others are stopped first).
        spotlight.interrupts.Interrupted: a signal arrived (the runs are stopped first).
    """
    if jobs < 1 or threads < 1:
        raise ValueError(f"need jobs >= 1 and threads >= 1, got {jobs}, {threads}")
    ctx = multiprocessing.get_context("spawn")
    todo = list(work)
    running: dict[Any, tuple[str, BaseProcess]] = {}  # sentinel -> (name, process)
    try:
        while todo or running:
            while todo and len(running) < jobs:
                name, cfg, run_dir, resume = todo.pop(0)
                proc = ctx.Process(
                    target=_child, args=(train, cfg, run_dir, resume, threads), name=name
                )
                with interrupts.held():  # started and recorded, or neither
                    _start_deaf_to_ctrl_c(proc)
                    running[proc.sentinel] = (name, proc)
                if on_start is not None:
                    on_start(name)
            ended = wait(list(running), timeout=status_every_s)
            if not ended and on_status is not None:
                on_status([name for name, _ in running.values()])
            for sentinel in ended:
                name, proc = running.pop(sentinel)
                proc.join()
                if proc.exitcode != 0:
                    raise RunFailed(_failure(name, proc.exitcode))
                on_done(name)
    finally:  # an interrupt or a failed run: stop the others, each keeping its checkpoint
        _stop([proc for _, proc in running.values()])


def _failure(name: str, code: int | None) -> str:
    """What to say about a run whose process exited with ``code``."""
    if code is not None and (code < 0 or code in (130, 143)):
        signum = -code if code < 0 else code - 128
        return (
            f"bench run {name} was stopped by {signal.Signals(signum).name} on its own; its"
            " last checkpoint is kept: rerun the bench to go on"
        )
    return f"bench run {name} failed (exit code {code}; its error is printed above)"


def _stop(procs: list[BaseProcess]) -> None:
    """SIGTERM to each live run, then wait for all; one still alive after the grace is killed."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    for proc in procs:
        proc.join(STOP_GRACE_S)
        if proc.is_alive():
            proc.kill()
            proc.join()


def _start_deaf_to_ctrl_c(proc: BaseProcess) -> None:
    """Start ``proc`` with SIGINT ignored from its first instruction (a spawned process keeps
    an ignored signal ignored): Ctrl-C reaches the whole process group, and this process alone
    answers it, stopping the runs with SIGTERM."""
    if threading.current_thread() is not threading.main_thread():
        proc.start()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc.start()
    finally:
        signal.signal(signal.SIGINT, previous)


def _die_with_parent() -> None:
    """Have the kernel send this process SIGTERM when its parent dies (Linux; elsewhere a
    no-op), and stop at once if the parent is already gone."""
    import ctypes
    import os
    import sys

    if sys.platform != "linux":
        return
    parent = os.getppid()
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() != parent or parent == 1:  # it died before the request took effect
        signal.raise_signal(signal.SIGTERM)


def _child(train: Train, cfg: Any, run_dir: Path, resume: bool, threads: int) -> None:
    """One run in its own process: SIGINT stays ignored (the parent forwards a SIGTERM),
    SIGTERM becomes an interrupt that lets a checkpoint being written finish."""
    import sys

    import torch

    torch.set_num_threads(threads)
    try:
        with interrupts.handled():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # handled() took it: give it back
            _die_with_parent()
            train(cfg, run_dir, resume)
    except interrupts.Interrupted as e:
        sys.exit(e.exit_code)
