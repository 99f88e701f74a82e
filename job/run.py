"""``run_ray``: a run on Ray, from the run folder's checks to its summary.

It joins (or starts) Ray, makes the :class:`~spotlight.job.controller.Controller`, scores the
validation prompts before training, then runs the iterations: each one's metrics row goes to
``metrics.jsonl`` and W&B, then the checkpoint (the commit) is written, and the validation runs
when due. A run stops at ``num_iterations``, at its target or at its wall-time cap; the Serve app
and the detached actors are cleaned up at the end (``keep_cluster_state`` keeps them).
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any, TextIO

from spotlight import progress
from spotlight.config import Config
from spotlight.job.cluster import check_capacity, check_storage, cleanup, connect
from spotlight.job.controller import Controller
from spotlight.job.options import OPTIONS_FILE, RayOptions
from spotlight.job.ray_logs import FILE_NAME as RAY_LOG
from spotlight.job.ray_logs import RayLogRoute
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
    preflight_run,
    progress_line,
    read_rows,
    status_line,
    stop_line,
    summarize,
    truncate_metrics,
    write_json,
)


def run_ray(
    cfg: Config,
    out_dir: Path,
    resume: bool = False,
    opts: RayOptions | None = None,
    log: TextIO | None = None,
) -> dict[str, Any]:
    """Run ``cfg`` on Ray, writing ``out_dir`` (the layout of ``run_local`` plus ``report.png``,
    the cost fields and ``ray.log``, where Ray's own output goes); returns the summary."""
    from spotlight.rewards import preflight_reward

    opts = opts or RayOptions()
    cfg.validate()
    opts.validate()
    preflight_reward(cfg.reward, cfg.reward_model)  # no tesseract, no model folder: say so now
    preflight_run(cfg, out_dir, resume)  # a bad checkpoint or run folder, likewise
    out_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        if (out_dir / CKPT_DIR / "state.json").exists():
            raise ValueError(
                f"{out_dir} already holds a run; pass --resume {out_dir} to continue"
                " it or choose another --out"
            )
        write_json(out_dir / "config.json", cfg.to_dict())
    _record_options(opts, out_dir, resume, log)
    with RayLogRoute(out_dir / RAY_LOG, log) as route:  # entered before ray.init's first lines
        started_here, injector = connect(opts, log)
        route.take_worker_output()
        return _run_ray(cfg, out_dir, resume, opts, log, started_here, injector)


def _record_options(opts: RayOptions, out_dir: Path, resume: bool, log: TextIO | None) -> None:
    """Write the Ray options to ``OPTIONS_FILE``; a resume first names the ones it changes."""
    path = out_dir / OPTIONS_FILE
    if resume and path.exists():
        changes = opts.changes_from(json.loads(path.read_text()))
        if changes:
            progress.line(
                log,
                f"[spotlight] resume: these Ray options differ from the run's last start: "
                f"{'; '.join(changes)}",
            )
    write_json(path, opts.to_dict())


def _run_ray(
    cfg: Config,
    out_dir: Path,
    resume: bool,
    opts: RayOptions,
    log: TextIO | None,
    started_here: bool,
    injector,
) -> dict[str, Any]:
    """:func:`run_ray` once Ray is up (``started_here``: this call started it)."""
    import ray

    ctl = Controller(cfg, out_dir, opts, log, injector)
    try:
        check_capacity(
            opts,
            reward_gpus=opts.scorer_gpus(cfg.reward),
            joined=not started_here,
            trace=injector is not None,
            log=log,
        )
        check_storage(out_dir, joined=not started_here)
        start, version = ctl.start(resume)
        run = _Run(ctl, start, resume)
        if start == 0:
            run.validate_before_training(version)
        n = cfg.num_iterations
        bar = progress.bar(log, cfg.recipe, n, initial=start, unit="iter", every_s=None, leave=True)
        for it in range(start, n):
            version, stopped = run.iteration(it, version)
            bar.update(1)
            if stopped:
                break
        bar.close()
        return run.finish()
    finally:
        if not opts.keep_cluster_state:
            cleanup()
        if started_here:
            ray.shutdown()
        if injector is not None:
            injector.nodes.shutdown()


class _Run:
    """The run folder's side of a Ray run: metrics rows, checkpoints, W&B, the summary."""

    def __init__(self, ctl: Controller, start: int, resume: bool):
        from spotlight.tracking import Tracker

        self.ctl, self.cfg, self.out_dir, self.log = ctl, ctl.cfg, ctl.out_dir, ctl.log
        self.metrics_path = self.out_dir / METRICS
        truncate_metrics(self.metrics_path, start)  # rows after the checkpoint are redone
        self.t_start = time.perf_counter() - last_wall_s(self.metrics_path)
        self.tracker = Tracker(self.cfg, self.out_dir, enabled=ctl.opts.wandb, resume=resume)
        if self.tracker.url:
            progress.line(self.log, f"[spotlight] W&B run: {self.tracker.url}")
        ctl.queue.tick()
        self.initial_val = initial_val_reward(self.out_dir)

    def validate_before_training(self, version: int) -> None:
        val = self.ctl.evaluate(-1, version)
        write_json(self.out_dir / INITIAL_VAL, {"val_reward": val})
        self.initial_val = val
        self.tracker.log({"val_reward": val, "iteration": -1, "weights_version": version})
        self.tracker.log_images(*self.ctl.val_samples, step=0)
        progress.line(
            self.log,
            f"[spotlight] {self.cfg.recipe} on Ray: {self.cfg.num_iterations} iterations, "
            f"validation reward before training {val:.4f}",
        )

    def iteration(self, it: int, version: int) -> tuple[int, bool]:
        """Iteration ``it`` on weights ``version``, its validation when due, its metrics row,
        then its checkpoint (the commit). Returns (the new version, whether the run stops)."""
        ctl, cfg = self.ctl, self.cfg
        m = ctl.iteration(it, version)
        version = m["weights_version"]
        if validate_now(cfg, it, time.perf_counter() - self.t_start):
            m["val_reward"] = ctl.evaluate(it, version)
        ctl.queue.tick()
        m.update(ctl.ledger.snapshot())
        m.update(
            wall_s=time.perf_counter() - self.t_start,
            **ctl.fault_counters(),
            queue_depth=ctl.queue.stats["pending"],
            replicas=ctl.queue.stats["workers_by_pool"],
        )
        reason = stop_reason(cfg, m, self.initial_val)
        if reason is not None:
            m["stopped"] = reason
        append_row(self.metrics_path, m)
        ctl.save_checkpoint(it + 1, version)
        self.tracker.log({k: v for k, v in m.items() if k != "stopped"})
        if "val_reward" in m:
            self.tracker.log_images(*ctl.val_samples, step=it + 1)
        progress.line(self.log, progress_line(m, cfg.num_iterations))
        if (it + 1) % STATUS_EVERY == 0 and not progress.use_bars(self.log):
            progress.line(self.log, status_line(read_rows(self.metrics_path), cfg.num_iterations))
        if reason is not None:
            progress.line(self.log, stop_line(reason, m, self.initial_val, cfg))
            ctl.stop_trainer(it + 1)
        return version, reason is not None

    def finish(self) -> dict[str, Any]:
        """Wait for the trainer's end; write summary.json and the plots."""
        from spotlight.plots import plot_report, plot_rewards

        self.ctl.finish()
        summary = _summary(self.metrics_path, self.cfg, self.ctl)
        write_json(self.out_dir / SUMMARY, summary)
        name, recipe = self.out_dir.name, self.cfg.recipe
        plot_rewards(self.out_dir, title=f"{recipe}: {name}")
        plot_report(self.out_dir, title=f"{recipe} on Ray: {name}")
        self.tracker.finish(summary)
        progress.line(
            self.log,
            f"[spotlight] done: {self.out_dir} (summary.json, metrics.jsonl, report.png,"
            f" {CKPT_DIR}/)",
        )
        return summary


def _summary(metrics_path: Path, cfg: Config, ctl: Controller) -> dict[str, Any]:
    rows = read_rows(metrics_path)
    out = summarize(metrics_path, cfg)
    out.update(ctl.ledger.snapshot())
    out.update(
        runner="ray",
        weights_version=rows[-1]["weights_version"] if rows else None,
        **ctl.fault_counters(),
        num_samplers=ctl.opts.num_samplers,
        num_train_workers=ctl.opts.num_train_workers,
        prices=dataclasses.asdict(ctl.opts.prices),
    )
    return out
