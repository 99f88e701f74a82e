"""The Ray job's driver: one iteration as the five steps of docs/design.md.

``spotlight train`` runs :func:`spotlight.job.run.run_ray`, which makes a :class:`Controller`
and calls :meth:`Controller.iteration` once per iteration:

1. ``_seeds_chosen``: the seeds of the iteration's prompts. Spot exploration chose them during
   the last update; ``critical_path`` explores now, on the fresh weights, and trains on the
   selected samples directly; otherwise none (the reference loop's random seeds);
2. ``_rollout``: sample the rest as work items on weights ``v_t``: sampler replicas pull them
   from the request queue, the reward deployment scores them; ``_advantages``: the planner
   learns from the rewards and the group advantages are computed;
3. ``_post_batch``: the training batch goes to the trainer (:mod:`.protocol`);
4. ``_explore_next``: (``spot``) exploration items for the next iteration's prompts on ``v_t``,
   sized by the planner to the predicted training time;
5. ``_await_update``: the trainer's update (weights ``v_t + 1``); what exploration finished
   meanwhile selects the next iteration's seeds.

With ``schedule="pipelined"`` (:mod:`.pipeline`, :mod:`spotlight.training.pipeline`) step 2
waits for the rollout submitted during the last update (on ``v_t - 1``) and selects among its
candidates, step 4 submits the next one on ``v_t``, step 5 ends its optional candidates.

The decisions are pure and shared with the local runner (``spotlight.training.rollout``,
``spotlight.training.loop``, and exploration's in ``spotlight.explore.strategy``); the queue's
plumbing is :mod:`.queue_client`, the waits :mod:`.run_watch`. A restarted driver
(``--resume DIR``) continues after the last checkpointed iteration: the trainer starts from
that checkpoint and publishes its version, finished queue items of the interrupted iteration
are reused (their ids are deterministic), nothing is trained twice.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any, TextIO

from spotlight import progress
from spotlight.config import Config
from spotlight.job import fault_counters, launch, protocol
from spotlight.job.options import RayOptions
from spotlight.job.pipeline import Pipeline
from spotlight.job.queue_client import QueueClient
from spotlight.job.run_watch import RunWatch
from spotlight.scheduling.costs import Ledger
from spotlight.scheduling.work_queue import Kind, Pool
from spotlight.training.loop import (
    group_batch,
    iteration_batch,
    metrics_row,
    prompt_sets,
    score_groups,
    update_seed,
)
from spotlight.training.rollout import RolloutPlan, plan_rollout, samplers_rate, work_items
from spotlight.training.run_folder import (
    BANDIT_FILE,
    CKPT_DIR,
    QUEUE_COUNTERS,
    atomic,
    read_checkpoint_state,
    read_old_policy,
    read_pending_rollout,
    sha256,
    write_json,
    write_old_policy,
    write_pending_rollout,
)


def run_id_of(out_dir: Path, cfg: Config) -> str:
    """Identifies a run across driver restarts (same folder, same recipe)."""
    return hashlib.sha256(f"{out_dir.resolve()}|{cfg.recipe}".encode()).hexdigest()[:16]


class Controller:
    """State of one driver process (see the module docstring); the run driver's backend
    (:class:`spotlight.training.driver.Backend`)."""

    where = " on Ray"

    def __init__(
        self,
        cfg: Config,
        out_dir: Path,
        opts: RayOptions,
        log: TextIO | None,
        injector=None,
        gpus=None,
    ):
        from spotlight.explore.strategy import ExplorationStrategy

        self.cfg, self.out_dir, self.opts, self.log = cfg, out_dir, opts, log
        self.injector, self.gpus = injector, gpus  # gpus: job/placement.py, or None
        self.created = time.monotonic()
        """GPU time is held from here: the first wait accounts the time since."""
        self.run_id = run_id_of(out_dir, cfg)
        self.train_prompts, self.val_prompts = prompt_sets(cfg)
        self.ledger = Ledger(opts.prices)
        self.queue: QueueClient | None = None
        """The request queue (after :meth:`start`)."""
        self.watch: RunWatch | None = None
        """The run's waits, GPU-time ledger and trainer (after :meth:`start`)."""
        self._counter_base: dict[str, int] = {}
        """Counters a resumed run carried over, when the queue's own were lost."""
        self.explore = ExplorationStrategy(cfg)
        """Exploration's decisions (budget, plan, selection); the controller samples them."""
        self._pending_optimizer: bytes | None = None
        """The optimizer state of the last update, written by the next checkpoint."""
        self._stop_posted = False
        """The trainer's stop message is posted (once the run's last iteration is committed)."""
        self.val_samples: tuple = (None, [], [])
        """Images, prompts and seeds of the last validation's first item (logged to W&B)."""
        self.pipeline: Pipeline | None = None
        """``schedule="pipelined"``: the next iteration's rollout (after :meth:`start`)."""

    # -- Setup ---------------------------------------------------------------------------
    def start(self, resume: bool) -> tuple[int, int]:
        """Actors, Serve app and trainer; returns (iterations done, weights version)."""
        import ray

        from spotlight.actors.handles import ensure_actors

        self.actors = ensure_actors(
            bandit_path=str((self.out_dir / BANDIT_FILE).resolve()), lease_s=self.opts.lease_s
        )
        self.watch = RunWatch(
            lambda: self.queue.call("stats"),
            self.ledger,
            self.opts,
            self.log,
            self.injector,
            self.created,
        )
        self.queue = QueueClient(self.actors, self.run_id, self.opts, self.log, self.watch)
        self.pipeline = Pipeline(self.cfg, self.train_prompts, self.queue, self.explore)
        kept = self.queue.open()
        ray.get(self.actors.queue.clear_mailbox.remote())
        ray.get(self.actors.broadcast.clear.remote())
        ray.get(self.actors.queue.cancel.remote())
        start, version, initial = 0, 0, None
        self.explore.planner.load(ray.get(self.actors.bandit.get.remote("planner")))
        if resume:  # the checkpoint's planner, if it has one, replaces the actor's
            start, version, initial = self._load_checkpoint()
            if kept:  # the queue's counters went on counting this run
                self._counter_base = {}
        progress.line(
            self.log,
            f"[spotlight] ray: {len(ray.nodes())} node(s), {self.opts.num_samplers} sampler "
            f"replica(s), {self.opts.num_train_workers} trainer worker(s)"
            + ("; reusing the queue's finished items" if kept else ""),
        )
        # the trainer starts on a thread while Serve deploys the samplers: both start together
        self.watch.trainer = launch.start_trainer(
            self.cfg, self.opts, self.out_dir, self.run_id, start, version, initial, self.gpus
        )
        launch.start_serve(self.cfg, self.opts, self.injector is not None, self.log, self.gpus)
        return start, version

    # -- One iteration -------------------------------------------------------------------
    def iteration(self, it: int, version: int) -> dict[str, Any]:
        """One iteration: the five steps of docs/design.md as named calls (the module docstring
        has them in words, :mod:`.protocol` the messages they exchange with the trainer)."""
        t0 = time.perf_counter()
        self.queue.wait_version(version)  # the weights v_t are published
        prompts, seeds, init = iteration_batch(self.cfg, self.train_prompts, it, True)
        pipelined = self.cfg.schedule == "pipelined"
        if pipelined:  # 1.-2. the rollout submitted during the last update, its candidates
            exp, results, rolled = self.pipeline.take(it, lambda: self._plan_next(it, version))
            candidates = {i: results[i] for i in exp.all_item_ids() if i in results}
            selection, extra = self.explore.pipelined_selected(exp, candidates)
        else:
            selection, extra = self._seeds_chosen(it, version, prompts[:: self.cfg.grpo.group_size])
        chosen = {} if selection is None else selection.trajectories
        plan = plan_rollout(  # 1. the batch, with exploration's seeds in place
            prompts,
            seeds,
            self.cfg.grpo.group_size,
            selection.seeds if selection is not None else None,
            set(chosen),
            init,
        )
        if not pipelined:
            results, rolled = self._rollout(plan, it, version)  # 2.
        rewards = plan.assemble(rolled[0], {p: selection.selected_rewards[p] for p in chosen})
        trajectories = plan.assemble(rolled[1], dict(chosen))
        advantages, group_stats = self._advantages(plan, rewards, selection, extra, it)
        t1 = time.perf_counter()
        sample_s = t1 - t0
        rate = samplers_rate(
            results.values(),
            sum(len(r.rewards) for r in results.values()),
            sample_s,
            self.opts.trainer_samples or pipelined,  # a pipeline's wait is not its rate
            self.watch.stats.get("workers_by_pool", {}),
        )
        self.explore.measured(sample_s, rate)
        self._post_batch(it, trajectories, advantages)  # 3. the trainer trains on it
        exploration = self._explore_next(it, version)  # 4. exploration meanwhile
        if pipelined and it + 1 < self.cfg.num_iterations:  # 4. the next rollout meanwhile
            self.pipeline.submit(self._plan_next(it + 1, version))
        update = self._await_update(it, exploration)  # 5. the next weights
        row = self._metrics(
            it, update, group_stats, len(trajectories), results, extra, t1, sample_s
        )
        if pipelined:
            row.update(
                schedule="pipelined",
                rollout_weights_version=exp.weights_version,
                rollout_lag=version - exp.weights_version,
            )
        return row

    def _plan_next(self, it: int, version: int):
        """The candidates of iteration ``it``'s pipelined rollout on weights ``version``."""
        batch = group_batch(self.cfg, self.train_prompts, it)
        return self.explore.plan_pipelined(it, version, *batch)

    def _seeds_chosen(self, it: int, version: int, unique: list[str]):
        """Step 1's seeds: the critical path explores now; spot exploration chose them during
        the last update; otherwise none (random seeds). Returns (selection or None, metrics)."""
        selection, extra = self.explore.take()
        if self.explore.mode == "critical_path":  # explore with the fresh weights, use the best
            selection, extra = self._explore_now(it, version, unique)
        return selection, extra

    def _rollout(self, plan: RolloutPlan, it: int, version: int):
        """Step 2: sample what is not sampled yet (critical-path selections are on these
        weights); returns the items' results and their rewards and trajectories, in order."""
        items = work_items(
            plan.to_sample,
            f"r{it}-v{version}",
            Kind.ROLLOUT,
            it,
            version,
            self.cfg.sampler.batch_size,
            plan.to_sample_init,
        )
        results = self.queue.run_items(items, f"iteration {it + 1} rollout") if items else {}
        rolled_r = [r for item in items for r in results[item.item_id].rewards]
        rolled_t = [t for item in items for t in results[item.item_id].trajectories]
        return results, (rolled_r, rolled_t)

    def _advantages(self, plan: RolloutPlan, rewards, selection, extra, it: int):
        """Exploration learns from the rollout's rewards (``ExplorationStrategy.rollout_scored``)
        and the group advantages are computed."""
        import torch

        g = plan.group
        per_prompt = [(p, rewards[b * g : (b + 1) * g]) for b, p in enumerate(plan.prompts)]
        pools = self.explore.rollout_scored(per_prompt, selection, extra)
        return score_groups(torch.tensor(rewards, dtype=torch.float32), self.cfg, it, pools)

    def _post_batch(self, it: int, trajectories, advantages) -> None:
        """Step 3: post the training batch where the trainer waits for it."""
        batch = {
            "trajectories": trajectories,
            "advantages": advantages.flatten().tolist(),
            "seed": update_seed(self.cfg, it),
        }
        protocol.post_batch(self.queue, it, batch)

    def _explore_next(self, it: int, version: int):
        """Step 4: spot exploration of the next iteration's prompts, on these weights."""
        if not self.explore.explores_next(it):
            return None
        exp = self.explore.plan(it + 1, version, *group_batch(self.cfg, self.train_prompts, it + 1))
        self.queue.submit(exp.work_items(self.cfg.seed, self.cfg.sampler.batch_size))
        return exp

    def _await_update(self, it: int, exploration) -> dict[str, Any]:
        """Step 5: the trainer's update (its weights published, its optimizer state posted),
        then what exploration finished meanwhile; the planner's state is saved."""
        import ray

        update = protocol.await_update(self.queue, it)
        self.ledger.busy(Pool.ON_DEMAND, update["train_s"] * update["world_size"])
        self.explore.trained(update["train_s"])
        self._pending_optimizer = update["optimizer"]
        self.pipeline.update_ended()  # the next rollout's optional candidates end here
        if exploration is not None:
            self._collect_exploration(exploration, update["weights_version"])
        ray.get(self.actors.bandit.update.remote({"planner": self.explore.planner.to_dict()}))
        return update

    def _metrics(self, it, update, group_stats, num_samples, results, extra, t1, sample_s):
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
            sample_s,
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
    def _collect_exploration(self, exp, fresh_version: int) -> None:
        """Take what finished (unfinished items are withdrawn); the strategy selects."""
        ids = exp.all_item_ids()
        if self.explore.waits_for_all() and ids:
            self.queue.wait_results(ids, f"iteration {exp.iteration + 1} exploration")
        self.explore.spot_explored(exp, self.queue.collect(ids), fresh_version)

    def _explore_now(self, it: int, version: int, unique: list[str]):
        """Critical-path exploration: explore on ``version`` and wait for all of it."""
        exp = self.explore.plan(
            it, version, unique, group_batch(self.cfg, self.train_prompts, it)[1]
        )
        items = exp.work_items(self.cfg.seed, self.cfg.sampler.batch_size)
        results = self.queue.run_items(items, f"iteration {it + 1} exploration") if items else {}
        return self.explore.critical_path_explored(exp, results)

    # -- Validation, counters, checkpoints -----------------------------------------------
    def evaluate(self, it: int, version: int) -> float:
        """Mean validation reward (seeds 0..S-1 per prompt) through the sampler replicas."""
        self.queue.wait_version(version)
        flat = [(p, s) for p in self.val_prompts for s in range(self.cfg.num_val_seeds)]
        items = work_items(
            flat, f"v{it}-v{version}", Kind.VAL, it, version, self.cfg.sampler.batch_size
        )
        results = self.queue.run_items(items, f"validation at v{version}")
        rewards = [r for item in items for r in results[item.item_id].rewards]
        first = results[items[0].item_id]
        self.val_samples = (first.images, list(items[0].prompts), list(items[0].seeds))
        return sum(rewards) / len(rewards)

    def fault_counters(self) -> dict[str, Any]:
        """Preemptions and what the queue did about them (:func:`.fault_counters.counters`)."""
        return fault_counters.counters(
            self.queue, self.watch.stats, self.injector, self._counter_base
        )

    def save_checkpoint(self, done: int, version: int) -> None:
        """The commit of ``done`` iterations: weights ``version`` (verified), the optimizer,
        the ledger, the next iteration's explored seeds and the counters.

        With ``grpo.nft_old_ema`` the published weights are the old (sampling) policy's; the
        trainer posted the trained weights and the old policy with the optimizer state
        (``spotlight.flow.old_policy.pack_parts``): ``policy.safetensors`` gets the trained
        weights and ``OLD_POLICY_FILE`` the old policy, as the reference loop writes them."""
        from spotlight.actors.weight_broadcast import read_published
        from spotlight.flow.old_policy import unpack_parts

        ckpt = self.out_dir / CKPT_DIR
        ckpt.mkdir(exist_ok=True)
        _, data = read_published(self.actors.broadcast, version)  # verified, waited for
        opt, old, rollout = self._pending_optimizer, None, None
        parts = unpack_parts(opt)
        if parts is not None:  # the trained weights came with the optimizer (see the trainer)
            data, opt = parts["policy"], parts["optimizer"]
            old, rollout = parts.get("old_policy"), parts.get("rollout_weights")
        atomic(ckpt / "policy.safetensors", lambda p: p.write_bytes(data))
        atomic(ckpt / "optimizer.pt", lambda p: p.write_bytes(opt))
        state = {
            "iterations_done": done,
            "weights_version": version,
            "recipe": self.cfg.recipe,
            "policy_sha256": sha256(ckpt / "policy.safetensors"),
            "runner": "ray",
            "ledger": self.ledger.to_dict(),
            "next_selection": self.explore.state(),
            "planner": self.explore.planner.to_dict(),
            "counters": self.fault_counters(),
        }
        if old is not None:
            write_old_policy(ckpt, old, state)
        pending = self.pipeline.state()
        if pending is not None:  # pipelined: the next rollout
            if rollout is None:
                raise RuntimeError("the trainer posted no rollout weights for the next rollout")
            write_pending_rollout(ckpt, pending, rollout, state)
        write_json(ckpt / "state.json", state)

    def _load_checkpoint(self) -> tuple[int, int, dict[str, bytes]]:
        """(iterations done, weights version, the trainer's start: the trained weights and
        the optimizer state, with ``grpo.nft_old_ema`` the old policy's bytes, and for a
        pipelined run the weights of its next rollout)."""
        import ray

        state = read_checkpoint_state(self.out_dir, self.cfg.recipe)
        ckpt = self.out_dir / CKPT_DIR
        self.explore.load_state(state.get("next_selection"))
        if "planner" in state:  # as committed: the actor's copy may be one update ahead
            self.explore.planner.load(state["planner"])
            ray.get(self.actors.bandit.update.remote({"planner": state["planner"]}))
        if "ledger" in state:
            self.ledger.load(state["ledger"])
            c = state.get("counters", {})
            self.queue.items_reused = c.get("items_reused", 0)
            self.queue.items_lost = c.get("items_lost", 0)
            self.queue.restarts = c.get("queue_restarts", 0)
            self._counter_base = {k: v for k, v in c.items() if k in QUEUE_COUNTERS}
        initial = {
            "policy": (ckpt / "policy.safetensors").read_bytes(),
            "optimizer": (ckpt / "optimizer.pt").read_bytes(),
        }
        old = read_old_policy(self.out_dir, state)
        if (old is not None) != self.cfg.grpo.nft_old_ema:
            raise ValueError(
                f"--resume {self.out_dir}: the checkpoint holds {'an' if old else 'no'} old"
                f" policy but the run has grpo.nft_old_ema {self.cfg.grpo.nft_old_ema}"
            )
        if old is not None:
            initial["old_policy"] = old
        pending = read_pending_rollout(self.out_dir, state)
        if pending is not None and self.cfg.schedule == "pipelined":
            from spotlight.explore.exploration import Exploration

            self.pipeline.resumed = Exploration.from_state(pending[0])
            initial["rollout_weights"] = pending[1]
        return state["iterations_done"], state["weights_version"], initial

    def figures(self) -> dict[str, Any]:
        """Added to every metrics row: cost so far, fault counters, queue depth, replicas."""
        self.watch.tick()
        return {
            **self.ledger.snapshot(),
            **self.fault_counters(),
            "queue_depth": self.watch.stats["pending"],
            "replicas": self.watch.stats["workers_by_pool"],
        }

    def stopped(self, next_it: int) -> None:
        """End the trainer's loop (the run stopped after ``next_it - 1`` iterations): the
        trainer waits for the batch of ``next_it``, and a stop message fills that slot. Only
        once the last iteration is committed: until then the trainer publishes its weights
        again if the broadcast restarts (the last validation and checkpoint read them)."""
        if not self._stop_posted:
            protocol.post_stop(self.queue, next_it)
            self._stop_posted = True
        self.pipeline.withdraw()

    def finish(self, summary: dict[str, Any]) -> None:
        """Wait for the trainer's end; the summary gets the cost, the fault counters and where
        it ran; ``reward.png`` and ``report.png``."""
        import dataclasses

        from spotlight.plots import plot_report, plot_rewards
        from spotlight.training.run_folder import METRICS, read_rows

        rows = read_rows(self.out_dir / METRICS)
        self.stopped(rows[-1]["iteration"] + 1 if rows else self.cfg.num_iterations)
        self.join()
        summary.update(self.ledger.snapshot())
        summary.update(
            runner="ray",
            weights_version=rows[-1]["weights_version"] if rows else None,
            **self.fault_counters(),
            num_samplers=self.opts.num_samplers,
            num_train_workers=self.opts.num_train_workers,
            prices=dataclasses.asdict(self.opts.prices),
        )
        name, recipe = self.out_dir.name, self.cfg.recipe
        plot_rewards(self.out_dir, title=f"{recipe}: {name}")
        plot_report(self.out_dir, title=f"{recipe} on Ray: {name}")

    def join(self) -> None:
        """Wait for the trainer's loop to end."""
        if self.watch is not None and self.watch.trainer is not None:
            self.watch.trainer.join()
