"""One run, whichever runner executes it: the run folder, the validation before training, the
iterations with their validations, stop rules, metrics rows and checkpoints (the commit), the
progress lines, and the summary. Written once for the local runner
(:func:`spotlight.training.run_local.run_local`) and the Ray job (``spotlight.job.run``); each
is a :class:`Backend` that runs iterations and validations and writes its checkpoint.

Per iteration, in this order: the backend's iteration (its metrics row), its validation when
due (:func:`~spotlight.training.loop.validate_now`), the backend's run-wide figures and the wall
time, the stop rule (:func:`~spotlight.training.loop.stop_reason`), the row appended to
``metrics.jsonl``, then the checkpoint: a run stopped after the row resumes after it.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol, TextIO

from spotlight import interrupts, progress
from spotlight.config import Config
from spotlight.training.loop import stop_reason, validate_now
from spotlight.training.run_folder import (
    CKPT_DIR,
    INITIAL_VAL,
    METRICS,
    STATUS_EVERY,
    SUMMARY,
    append_row,
    initial_val_reward,
    last_wall_s,
    progress_line,
    read_rows,
    status_line,
    stop_line,
    summarize,
    truncate_metrics,
    write_json,
)


class Backend(Protocol):
    """What a runner does for :func:`drive`."""

    where: str
    """Said after the recipe's name in the run's first line (``""``, ``" on Ray"``)."""
    val_samples: tuple
    """Images, prompts and seeds of the last validation's first item (for W&B), or empty."""

    def evaluate(self, it: int, version: int) -> float:
        """Mean validation reward of weights ``version`` (after iteration ``it``; -1: before
        training)."""
        ...

    def iteration(self, it: int, version: int) -> dict[str, Any]:
        """Run iteration ``it`` on weights ``version``; its metrics row (``weights_version``:
        the new weights)."""
        ...

    def figures(self) -> dict[str, Any]:
        """Run-wide figures added to every row (cost, fault counters), or none."""
        ...

    def save_checkpoint(self, done: int, version: int) -> None:
        """Commit ``done`` iterations, ending on weights ``version``."""
        ...

    def stopped(self, next_it: int) -> None:
        """The run ends before iteration ``next_it`` (a stop rule)."""
        ...

    def finish(self, summary: dict[str, Any]) -> None:
        """The run is over: add the backend's figures to ``summary``, draw its own plots."""
        ...


class Tracker(Protocol):
    """Where rows also go (``spotlight.tracking.Tracker``: W&B)."""

    def log(self, row: dict[str, Any]) -> None: ...
    def log_images(self, images, prompts, seeds, step: int) -> None: ...
    def finish(self, summary: dict[str, Any]) -> None: ...


def open_run_folder(cfg: Config, out_dir: Path, resume: bool) -> None:
    """Create ``out_dir`` for a new run (refusing one that holds a run) with its
    ``config.json``; a resume keeps the folder as it is."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if resume:
        return
    if (out_dir / CKPT_DIR / "state.json").exists():
        raise ValueError(
            f"{out_dir} already holds a run; pass --resume {out_dir} to continue"
            " it or choose another --out"
        )
    write_json(out_dir / "config.json", cfg.to_dict())


def drive(
    cfg: Config,
    out_dir: Path,
    backend: Backend,
    start: int,
    version: int,
    log: TextIO | None = None,
    tracker: Tracker | None = None,
    before_first: Any = None,
) -> dict[str, Any]:
    """Run iterations ``start`` .. ``cfg.num_iterations - 1`` from weights ``version``
    (see the module docstring); returns the summary written to ``summary.json``.
    ``before_first`` is called once the metrics file is ready, before any validation."""
    metrics_path = out_dir / METRICS
    truncate_metrics(metrics_path, start)  # rows after the checkpoint are redone
    metrics_path.touch()  # a run of 0 iterations (validation only) has an empty one
    t_start = time.perf_counter() - last_wall_s(metrics_path)  # wall_s continues on resume
    if before_first is not None:
        before_first()
    if start == 0:
        val = backend.evaluate(-1, version)
        write_json(out_dir / INITIAL_VAL, {"val_reward": val})
        if tracker is not None:
            tracker.log({"val_reward": val, "iteration": -1, "weights_version": version})
            tracker.log_images(*backend.val_samples, step=0)
        progress.line(
            log,
            f"[spotlight] {cfg.recipe}{backend.where}: {cfg.num_iterations} iterations, "
            f"validation reward before training {val:.4f}",
        )
    initial_val = initial_val_reward(out_dir)
    bar = progress.bar(
        log, cfg.recipe, cfg.num_iterations, initial=start, unit="iter", every_s=None, leave=True
    )
    for it in range(start, cfg.num_iterations):
        m = backend.iteration(it, version)
        version = m["weights_version"]
        if validate_now(cfg, it, time.perf_counter() - t_start):
            m["val_reward"] = backend.evaluate(it, version)
        m.update(backend.figures())
        m["wall_s"] = time.perf_counter() - t_start
        reason = stop_reason(cfg, m, initial_val)
        if reason is not None:
            m["stopped"] = reason
        with interrupts.held():  # a Ctrl-C waits for the commit: the checkpoint stays whole
            append_row(metrics_path, m)
            backend.save_checkpoint(it + 1, version)
        if tracker is not None:
            tracker.log({k: v for k, v in m.items() if k != "stopped"})
            if "val_reward" in m:
                tracker.log_images(*backend.val_samples, step=it + 1)
        progress.line(log, progress_line(m, cfg.num_iterations))
        if (it + 1) % STATUS_EVERY == 0 and not progress.use_bars(log):
            progress.line(log, status_line(read_rows(metrics_path), cfg.num_iterations))
        bar.update(1)
        if reason is not None:
            progress.line(log, stop_line(reason, m, initial_val, cfg))
            backend.stopped(it + 1)
            break
    bar.close()
    summary = summarize(metrics_path, cfg)
    backend.finish(summary)
    write_json(out_dir / SUMMARY, summary)
    if tracker is not None:
        tracker.finish(summary)
    progress.line(log, f"[spotlight] done: {out_dir} (summary.json, metrics.jsonl, {CKPT_DIR}/)")
    return summary
