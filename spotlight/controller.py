"""The main job's driver on Ray: Serve samplers on spot, a Ray Train trainer, detached actors.

``spotlight train`` runs :func:`run_ray`. On a laptop it starts a local Ray whose ``spot`` and
``on_demand`` capacity are virtual resources; under ``ray job submit`` (or with ``RAY_ADDRESS``)
it joins that cluster. One iteration:

1. wait until the trainer has published the weights version of this iteration;
2. submit the iteration's rollout items to the ``RequestQueue`` (the (prompt, seed) pairs the
   single-process loop draws, or for explored prompts the seeds exploration selected); sampler
   replicas pull them, sample with that version, have the reward deployment score them and
   complete them;
3. compute group advantages and post the training batch for the trainer;
4. (``exploration.mode = spot``) submit exploration items for the next iteration's prompts on
   this version, sized by the planner to the predicted training time;
5. wait for the trainer's update (it has published version + 1 by then); withdraw unfinished
   exploration, select the next iteration's seeds, update the planner;
6. write the metrics row (with GPU-seconds by pool and cost), then the checkpoint (the commit);
   score the validation prompts through the replicas when due.

With ``exploration.mode = critical_path`` the exploration runs before step 2 on the fresh
weights and the selected samples are trained on directly.

A restarted driver (``--resume DIR``) continues after the last checkpointed iteration: the
trainer starts from that checkpoint and publishes its version, finished queue items of the
interrupted iteration are reused (their ids are deterministic), nothing is trained twice.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from spotlight import progress
from spotlight.config import Config
from spotlight.costs import Ledger, PriceTable
from spotlight.loop import (
    iteration_batch,
    metrics_row,
    prompt_sets,
    score_groups,
    stop_reason,
    update_seed,
    validate_now,
)
from spotlight.polling import poll_until
from spotlight.ray_logs import FILE_NAME as RAY_LOG
from spotlight.ray_logs import RayLogRoute
from spotlight.rollout import RolloutPlan, chunks, plan_rollout
from spotlight.run_folder import (
    CKPT_DIR,
    INITIAL_VAL,
    METRICS,
    SUMMARY,
    append_row,
    atomic,
    initial_val_reward,
    last_wall_s,
    preflight_run,
    progress_line,
    read_checkpoint_state,
    sha256,
    stop_line,
    summarize,
    truncate_metrics,
    write_json,
)
from spotlight.work_queue import Kind, Pool

APP_NAME = "spotlight"
TRAIN_DIR = "ray_train"
BANDIT_FILE = "bandit_state.json"
QUEUE_COUNTERS = (
    "preemptions",
    "preemption_notices",
    "items_resumed",
    "steps_resumed",
    "items_released",
    "leases_expired",
    "duplicates_ignored",
)
"""Run counters kept by the queue actor (or the injector): carried over by a resumed driver."""

WAIT_SLICE_S = 1.0
"""Long-poll slice: the controller accounts time and checks the trainer at least this often."""


@dataclass
class RayOptions:
    """Where and how wide the job runs (the algorithm is in :class:`Config`)."""

    address: str | None = None
    """Ray cluster to join; None: RAY_ADDRESS, else start a local Ray."""
    num_samplers: int = 2
    """Sampler replicas (the autoscaler's upper bound; at least one is kept)."""
    num_train_workers: int = 1
    """Ray Train workers (data parallel)."""
    threads_per_worker: int = 1
    """torch threads per sampler / reward replica (CPU)."""
    trainer_threads: int = 2
    """torch threads per train worker (CPU). Locally sampling and training alternate, so the
    trainer may use the cores the replicas use while they wait."""
    sampler_idle_priority: bool = True
    """On a CPU device, run the sampler and reward replicas' work at idle priority (Linux
    ``SCHED_IDLE``): the trainer keeps its cores while spot exploration uses what is left, as
    on separate GPUs. (Ray starts every worker at nice 15, trainer included, so a nice value
    alone would not do it.)"""
    device: str = "cpu"
    prices: PriceTable = field(default_factory=PriceTable)
    wandb: bool = True
    """Log to W&B (offline unless WANDB_MODE / WANDB_API_KEY say otherwise)."""
    item_timeout_s: float = 1800.0
    """Give up when an iteration's items are not all done after this long."""
    progress_every_s: float = 10.0
    """Status line interval while waiting."""
    keep_cluster_state: bool = False
    """Leave the Serve app and detached actors running at the end (default: clean up)."""
    # -- Preemptions (see deployments/sampler.py, spotlight/work_queue.py) --------------------
    lease_s: float = 30.0
    """A pulled item's lease; heartbeats (every 2 s, from a thread of their own) and commits
    extend it. A replica that dies without a word holds its items this long."""
    commit_every: int = 4
    """Replicas commit an item's in-flight state every this many steps (0: on a notice only)."""
    spill: str = "after_wait"
    """When on-demand sampler replicas take rollout items: never, after_wait, always."""
    spill_wait_s: float = 30.0
    """For ``after_wait``: how long a rollout item waits for spot capacity first."""
    notice_sources: tuple[str, ...] = ()
    """Clouds whose preemption notices the replicas poll ('aws', 'gcp'); Ray drains always."""
    spot_trace: str | None = None
    """Replay this capacity trace on a local multi-node Ray (spotlight/local_cluster.py)."""
    trace_time_scale: float = 600.0
    """Replay the trace this many times faster than real time."""
    trace_notice_s: float = 5.0
    """Wall seconds between a replayed preemption's notice and the node's removal."""
    trace_hard_share: float = 0.0
    """Share of replayed preemptions with no notice (the node is killed)."""
    trace_start_s: float | None = None
    """Trace time the replay starts at (default: where the trace first has capacity)."""
    trace_seed: int = 0
    """Which nodes the replay preempts."""
    sp_degree: int = 1
    """SP group size: a sample is split over this many GPUs (Ulysses SP above 1)."""
    sp_workers: int | None = None
    """GPUs (locally: worker processes) per sampler replica, grouped into SP groups of
    ``sp_degree`` that share its items (e.g. all 8 GPUs of a node at SP 4: two groups, and
    after a loss 4 + 3 for Qwen-Image's 24 heads). Default: ``sp_degree`` (one group)."""

    trainer_samples: bool = False
    """The Ray Train workers sample the rollout's items while they wait for it (their GPUs idle
    then; spotlight/trainer_sampling.py). On a GPU cluster the rollout gets the trainer's GPUs
    too, at no extra cost: docs/simulator.md measures it on spot traces. Off by default: on one
    CPU machine the trainer's cores are the replicas' cores."""
    reward_gpus: float | None = None
    """GPUs of the reward deployment. None: one for a model reward (``MODEL_REWARDS``: an OCR
    model, GenEval's detector and CLIP) on a CUDA device, else none."""

    @property
    def workers_per_replica(self) -> int:
        return self.sp_workers if self.sp_workers is not None else self.sp_degree

    def scorer_gpus(self, reward: str) -> float:
        """GPUs the reward deployment asks for (``reward_gpus``, resolved)."""
        if self.reward_gpus is not None:
            return self.reward_gpus
        from spotlight.rewards import MODEL_REWARDS

        return 1.0 if self.device.startswith("cuda") and reward in MODEL_REWARDS else 0.0

    def spill_policy(self):
        from spotlight.work_queue import SpillPolicy

        return SpillPolicy(self.spill, self.spill_wait_s)

    def validate(self) -> None:
        counts = {
            "samplers": self.num_samplers,
            "train workers": self.num_train_workers,
            "threads": self.threads_per_worker,
            "trainer threads": self.trainer_threads,
        }
        counts["sp degree"] = self.sp_degree
        bad = [f"{k} ({v})" for k, v in counts.items() if v < 1]
        if bad:
            raise ValueError(f"must be >= 1: {', '.join(bad)}")
        if self.workers_per_replica < self.sp_degree:
            raise ValueError(
                f"sp workers ({self.sp_workers}) must be >= the sp degree ({self.sp_degree}):"
                " a replica needs the GPUs of at least one SP group"
            )
        if self.reward_gpus is not None and self.reward_gpus < 0:
            raise ValueError(f"reward gpus must be >= 0, got {self.reward_gpus}")
        if self.lease_s <= 0 or self.commit_every < 0 or self.trace_time_scale <= 0:
            raise ValueError("need lease_s > 0, commit_every >= 0 and trace_time_scale > 0")
        self.spill_policy()
        from spotlight.notices import NoticeWatcher

        NoticeWatcher.for_clouds(list(self.notice_sources))  # refuses unknown clouds
        if self.spot_trace is not None:
            from spotlight.traces import load_trace

            load_trace(self.spot_trace)  # a missing or malformed trace fails before Ray starts


def _ledger_pool(pool: str) -> str:
    """The ledger's pool of an item's result: the trainer's GPUs are on-demand ones."""
    return Pool.ON_DEMAND if pool == Pool.TRAINER else pool


def local_resources(opts: RayOptions) -> dict[str, float]:
    """Virtual resources of the embedded local Ray (the roles of cluster.yaml's node types)."""
    from spotlight.actors import names

    return {
        names.RESOURCE_SPOT: 1.0,
        names.RESOURCE_ON_DEMAND: 1.0,
        names.RESOURCE_CONTROL: 1.0,
        names.RESOURCE_SAMPLER: float(opts.num_samplers * opts.workers_per_replica),
        names.RESOURCE_TRAINER: float(opts.num_train_workers),
    }


def connect(opts: RayOptions, log: TextIO | None = None):
    """Join the cluster (or start the local one). Returns ``(started_here, injector)``: whether
    Ray was started here, and the spot-trace injector (``opts.spot_trace``) or None."""
    import ray

    from spotlight.actors.names import NAMESPACE

    address = opts.address or os.environ.get("RAY_ADDRESS")
    if ray.is_initialized():
        return False, None
    env = {"env_vars": {"PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}}
    if opts.spot_trace is not None:
        if address:
            raise ValueError(
                "--spot-trace replays a trace on a local multi-node Ray; on a cluster the"
                " preemptions are real (unset RAY_ADDRESS to replay one locally)"
            )
        from spotlight.local_cluster import LocalSpotCluster, build_injector, head_resources

        cluster = LocalSpotCluster(
            head_cpus=opts.num_train_workers + 3,
            head_resources=head_resources(
                opts.num_train_workers, opts.spill != "never", opts.workers_per_replica
            ),
            sampler_per_node=opts.workers_per_replica,
        )
        injector = build_injector(
            cluster,
            opts.spot_trace,
            max_nodes=opts.num_samplers,
            time_scale=opts.trace_time_scale,
            notice_s=opts.trace_notice_s,
            hard_share=opts.trace_hard_share,
            seed=opts.trace_seed,
            start_s=opts.trace_start_s,
            log=log,
        )
        injector.tick(time.time())  # the nodes the trace starts with
        # Removed nodes make Ray print their raylets' last words: ray_logs routes them to the
        # run folder's ray.log.
        ray.init(address=cluster.address, namespace=NAMESPACE, runtime_env=env)
        return True, injector
    if address:
        ray.init(address=address, namespace=NAMESPACE, runtime_env=env, log_to_driver=True)
        return False, None
    ray.init(
        address="local",  # a new local Ray, never a cluster some other process left running
        num_cpus=opts.num_samplers + opts.num_train_workers + 2,
        resources=local_resources(opts),
        namespace=NAMESPACE,
        # Ray Train's placement-group cleaner polls the State API, which the dashboard serves:
        # without it, it logs "Failed to query Ray Train Controller actor state" every second.
        include_dashboard=True,
        dashboard_host="127.0.0.1",  # this machine only (another port if 8265 is taken)
        runtime_env=env,
    )
    return True, None


def check_capacity(opts: RayOptions, autoscaling: bool = False, log: TextIO | None = None) -> None:
    """Refuse a cluster that cannot host samplers or the trainer, before any work starts.

    A cluster must mark its nodes ``spot`` / ``on_demand`` (cluster.yaml). On an autoscaling
    cluster, missing sampler or trainer capacity is only reported: pending Serve replicas and
    Train workers are what make the autoscaler add those nodes.
    """
    import ray

    from spotlight.actors import names

    res = ray.cluster_resources()
    if res.get(names.RESOURCE_SPOT, 0) <= 0 and res.get(names.RESOURCE_ON_DEMAND, 0) <= 0:
        raise ValueError(
            "this Ray cluster cannot run the job: no node offers the 'spot' or 'on_demand'"
            " resource (start it from cluster.yaml, or mark nodes with"
            " `ray start --resources '{\"on_demand\": 1, ...}'`)"
        )
    missing = []
    if res.get(names.RESOURCE_SAMPLER, 0) < opts.workers_per_replica:
        missing.append(
            f"'{names.RESOURCE_SAMPLER}' capacity {res.get(names.RESOURCE_SAMPLER, 0):g} is less"
            f" than one sampler replica needs ({opts.workers_per_replica}: its SP workers; spot or"
            " on-demand sampler nodes, see cluster.yaml)"
        )
    if res.get(names.RESOURCE_TRAINER, 0) < opts.num_train_workers:
        missing.append(
            f"'{names.RESOURCE_TRAINER}' capacity {res.get(names.RESOURCE_TRAINER, 0):g} is less"
            f" than the {opts.num_train_workers} trainer workers asked for (on-demand trainer"
            " nodes; see cluster.yaml)"
        )
    if not missing:
        return
    if autoscaling:
        progress.line(log, "[spotlight] waiting for the autoscaler: " + "; ".join(missing))
        return
    raise ValueError("this Ray cluster cannot run the job: " + "; ".join(missing))


def run_id_of(out_dir: Path, cfg: Config) -> str:
    """Identifies a run across driver restarts (same folder, same recipe)."""
    return hashlib.sha256(f"{out_dir.resolve()}|{cfg.recipe}".encode()).hexdigest()[:16]


class Controller:
    """State of one driver process (see the module docstring)."""

    def __init__(
        self,
        cfg: Config,
        out_dir: Path,
        opts: RayOptions,
        log: TextIO | None,
        injector=None,
    ):
        self.cfg, self.out_dir, self.opts, self.log = cfg, out_dir, opts, log
        self.injector = injector
        """The spot-trace injector (local replay), ticked from the wait loop (main thread)."""
        self.train_prompts, self.val_prompts = prompt_sets(cfg)
        self.ledger = Ledger(opts.prices)
        self.items_reused = 0
        """Items whose results a restarted driver found already done in the queue."""
        self.items_lost = 0
        self.queue_restarts = 0
        self.queue_stats: dict[str, Any] = {}
        self._posted: tuple[str, Any] | None = None
        """The training batch posted and not yet answered (re-posted after a queue restart)."""
        self._counter_base: dict[str, int] = {}
        """Counters a resumed run carried over, when the queue's own were lost."""
        self._outstanding: dict[str, Any] = {}
        """Items submitted and not yet collected (re-submitted if the queue loses its state)."""
        self._trainer_thread: threading.Thread | None = None
        self._trainer_error: BaseException | None = None
        self._last_tick = time.monotonic()
        from spotlight.planner import Planner

        self.planner = Planner(cfg.exploration, cfg.grpo.group_size)
        self.next_selection = None
        """Seeds chosen by the exploration that ran during the last update (spot mode)."""
        self.next_explore_metrics: dict[str, Any] = {}
        self._train_s: float | None = None
        """Measured (EMA) trainer update time: the exploration budget's time."""
        self._last_sample_s: float | None = None
        """Before the first update is measured, the rollout's time stands in for it."""
        self._rate: float | None = None
        """Measured (EMA) sampling throughput, samples/s: the budget's rate."""
        self.val_samples: tuple = (None, [], [])
        """Images, prompts and seeds of the last validation's first item (logged to W&B)."""

    # -- Setup ---------------------------------------------------------------------------
    def start(self, resume: bool) -> tuple[int, int]:
        """Actors, Serve app and trainer; returns (iterations done, weights version)."""
        import ray

        from spotlight.actors.handles import ensure_actors

        self.actors = ensure_actors(
            bandit_path=str((self.out_dir / BANDIT_FILE).resolve()), lease_s=self.opts.lease_s
        )
        self.run_id = run_id_of(self.out_dir, self.cfg)
        kept = self._open_queue()
        ray.get(self.actors.queue.clear_mailbox.remote())
        ray.get(self.actors.broadcast.clear.remote())
        ray.get(self.actors.queue.cancel.remote())
        start, version, initial = 0, 0, None
        if resume:
            start, version, initial = self._load_checkpoint()
            if kept:  # the queue's counters went on counting this run
                self._counter_base = {}
        self.planner.load(ray.get(self.actors.bandit.get.remote("planner")))
        progress.line(
            self.log,
            f"[spotlight] ray: {len(ray.nodes())} node(s), {self.opts.num_samplers} sampler "
            f"replica(s), {self.opts.num_train_workers} trainer worker(s)"
            + ("; reusing the queue's finished items" if kept else ""),
        )
        self._start_serve()
        self._start_trainer(start, version, initial)
        return start, version

    def _start_serve(self) -> None:
        from ray import serve

        from spotlight.actors import names
        from spotlight.deployments.sampler import (
            ReplicaSpec,
            SamplerReplica,
            replica_actor_options,
            reward_scorer,
        )

        cfg, opts = self.cfg, self.opts
        spec = ReplicaSpec(
            policy=dataclasses.asdict(cfg.policy),
            sampler=dataclasses.asdict(cfg.sampler),
            threads=opts.threads_per_worker,
            device=opts.device,
            commit_every=opts.commit_every,
            notice_sources=tuple(opts.notice_sources),
            sp_degree=opts.sp_degree,
            sp_workers=opts.workers_per_replica,
            idle_priority=opts.sampler_idle_priority and not opts.device.startswith("cuda"),
        )
        gpu = opts.device.startswith("cuda")

        def sampler_opts(pool: str | None) -> dict[str, Any]:  # pool: the local trace replay
            return replica_actor_options(pool, opts.workers_per_replica, gpu)

        def reward():
            return reward_scorer(
                cfg.reward,
                opts.threads_per_worker,
                spec.idle_priority,
                cfg.reward_model,
                opts.scorer_gpus(cfg.reward),
            )

        trace = self.injector is not None
        apps = {
            APP_NAME: SamplerReplica.options(
                ray_actor_options=sampler_opts(names.RESOURCE_SPOT if trace else None),
                autoscaling_config=_autoscaling(opts.num_samplers),
                health_check_period_s=2,
            ).bind(spec, reward())
        }
        if trace and opts.spill != "never":  # the head's on-demand fallback replica
            apps[APP_NAME + "-on-demand"] = SamplerReplica.options(
                name="OnDemandSampler",
                ray_actor_options=sampler_opts(names.RESOURCE_ON_DEMAND),
                num_replicas=1,
                health_check_period_s=2,
            ).bind(spec, reward())
        quiet = {"log_level": "WARNING", "enable_access_log": False}
        serve.start(proxy_location="Disabled", logging_config=quiet)
        t0 = time.perf_counter()
        for name, app in apps.items():
            if trace:  # replicas wait for the trace's spot nodes; the wait loop ticks the trace
                serve._run(app, _blocking=False, name=name, route_prefix=None, logging_config=quiet)
            else:
                serve.run(app, name=name, route_prefix=None, logging_config=quiet)
        progress.line(
            self.log,
            f"[spotlight] serve app {'deployed' if trace else 'up'} in"
            f" {time.perf_counter() - t0:.1f} s",
        )

    def _start_trainer(self, start: int, version: int, initial) -> None:
        import ray
        from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
        from ray.train.torch import TorchTrainer

        from spotlight.actors import names
        from spotlight.trainer import train_loop

        opts = self.opts
        gpu = opts.device.startswith("cuda")
        per_worker = {"CPU": 1, names.RESOURCE_TRAINER: 1}
        trainer = TorchTrainer(
            train_loop,
            train_loop_config={
                "cfg": self.cfg.to_dict(),
                "start": start,
                "start_version": version,
                "initial": [ray.put(initial)] if initial is not None else None,
                "threads": opts.trainer_threads,
                "device": opts.device,
                "batch_timeout_s": opts.item_timeout_s,
                "trainer_samples": opts.trainer_samples,
                "sampler_threads": opts.threads_per_worker,
                "commit_every": opts.commit_every,
            },
            scaling_config=ScalingConfig(
                num_workers=opts.num_train_workers, use_gpu=gpu, resources_per_worker=per_worker
            ),
            run_config=RunConfig(
                name=f"trainer-{run_id_of(self.out_dir, self.cfg)}-{start}-{time.time_ns()}",
                storage_path=str((self.out_dir / TRAIN_DIR).resolve()),
                checkpoint_config=CheckpointConfig(num_to_keep=2),
                failure_config=FailureConfig(max_failures=2),
            ),
        )

        def fit() -> None:
            try:
                trainer.fit()
            except BaseException as e:  # re-raised by the controller's wait loops
                self._trainer_error = e

        self._trainer_thread = threading.Thread(target=fit, name="trainer-fit", daemon=True)
        self._trainer_thread.start()

    # -- Waiting -------------------------------------------------------------------------
    def _tick(self) -> None:
        """Account held GPU time since the last tick; fail fast when the trainer died."""
        if self.injector is not None:
            for ev in self.injector.tick(time.time()):
                progress.line(self.log, f"  [spot trace] {ev.kind} spot node {ev.slot}")
        now = time.monotonic()
        dt, self._last_tick = now - self._last_tick, now
        stats = self._queue_call("stats")
        self.queue_stats = stats
        for pool, n in stats["workers_by_pool"].items():
            if pool != Pool.TRAINER:  # trainer workers: held below, as the trainer
                self.ledger.hold(pool, n, dt)
        if self._trainer_thread is not None and self._trainer_thread.is_alive():
            self.ledger.hold(Pool.ON_DEMAND, self.opts.num_train_workers, dt)
        if self._trainer_error is not None:
            raise RuntimeError(f"the trainer failed: {self._trainer_error}") from (
                self._trainer_error
            )

    def _wait(
        self,
        what: str,
        poll,
        timeout_s: float,
        desc: str | None = None,
        total: int | None = None,
        status=None,
    ):
        """Call ``poll(wait_s)`` (a long-poll of up to ``wait_s``) until it returns something
        not None, accounting time. ``desc`` names a progress bar for the wait (of ``total``
        items; ``status()`` -> (done, detail)), plain lines every ``progress_every_s`` off a
        terminal."""
        deadline = time.monotonic() + timeout_s
        bar = None
        if desc is not None:
            unit = "items" if total else "s"
            bar = progress.bar(self.log, desc, total, unit=unit, every_s=self.opts.progress_every_s)
        try:
            while True:
                value = poll(WAIT_SLICE_S)
                self._tick()
                if value is not None:
                    return value
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what}: nothing after {timeout_s:.0f} s")
                if bar is not None:
                    done, detail = status() if status is not None else (0, "")
                    bar.set(done, detail)
        finally:
            if bar is not None:
                bar.close()

    def wait_version(self, version: int) -> None:
        import ray

        b = self.actors.broadcast

        def poll(wait_s: float):
            return poll_until(lambda: ray.get(b.header.remote(version)), wait_s)

        self._wait(
            f"weights v{version}",
            poll,
            self.opts.item_timeout_s,
            f"waiting for the trainer to publish weights v{version}",
        )

    def _queue_call(self, method: str, *args):
        """A call to the queue actor that survives its restart: when the restarted actor has
        lost its state (it holds no run), reopen the run and re-submit what is outstanding
        (results are deterministic and idempotent by item id, so nothing is lost or doubled)."""
        import ray

        q = self.actors.queue
        for attempt in range(30):
            try:
                out = ray.get(getattr(q, method).remote(*args))
                if method == "stats" and out.get("run_id") != self.run_id:
                    self._reopen_queue()
                    out = ray.get(q.stats.remote())
                return out
            except ray.exceptions.RayActorError:  # restarting (max_restarts=-1): retry
                if attempt == 29:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")

    def _open_queue(self) -> bool:
        """Attach the queue to this run with the run's lease and spill policy; True when it
        kept the run's earlier state."""
        import ray

        q = self.actors.queue
        kept = ray.get(q.open_run.remote(self.run_id))
        ray.get(q.configure.remote(self.opts.lease_s, self.opts.spill_policy()))
        return kept

    def _reopen_queue(self) -> None:
        import ray

        q = self.actors.queue
        self._open_queue()
        outstanding = list(self._outstanding.values())
        ray.get(q.submit.remote(outstanding))
        if self._posted is not None:  # the training batch the trainer may still wait for
            ray.get(q.post.remote(*self._posted))
        self.queue_restarts += 1
        progress.line(
            self.log,
            f"  the request queue restarted with no state: re-submitted {len(outstanding)}"
            " outstanding item(s)",
        )

    def run_items(self, items: list, label: str) -> dict[str, Any]:
        """Submit items and wait for all results (already finished ones are reused)."""
        import ray

        q = self.actors.queue
        ids = [it.item_id for it in items]
        self._outstanding.update({it.item_id: it for it in items})
        queued = self._queue_call("submit", items)
        self.items_reused += len(items) - queued
        done: dict[str, Any] = {}

        def poll(wait_s: float):
            done.update(self._queue_call("wait_results", ids, wait_s))
            return done if len(done) == len(ids) else None

        def status():
            s = self.queue_stats
            pools = " ".join(f"{p} {n}" for p, n in sorted(s["workers_by_pool"].items()))
            return len(done), (
                f"queue {s['pending']}, leased {s['leased']}, replicas {pools or 'none'}, "
                f"${self.ledger.cost_usd():.4f}"
            )

        try:
            self._wait(label, poll, self.opts.item_timeout_s, label, len(ids), status)
        except TimeoutError:
            self.items_lost += len(ids) - len(done)
            raise
        finally:
            for i in ids:
                self._outstanding.pop(i, None)
        ray.get(q.forget.remote(ids))
        for r in done.values():
            self.ledger.busy(_ledger_pool(r.pool), r.busy_s)
        return done

    def _samplers_rate(self, results, samples: int, sample_s: float) -> float | None:
        """The sampler replicas' throughput (samples/s) in this rollout: what can explore
        during the update. With the trainer sampling too, the rollout's own rate would count
        the trainer's GPUs, so the replicas' per-item rate times their number is used."""
        if not samples:
            return None
        if not self.opts.trainer_samples:
            return samples / max(1e-6, sample_s)
        mine = [r for r in results if r.pool != Pool.TRAINER]
        busy = sum(r.busy_s for r in mine)
        pools = (self.queue_stats or {}).get("workers_by_pool", {})
        replicas = sum(n for p, n in pools.items() if p != Pool.TRAINER)
        if busy <= 0 or replicas == 0:
            return None  # the trainer took every item: keep the last estimate
        return sum(len(r.rewards) for r in mine) / busy * replicas

    # -- One iteration -------------------------------------------------------------------
    def iteration(self, it: int, version: int) -> dict[str, Any]:
        """One iteration: the five steps of docs/design.md as named calls (the module docstring
        has the messages they exchange with the replicas and the trainer)."""
        t0 = time.perf_counter()
        self.wait_version(version)  # the weights v_t are published
        prompts, seeds = iteration_batch(self.cfg, self.train_prompts, it)
        selection, extra = self._seeds_chosen(it, version, prompts[:: self.cfg.grpo.group_size])
        plan = plan_rollout(  # 1. the batch, with exploration's seeds in place
            prompts,
            seeds,
            self.cfg.grpo.group_size,
            selection.seeds if selection is not None else None,
            set(selection.trajectories) if selection is not None else set(),
        )
        results, rewards, trajectories = self._rollout(plan, selection, it, version)  # 2.
        advantages, group_stats = self._advantages(plan, rewards, selection, extra, it)
        t1 = time.perf_counter()
        sample_s = self._last_sample_s = t1 - t0
        rate = self._samplers_rate(results.values(), len(plan.to_sample), sample_s)
        if rate is not None:
            self._rate = _ema(self._rate, rate)
        self._post_batch(it, trajectories, advantages)  # 3. the trainer trains on it
        exploration = self._explore_next(it, version)  # 4. exploration meanwhile
        update = self._await_update(it, exploration)  # 5. the next weights
        return self._metrics(it, update, group_stats, len(trajectories), results, extra, t1)

    def _seeds_chosen(self, it: int, version: int, unique: list[str]):
        """Step 1's seeds: the critical path explores now; spot exploration chose them during
        the last update; otherwise none (random seeds). Returns (selection or None, metrics)."""
        mode = self.cfg.exploration.mode
        selection, extra = None, {}
        if mode == "critical_path":  # explore with the fresh weights, then use the best
            selection, extra = self._explore_now(it, version, unique, self._budget())
        elif mode == "spot" and self.next_selection is not None:
            selection, extra = self.next_selection, dict(self.next_explore_metrics)
        self.next_selection, self.next_explore_metrics = None, {}
        return selection, extra

    def _rollout(self, plan: RolloutPlan, selection, it: int, version: int):
        """Step 2: sample what is not sampled yet (critical-path selections are on these
        weights); returns the items' results and the batch's rewards and trajectories."""
        items = self._chunk_items(plan.to_sample, f"r{it}-v{version}", Kind.ROLLOUT, it, version)
        results = self.run_items(items, f"iteration {it + 1} rollout") if items else {}
        rolled_r = [r for item in items for r in results[item.item_id].rewards]
        rolled_t = [t for item in items for t in results[item.item_id].trajectories]
        sel_r = {p: selection.selected_rewards[p] for p in plan.reused}
        sel_t = {p: selection.trajectories[p] for p in plan.reused}
        return results, plan.assemble(rolled_r, sel_r), plan.assemble(rolled_t, sel_t)

    def _advantages(self, plan: RolloutPlan, rewards, selection, extra, it: int):
        """The planner learns from the rollout's rewards, the stale/fresh rank agreement of the
        explored seeds is measured, and the group advantages are computed."""
        import torch

        from spotlight.exploration import rank_preservation

        g = plan.group
        per_prompt = [(p, rewards[b * g : (b + 1) * g]) for b, p in enumerate(plan.prompts)]
        for prompt, rs in per_prompt:
            self.planner.note_rollout(prompt, rs)
        if self.cfg.exploration.mode == "spot" and selection is not None:
            extra["rank_spearman_stale_fresh"] = rank_preservation(
                {p: selection.selected_rewards[p] for p in selection.seeds}, dict(per_prompt)
            )
        return score_groups(torch.tensor(rewards, dtype=torch.float32), self.cfg, it)

    def _post_batch(self, it: int, trajectories, advantages) -> None:
        """Step 3: post the training batch where the trainer waits for it."""
        import ray

        from spotlight.trainer import train_batch_key

        batch = {
            "trajectories": trajectories,
            "advantages": advantages.flatten().tolist(),
            "seed": update_seed(self.cfg, it),
        }
        self._posted = (train_batch_key(it), [ray.put(batch)])
        ray.get(self.actors.queue.post.remote(*self._posted))

    def _explore_next(self, it: int, version: int):
        """Step 4: spot exploration of the next iteration's prompts, on these weights."""
        if self.cfg.exploration.mode == "spot" and it + 1 < self.cfg.num_iterations:
            return self._submit_exploration(it + 1, version)
        return None

    def _await_update(self, it: int, exploration) -> dict[str, Any]:
        """Step 5: the trainer's update (its weights published, its optimizer state posted),
        then what exploration finished meanwhile; the planner's state is saved."""
        import ray

        from spotlight.trainer import train_batch_key, update_key

        q = self.actors.queue
        update = self._wait(
            f"update of iteration {it}",
            lambda wait_s: self._queue_call("wait_post", update_key(it), wait_s),
            self.opts.item_timeout_s,
            f"iteration {it + 1}: the trainer's update",
        )
        ray.get(q.take.remote(train_batch_key(it)))
        ray.get(q.take.remote(update_key(it)))
        self._posted = None
        self.ledger.busy(Pool.ON_DEMAND, update["train_s"] * update["world_size"])
        self._train_s = _ema(self._train_s, update["train_s"])
        self._pending_optimizer = ray.get(update["optimizer"][0])
        if exploration is not None:
            self._collect_exploration(exploration, update["weights_version"])
        ray.get(self.actors.bandit.update.remote({"planner": self.planner.to_dict()}))
        return update

    def _metrics(self, it, update, group_stats, num_samples, results, extra, t1) -> dict:
        """The iteration's metrics row (``loop.metrics_row``, as the local loop's) and the
        Ray job's own figures."""
        loss = {
            k: v
            for k, v in update.items()
            if k not in ("iteration", "weights_version", "train_s", "world_size", "optimizer")
        }
        t2 = time.perf_counter()
        row = metrics_row(
            it,
            update["weights_version"],
            group_stats,
            num_samples,
            self._last_sample_s,
            t2 - t1,
            loss,
        )
        loads = [r.weights_load_s for r in results.values() if r.weights_load_s > 0]
        return {
            **row,
            "trainer_update_s": update["train_s"],
            "weights_load_s_max": max(loads, default=0.0),
            "sp_degree_max": max((r.sp_degree for r in results.values()), default=1),
            "sp_degree_min": min((r.sp_degree for r in results.values()), default=1),
            "exploration": self.cfg.exploration.mode,
            **extra,
        }

    # -- Exploration ---------------------------------------------------------------------
    def _chunk_items(self, flat, prefix: str, kind: str, it: int, version: int) -> list:
        """``flat`` (prompt, seed) samples as work items of ``sampler.batch_size``."""
        from spotlight.work_queue import WorkItem

        return [
            WorkItem(f"{prefix}-{k}", kind, it, version, ps, ss)
            for k, (ps, ss) in enumerate(chunks(flat, self.cfg.sampler.batch_size))
        ]

    def _budget(self) -> int:
        """This iteration's exploration budget: ``budget_seeds`` when fixed; else, for
        ``critical_path``, the cap; for ``spot``, the seeds the replicas can sample during the
        predicted training time (both measured)."""
        from spotlight.planner import exploration_budget

        xcfg = self.cfg.exploration
        if xcfg.budget_seeds:
            return min(xcfg.budget_seeds, xcfg.max_seeds_per_iteration)
        if xcfg.mode == "critical_path":  # best-of-N: as much as it takes
            return xcfg.max_seeds_per_iteration
        train_s = self._train_s if self._train_s is not None else self._last_sample_s
        return exploration_budget(
            xcfg.budget_scale * (train_s or 0.0), self._rate or 0.0, xcfg.max_seeds_per_iteration
        )

    def _submit_exploration(self, it: int, version: int):
        """Plan and queue the exploration of iteration ``it``'s prompts on weights ``version``."""
        import ray

        from spotlight.exploration import Exploration

        cfg = self.cfg
        unique = iteration_batch(cfg, self.train_prompts, it)[0][:: cfg.grpo.group_size]
        budget = self._budget()
        exp = Exploration(it, version, unique, self.planner.plan(unique, budget), budget=budget)
        items = exp.work_items(cfg.seed, cfg.sampler.batch_size)
        if items:
            ray.get(self.actors.queue.submit.remote(items))
        return exp

    def _collect_exploration(self, exp, fresh_version: int) -> None:
        """Take what finished (unfinished items are withdrawn), select, learn."""
        import ray

        from spotlight.exploration import select_groups

        q = self.actors.queue
        ids = exp.all_item_ids()
        if self.cfg.exploration.budget_seeds and ids:  # a fixed budget is explored in full
            done: dict[str, Any] = {}

            def poll(wait_s: float):
                done.update(self._queue_call("wait_results", ids, wait_s))
                return done if len(done) == len(ids) else None

            self._wait(
                f"exploration of iteration {exp.iteration}",
                poll,
                self.opts.item_timeout_s,
                f"iteration {exp.iteration + 1} exploration",
                len(ids),
                lambda: (len(done), ""),
            )
        results = ray.get(q.results.remote(ids))
        ray.get(q.drop.remote(ids))
        for r in results.values():
            self.ledger.busy(_ledger_pool(r.pool), r.busy_s)
        sel = select_groups(
            exp,
            results,
            self.cfg.grpo.group_size,
            fresh_version,
            self.cfg.exploration.max_staleness,
        )
        for prompt, rewards in sel.explored.items():
            self.planner.observe(prompt, rewards)
        self.next_selection = sel
        self.next_explore_metrics = {
            **sel.metrics(),
            "explore_budget_predicted": exp.budget,
            "explore_budget_used": sel.seeds_explored,
            "explore_weights_version": exp.weights_version,
        }

    def _explore_now(self, it: int, version: int, unique: list[str], budget: int):
        """Critical-path exploration: explore on ``version`` and wait for all of it."""
        from spotlight.exploration import Exploration, select_groups

        cfg = self.cfg
        exp = Exploration(it, version, unique, self.planner.plan(unique, budget), budget=budget)
        items = exp.work_items(cfg.seed, cfg.sampler.batch_size)
        results = self.run_items(items, f"iteration {it + 1} exploration") if items else {}
        sel = select_groups(
            exp, results, cfg.grpo.group_size, version, cfg.exploration.max_staleness, True
        )
        for prompt, rewards in sel.explored.items():
            self.planner.observe(prompt, rewards)
        return sel, {
            **sel.metrics(),
            "explore_budget_predicted": budget,
            "explore_budget_used": sel.seeds_explored,
        }

    def fault_counters(self) -> dict[str, Any]:
        """Preemptions and what the queue did about them, for metrics.jsonl and summary.json.

        ``preemptions``: nodes the trace replay took away (locally), else the replicas that
        reported a notice. ``items_resumed`` / ``steps_resumed``: items continued from a
        committed checkpoint, and the denoising steps that saved. ``items_lost``: items whose
        result never came (0 unless a run fails)."""
        s = self.queue_stats
        inj = self.injector
        base = self._counter_base
        out = {
            "preemptions": inj.stats.preemptions if inj else s.get("notices", 0),
            "preemption_notices": inj.stats.notices if inj else s.get("notices", 0),
            "items_resumed": s.get("items_resumed", 0),
            "steps_resumed": s.get("steps_resumed", 0),
            "items_released": s.get("released", 0),
            "leases_expired": s.get("leases_expired", 0),
            "items_reused": self.items_reused,
            "items_lost": self.items_lost,
            "duplicates_ignored": s.get("duplicates_ignored", 0),
            "queue_restarts": self.queue_restarts,
        }
        for k in QUEUE_COUNTERS:
            out[k] += base.get(k, 0)
        if inj is not None:
            out["spot_nodes"] = len(inj.nodes.nodes)
        return out

    def evaluate(self, it: int, version: int) -> float:
        """Mean validation reward (seeds 0..S-1 per prompt) through the sampler replicas."""
        self.wait_version(version)
        flat = [(p, s) for p in self.val_prompts for s in range(self.cfg.num_val_seeds)]
        items = self._chunk_items(flat, f"v{it}-v{version}", Kind.VAL, it, version)
        results = self.run_items(items, f"validation at v{version}")
        rewards = [r for item in items for r in results[item.item_id].rewards]
        first = results[items[0].item_id]
        self.val_samples = (first.images, list(items[0].prompts), list(items[0].seeds))
        return sum(rewards) / len(rewards)

    # -- Checkpoints ---------------------------------------------------------------------
    def save_checkpoint(self, done: int, version: int) -> None:
        import ray

        ckpt = self.out_dir / CKPT_DIR
        ckpt.mkdir(exist_ok=True)
        header, (ref,) = ray.get(self.actors.broadcast.get.remote(version))
        from spotlight.weights import unpack_state

        data = ray.get(ref)
        unpack_state(data, header)  # verify before it becomes the run's checkpoint
        atomic(ckpt / "policy.safetensors", lambda p: p.write_bytes(data))
        opt = self._pending_optimizer
        atomic(ckpt / "optimizer.pt", lambda p: p.write_bytes(opt))
        write_json(
            ckpt / "state.json",
            {
                "iterations_done": done,
                "weights_version": version,
                "recipe": self.cfg.recipe,
                "policy_sha256": sha256(ckpt / "policy.safetensors"),
                "ledger": self.ledger.to_dict(),
                "next_selection": self._selection_state(),
                "counters": self.fault_counters(),
            },
        )

    def _selection_state(self) -> dict[str, Any] | None:
        """The next iteration's explored seeds: a resumed driver rolls out the same ones."""
        sel = self.next_selection
        if sel is None:
            return None
        return {
            "seeds": sel.seeds,
            "explored": sel.explored,
            "selected_rewards": sel.selected_rewards,
            "fallback_prompts": sel.fallback_prompts,
            "seeds_explored": sel.seeds_explored,
            "metrics": self.next_explore_metrics,
        }

    def _load_checkpoint(self) -> tuple[int, int, tuple[bytes, bytes]]:
        state = read_checkpoint_state(self.out_dir, self.cfg.recipe)
        ckpt = self.out_dir / CKPT_DIR
        nxt = state.get("next_selection")
        if nxt:
            from spotlight.exploration import Selection

            self.next_selection = Selection(
                nxt["seeds"],
                nxt["explored"],
                nxt["selected_rewards"],
                nxt["fallback_prompts"],
                nxt["seeds_explored"],
            )
            self.next_explore_metrics = nxt["metrics"]
        if "ledger" in state:
            self.ledger.load(state["ledger"])
            c = state.get("counters", {})
            self.items_reused = c.get("items_reused", 0)
            self.items_lost = c.get("items_lost", 0)
            self.queue_restarts = c.get("queue_restarts", 0)
            self._counter_base = {k: v for k, v in c.items() if k in QUEUE_COUNTERS}
        initial = ((ckpt / "policy.safetensors").read_bytes(), (ckpt / "optimizer.pt").read_bytes())
        return state["iterations_done"], state["weights_version"], initial

    def stop_trainer(self, next_it: int) -> None:
        """End the trainer's loop early (the run stopped after ``next_it - 1`` iterations):
        the trainer waits for the batch of ``next_it``, and a stop message fills that slot."""
        import ray

        from spotlight.trainer import STOP_BATCH, train_batch_key

        if next_it < self.cfg.num_iterations:  # else its loop ends by itself
            ray.get(self.actors.queue.post.remote(train_batch_key(next_it), [ray.put(STOP_BATCH)]))

    def finish(self) -> None:
        if self._trainer_thread is not None:
            self._trainer_thread.join(timeout=120)
        if self._trainer_error is not None:
            raise RuntimeError(f"the trainer failed: {self._trainer_error}")


def _ema(old: float | None, new: float, weight: float = 0.5) -> float:
    return new if old is None else weight * new + (1 - weight) * old


def _autoscaling(max_replicas: int) -> dict[str, Any]:
    """Serve autoscaling driven by the request queue's depth (spotlight.deployments.scaling)."""
    return {
        "min_replicas": 1,
        "initial_replicas": max_replicas,
        "max_replicas": max_replicas,
        "upscale_delay_s": 1.0,
        "downscale_delay_s": 60.0,
        "policy": {"policy_function": "spotlight.deployments.scaling:queue_depth_policy"},
    }


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
    if cfg.sampler.group_init_noise:  # work items carry (prompt, seed) pairs only, so far
        raise ValueError(
            "sampler.group_init_noise is not supported by the Ray runner yet (its work items"
            " carry no init seeds, so group members would not share their initial noise)"
        )
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
    with RayLogRoute(out_dir / RAY_LOG, log) as route:  # entered before ray.init's first lines
        started_here, injector = connect(opts, log)
        route.take_worker_output()
        return _run_ray(cfg, out_dir, resume, opts, log, started_here, injector)


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

    from spotlight.tracking import Tracker

    ctl = Controller(cfg, out_dir, opts, log, injector)
    try:
        check_capacity(opts, autoscaling=not started_here or injector is not None, log=log)
        start, version = ctl.start(resume)
        metrics_path = out_dir / METRICS
        truncate_metrics(metrics_path, start)
        t_start = time.perf_counter() - last_wall_s(metrics_path)
        tracker = Tracker(cfg, out_dir, enabled=opts.wandb, resume=resume)
        ctl._tick()
        if start == 0:
            val = ctl.evaluate(-1, version)
            write_json(out_dir / INITIAL_VAL, {"val_reward": val})
            tracker.log({"val_reward": val, "iteration": -1, "weights_version": version})
            tracker.log_images(*ctl.val_samples, step=0)
            progress.line(
                log,
                f"[spotlight] {cfg.recipe} on Ray: {cfg.num_iterations} iterations, "
                f"validation reward before training {val:.4f}",
            )
        initial_val = initial_val_reward(out_dir)
        run_bar = progress.bar(
            log,
            cfg.recipe,
            cfg.num_iterations,
            initial=start,
            unit="iter",
            every_s=None,
            leave=True,
        )
        for it in range(start, cfg.num_iterations):
            m = ctl.iteration(it, version)
            version = m["weights_version"]
            if validate_now(cfg, it, time.perf_counter() - t_start):
                m["val_reward"] = ctl.evaluate(it, version)
            ctl._tick()
            m.update(ctl.ledger.snapshot())
            m.update(
                wall_s=time.perf_counter() - t_start,
                **ctl.fault_counters(),
                queue_depth=ctl.queue_stats["pending"],
                replicas=ctl.queue_stats["workers_by_pool"],
            )
            reason = stop_reason(cfg, m, initial_val)
            if reason is not None:
                m["stopped"] = reason
            append_row(metrics_path, m)
            ctl.save_checkpoint(it + 1, version)
            tracker.log({k: v for k, v in m.items() if k != "stopped"})
            if "val_reward" in m:
                tracker.log_images(*ctl.val_samples, step=it + 1)
            progress.line(log, progress_line(m, cfg.num_iterations))
            run_bar.update(1)
            if reason is not None:
                progress.line(log, stop_line(reason, m, initial_val, cfg))
                ctl.stop_trainer(it + 1)
                break
        run_bar.close()
        ctl.finish()
        summary = _summary(metrics_path, cfg, ctl)
        write_json(out_dir / SUMMARY, summary)
        from spotlight.plots import plot_report, plot_rewards

        plot_rewards(out_dir, title=f"{cfg.recipe}: {out_dir.name}")
        plot_report(out_dir, title=f"{cfg.recipe} on Ray: {out_dir.name}")
        tracker.finish(summary)
        progress.line(
            log,
            f"[spotlight] done: {out_dir} (summary.json, metrics.jsonl, report.png, {CKPT_DIR}/)",
        )
        return summary
    finally:
        if not opts.keep_cluster_state:
            _cleanup()
        if started_here:
            ray.shutdown()
        if injector is not None:
            injector.nodes.shutdown()


def _cleanup() -> None:
    from ray import serve

    from spotlight.actors.handles import kill_actors

    with contextlib.suppress(Exception):
        serve.delete(APP_NAME)
    kill_actors()


def _summary(metrics_path: Path, cfg: Config, ctl: Controller) -> dict[str, Any]:
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line]
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
