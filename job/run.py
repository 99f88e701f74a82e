"""``run_ray``: a run on Ray, from the run folder's checks to its summary.

It checks that a local Ray's roles fit this machine, joins (or starts) Ray, checks the
capacity and the storage, starts the :class:`~spotlight.job.controller.Controller` and hands
it to the run driver (:func:`spotlight.training.driver.drive`, the local runner's too): the
validation before training, the iterations with their validations, stop rules, metrics rows
(also to W&B) and checkpoints, the summary. The Serve app and the detached actors are cleaned
up at the end (``keep_cluster_state`` keeps them).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from spotlight import interrupts, progress
from spotlight.config import Config
from spotlight.job.cluster import (
    capacity_watch,
    check_capacity,
    check_local_machine,
    check_storage,
    cleanup,
    connect,
)
from spotlight.job.controller import Controller
from spotlight.job.options import OPTIONS_FILE, RayOptions, check_merge_lora
from spotlight.job.placement import local_gpu_plan
from spotlight.job.ray_logs import FILE_NAME as RAY_LOG
from spotlight.job.ray_logs import RayLogRoute
from spotlight.training.driver import drive, open_run_folder
from spotlight.training.run_folder import preflight_run, write_json


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
    if cfg.rollout_staleness:
        raise ValueError(
            "rollout_staleness > 0 (stale rollouts, a measurement) runs on the local runner:"
            " add --runner local"
        )
    check_merge_lora(opts, cfg.grpo.loss)
    preflight_reward(cfg.reward, cfg.reward_model)  # no tesseract, no model folder: say so now
    preflight_run(cfg, out_dir, resume)  # a bad checkpoint or run folder, likewise
    check_local_machine(opts)  # 64 trainer workers on 2 cores, likewise
    gpus = local_gpu_plan(cfg, opts, log=log)  # what cannot fit this machine's GPUs, likewise
    open_run_folder(cfg, out_dir, resume)
    _record_options(opts, out_dir, resume, log)
    with RayLogRoute(out_dir / RAY_LOG, log) as route:  # entered before ray.init's first lines
        started_here, injector = connect(opts, log)
        route.take_worker_output()
        return _run_ray(cfg, out_dir, resume, opts, log, started_here, injector, gpus)


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
    gpus=None,
) -> dict[str, Any]:
    """:func:`run_ray` once Ray is up (``started_here``: this call started it)."""
    import ray

    from spotlight.tracking import Tracker

    ctl = Controller(cfg, out_dir, opts, log, injector, gpus)
    interrupted = False
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
        ctl.watch.capacity = capacity_watch(
            opts, opts.scorer_gpus(cfg.reward), joined=not started_here, log=log
        )
        tracker = Tracker(cfg, out_dir, enabled=opts.wandb, resume=resume)
        if tracker.url:
            progress.line(log, f"[spotlight] W&B run: {tracker.url}")
        return drive(cfg, out_dir, ctl, start, version, log, tracker, before_first=ctl.watch.tick)
    except interrupts.Interrupted:
        # Ctrl-C on a Ray started here: its shutdown ends the app and the actors; killing
        # them one by one first only makes their callers log the kills
        interrupted = started_here
        raise
    finally:
        if not opts.keep_cluster_state and not interrupted:
            cleanup()
        if started_here:
            ray.shutdown()
        if injector is not None:
            injector.nodes.shutdown()
