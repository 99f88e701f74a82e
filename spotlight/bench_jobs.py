"""Several bench runs at once, each in a process of its own with its share of the cores. No Ray.

A tiny model uses more than one core poorly: on 2 cores, two runs of one thread each did the
work of 1.21 sequential runs of two threads (docs/benchmarks.md). :func:`run_parallel` keeps
``jobs`` runs going, each in a fresh (spawned) process whose torch uses ``threads`` threads. A
run is a function of its config, not of the thread count (a 3-iteration OCR-mini run wrote a
byte-identical checkpoint on 1 and 2 threads; the tests check it on the smoke recipe), so a
bench's report is the same whatever ``jobs`` it ran with.

Ctrl-C or SIGTERM stops every run: each process gets SIGTERM, commits its checkpoint the way a
stopped ``spotlight train`` does, and the bench raises the interrupt once all have exited; the
same command resumes them. A run that fails stops the bench the same way, naming the run.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

Train = Callable[[Any, Path, bool], Any]
"""``train(config, run_dir, resume)``: module-level, so that a spawned process can load it."""


def run_parallel(
    work: list[tuple[str, Any, Path, bool]],
    train: Train,
    jobs: int,
    threads: int,
    on_done: Callable[[str], None],
    on_start: Callable[[str], None] | None = None,
) -> None:
    """Run each ``(name, config, run_dir, resume)`` of ``work`` as ``train(config, run_dir,
    resume)``, at most ``jobs`` at once, in order of ``work``; ``on_done(name)`` after each
    finishes (in the calling process, in the order they finish).

    Raises:
        RuntimeError: a run's process exited with an error (the others are stopped first).
        spotlight.interrupts.Interrupted: a signal arrived (the runs are stopped first).
    """
    if jobs < 1 or threads < 1:
        raise ValueError(f"need jobs >= 1 and threads >= 1, got {jobs}, {threads}")
    ctx = multiprocessing.get_context("spawn")
    todo = list(work)
    running: dict[Any, tuple[str, Any]] = {}  # sentinel -> (name, process)
    try:
        while todo or running:
            while todo and len(running) < jobs:
                name, cfg, run_dir, resume = todo.pop(0)
                proc = ctx.Process(
                    target=_child, args=(train, cfg, run_dir, resume, threads), name=name
                )
                _start_deaf_to_ctrl_c(proc)
                running[proc.sentinel] = (name, proc)
                if on_start is not None:
                    on_start(name)
            for sentinel in wait(list(running)):
                name, proc = running.pop(sentinel)
                proc.join()
                if proc.exitcode != 0:
                    raise RuntimeError(f"bench run {name} failed (exit code {proc.exitcode})")
                on_done(name)
    finally:  # an interrupt or a failed run: stop the others, each keeping its checkpoint
        for _, proc in running.values():
            if proc.is_alive():
                proc.terminate()  # SIGTERM: the run commits and exits
        for _, proc in running.values():
            proc.join()


def _start_deaf_to_ctrl_c(proc) -> None:
    """Start ``proc`` with SIGINT ignored from its first instruction (a spawned process keeps
    an ignored signal ignored): Ctrl-C reaches the whole process group, and this process alone
    answers it, stopping the runs with SIGTERM."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        proc.start()
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        proc.start()
    finally:
        signal.signal(signal.SIGINT, previous)


def _child(train: Train, cfg: Any, run_dir: Path, resume: bool, threads: int) -> None:
    """One run in its own process: SIGINT is left to the parent (which forwards a SIGTERM),
    SIGTERM becomes an interrupt that lets a checkpoint being written finish."""
    import sys

    import torch

    from spotlight import interrupts

    torch.set_num_threads(threads)
    try:
        with interrupts.handled():
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # handled() took it: give it back
            train(cfg, run_dir, resume)
    except interrupts.Interrupted as e:
        sys.exit(e.exit_code)
