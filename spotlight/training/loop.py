"""The single-process reference loop: Flow-GRPO iterations without Ray.

One iteration: sample G images for each of B prompts, score them, compute group advantages,
take the GRPO update. All randomness of iteration t (prompts, seeds, trained timesteps) derives
from (config.seed, t), so a resumed run repeats exactly what an uninterrupted one would do.
It is the baseline the Ray job is measured against and the engine of the tests.

It explores as the Ray job does (``spotlight.explore.strategy``), one step after the other
where the Ray job overlaps them: ``critical_path`` samples its candidates before the rollout,
``spot`` samples the next iteration's candidates on the rollout's weights before the update
(the Ray job's replicas sample them while the trainer trains). The work items are the Ray job's,
so with a fixed budget both explore and select the same seeds.

With ``schedule="pipelined"`` (:mod:`spotlight.training.pipeline`) it samples iteration
``t + 1``'s rollout, with its candidates, before update ``t`` on the weights ``v_t`` (the Ray
job's replicas sample it during the update) and trains iteration ``t + 1`` on it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch

from spotlight.config import Config
from spotlight.explore.exploration import Exploration
from spotlight.explore.strategy import ExplorationStrategy
from spotlight.flow.grpo import group_advantages
from spotlight.flow.item_sampling import item_result
from spotlight.flow.old_policy import OldPolicy
from spotlight.flow.sampler import Trajectory, sample
from spotlight.flow.streams import (
    BATCH_STREAM,
    SEED_SPACE,
    SHUFFLE_STREAM,
    UPDATE_STREAM,
    iteration_rng,
)
from spotlight.flow.update import grpo_update, training_state
from spotlight.policies.base import Policy
from spotlight.prompts import read_prompt_file, word_prompts
from spotlight.rewards import Reward
from spotlight.scheduling.work_queue import ItemResult, Pool, WorkItem
from spotlight.tasks import get_task
from spotlight.training.evaluate import score_prompts, summarize
from spotlight.training.pipeline import (
    ROLLOUT_LAG,
    PendingRollout,
    old_policy_for,
    pipelined_plan,
    samples_lag,
)
from spotlight.training.rollout import RolloutPlan, plan_rollout


def validate_now(cfg: Config, iteration: int, wall_s: float) -> bool:
    """Whether ``iteration`` ends with a validation: every ``val_every``, the last one, and the
    one that passes ``max_wall_s`` (so a capped run ends on a measured reward)."""
    last = iteration == cfg.num_iterations - 1
    capped = cfg.max_wall_s is not None and wall_s >= cfg.max_wall_s
    return (iteration + 1) % cfg.val_every == 0 or last or capped


def stop_reason(cfg: Config, row: dict[str, Any], initial_val: float | None) -> str | None:
    """Why a run ends after the iteration of metrics ``row``: ``"target"`` (its validation
    beat ``initial_val`` by ``stop_at_val_gain``), ``"wall_cap"`` (past ``max_wall_s``), or
    None (go on; the loop itself ends after ``num_iterations``)."""
    gain, val = cfg.stop_at_val_gain, row.get("val_reward")
    if None not in (gain, val, initial_val) and val >= initial_val + gain:
        return "target"
    if cfg.max_wall_s is not None and row["wall_s"] >= cfg.max_wall_s:
        return "wall_cap"
    return None


def iteration_batch(
    cfg: Config, pool: list[str], iteration: int, with_init_seeds: bool = False
) -> tuple[list[str], list[int]] | tuple[list[str], list[int], list[int] | None]:
    """The (prompt, seed) pairs of an iteration: B prompts from the pool, G random seeds each.

    With ``with_init_seeds`` also the init seeds (the ``init_seeds`` of
    :func:`spotlight.flow.sampler.sample`): when ``cfg.sampler.group_init_noise`` one random seed
    per group, repeated for its G members (so they share their initial noise), else None. They are
    drawn after the seeds, so prompts and seeds are the same either way.
    """
    rng = iteration_rng(cfg.seed, iteration, BATCH_STREAM)
    idx = rng.choice(len(pool), size=cfg.num_prompts_per_iteration, replace=False)
    group = cfg.grpo.group_size
    prompts = [pool[i] for i in idx for _ in range(group)]
    seeds = rng.integers(0, SEED_SPACE, size=len(prompts)).tolist()
    if not with_init_seeds:
        return prompts, seeds
    init_seeds = None
    if cfg.sampler.group_init_noise:
        per_group = rng.integers(0, SEED_SPACE, size=len(idx)).tolist()
        init_seeds = [s for s in per_group for _ in range(group)]
    return prompts, seeds, init_seeds


def group_batch(cfg: Config, pool: list[str], iteration: int) -> tuple[list[str], list[int] | None]:
    """Iteration ``iteration``'s prompts, one per group, and the initial-noise seed each group
    shares (None without ``sampler.group_init_noise``): what exploration plans for."""
    prompts, _, init = iteration_batch(cfg, pool, iteration, True)
    group = cfg.grpo.group_size
    return prompts[::group], init[::group] if init is not None else None


def score_groups(
    rewards: torch.Tensor,
    cfg: Config,
    iteration: int = 0,
    pools: list[list[float] | None] | None = None,
) -> tuple[torch.Tensor, dict[str, Any]]:
    """Group advantages of an iteration's flat rewards (prompt-major, G per prompt) and the
    metrics both loops report: mean reward, mean group std, zero-variance groups. ``pools``:
    per group, the candidates' rewards its advantages are normalized by (``group_advantages``).

    With ``cfg.grpo.shuffle_advantages`` (the control of a learning experiment) the advantages
    are permuted at random across the whole batch, seeded by ``(cfg.seed, iteration)``: the
    update keeps its size and noise but loses its signal."""
    grouped = rewards.view(-1, cfg.grpo.group_size)
    advantages = group_advantages(grouped, cfg.grpo.adv_eps, cfg.grpo.adv_clip, pools)
    if cfg.grpo.shuffle_advantages:
        perm = iteration_rng(cfg.seed, iteration, SHUFFLE_STREAM).permutation(advantages.numel())
        advantages = advantages.flatten()[torch.from_numpy(perm)].view_as(advantages)
    group_std = grouped.double().std(dim=1, unbiased=False)
    return advantages, {
        "train_reward_mean": float(grouped.mean()),
        "group_reward_std_mean": float(group_std.mean()),
        "zero_std_groups": int((group_std < 1e-6).sum()),
    }


def update_seed(cfg: Config, iteration: int) -> int:
    """Seed of iteration ``iteration``'s update (timestep subset, chunk order)."""
    return int(iteration_rng(cfg.seed, iteration, UPDATE_STREAM).integers(SEED_SPACE))


def prompt_sets(cfg: Config) -> tuple[list[str], list[str]]:
    """Training pool and validation prompts (disjoint).

    From ``cfg.prompt_file`` when set, else the task's splits when ``cfg.task`` is set, else
    built-in random-word prompts.
    """
    if cfg.prompt_file is not None:
        train, val = read_prompt_file(cfg.prompt_file)
        return train[: cfg.num_train_prompts], val[: cfg.num_val_prompts]
    if cfg.task is not None:
        task = get_task(cfg.task)
        return (
            task.prompts("train")[: cfg.num_train_prompts],
            task.prompts("val")[: cfg.num_val_prompts],
        )
    pool = word_prompts(cfg.num_train_prompts + cfg.num_val_prompts * 4, seed=cfg.seed)
    val = list(dict.fromkeys(pool[cfg.num_train_prompts :]))[: cfg.num_val_prompts]
    train = [p for p in pool[: cfg.num_train_prompts] if p not in set(val)]
    return train, val


def metrics_row(
    iteration: int,
    weights_version: int,
    group_stats: dict[str, Any],
    num_samples: int,
    sample_s: float,
    train_s: float,
    loss: dict[str, Any],
) -> dict[str, Any]:
    """The fields of an iteration's ``metrics.jsonl`` row that both runners write (the Ray job
    adds its timings, SP degrees, exploration figures, cost and fault counters)."""
    return {
        "iteration": iteration,
        "weights_version": weights_version,
        **group_stats,
        "num_samples": num_samples,
        "sample_s": sample_s,
        "train_s": train_s,
        **{f"loss/{k}": v for k, v in loss.items()},
    }


class ReferenceLoop:
    """Holds the policy, optimizer and reward of a single-process run.

    With ``grpo.nft_old_ema`` also DiffusionNFT's sampling policy (``old_policy``): rollouts
    and validation sample with it, the update takes its ``v_old`` from it, and it follows the
    trained weights by one EMA step after each update.
    """

    def __init__(self, cfg: Config, policy: Policy, reward: Reward):
        cfg.validate()
        self.cfg = cfg
        self.policy = policy
        self.reward = reward
        self.train_prompts, self.val_prompts = prompt_sets(cfg)
        self.optimizer, self.ref_policy = training_state(policy, cfg.grpo)
        self.old_policy = OldPolicy.for_config(cfg.grpo, policy)
        """DiffusionNFT's EMA sampling policy (``grpo.nft_old_ema``), else None: the policy
        samples with its own weights."""
        self.weights_version = 0
        self.explore = ExplorationStrategy(cfg)
        """Exploration's decisions (``exploration.mode``); this loop samples what it plans."""
        self._past: deque[tuple[int, OldPolicy]] = deque(maxlen=cfg.rollout_staleness + 1)
        """With ``rollout_staleness``: the sampling weights of the last versions (version, copy),
        the oldest first."""
        self.pending: PendingRollout | None = None
        """``schedule="pipelined"``: the next iteration's rollout, sampled already."""
        self.resume_rollout: tuple[Exploration, OldPolicy] | None = None
        """A resumed pipeline's next rollout, not sampled yet: its plan and the weights that
        sample it (a checkpoint keeps both)."""

    def sampling_weights(self):
        """Within: the policy holds the weights that sample (the old policy's, with one)."""
        return nullcontext() if self.old_policy is None else self.old_policy.applied(self.policy)

    @contextmanager
    def rollout_weights(self) -> Iterator[int]:
        """Within: the policy holds the weights the rollout samples with, whose version it
        yields: the sampling weights, or with ``rollout_staleness`` k those of k versions ago
        (of version 0 while fewer exist). Called once per iteration."""
        if not self.cfg.rollout_staleness:
            with self.sampling_weights():
                yield self.weights_version
            return
        with self.sampling_weights():
            self._past.append((self.weights_version, OldPolicy(self.policy)))
        version, weights = self._past[0]
        with weights.applied(self.policy):
            yield version

    def run_iteration(self, iteration: int) -> dict[str, Any]:
        """Explore (as configured), sample, score, update. Returns the iteration's metrics."""
        if self.cfg.schedule == "pipelined":
            return self._pipelined_iteration(iteration)
        cfg = self.cfg
        t0 = time.perf_counter()
        prompts, seeds, init_seeds = iteration_batch(
            cfg, self.train_prompts, iteration, with_init_seeds=True
        )
        selection, extra = self.explore.take()
        if self.explore.mode == "critical_path":  # explore on these weights, keep the best
            exp = self.explore.plan(
                iteration, self.weights_version, *group_batch(cfg, self.train_prompts, iteration)
            )
            results = self._run_items(exp.work_items(cfg.seed, cfg.sampler.batch_size))
            selection, extra = self.explore.critical_path_explored(exp, results)
        plan = self._plan(prompts, seeds, init_seeds, selection)
        t_rollout = time.perf_counter()
        todo = plan.to_sample
        rolled, rolled_r = [], []
        rollout_version = self.weights_version
        if todo:
            with self.rollout_weights() as rollout_version:
                rolled, rolled_r = self._sample_scored(plan, rollout_version)
        rate = len(todo) / (time.perf_counter() - t_rollout) if todo else None
        trajectories, advantages, group_stats = self._batch(
            iteration, plan, rolled, rolled_r, selection, extra
        )
        t1 = time.perf_counter()
        self.explore.measured(t1 - t0, rate)
        explored = None
        if self.explore.explores_next(iteration):  # the Ray job does this during the update
            explored = self.explore.plan(
                iteration + 1,
                self.weights_version,
                *group_batch(cfg, self.train_prompts, iteration + 1),
            )
            results = self._run_items(explored.work_items(cfg.seed, cfg.sampler.batch_size))
            extra["explore_s"] = time.perf_counter() - t1
        stats, train_s = self._train(iteration, trajectories, advantages, self.old_policy)
        if explored is not None:
            self.explore.spot_explored(explored, results, self.weights_version)
        row = metrics_row(
            iteration,
            self.weights_version,
            group_stats,
            len(trajectories),
            t1 - t0,
            train_s,
            stats,
        )
        if self.explore.mode != "off":
            row["exploration"] = self.explore.mode
        if cfg.rollout_staleness:
            row["rollout_weights_version"] = rollout_version
        return {**row, **extra}

    # -- The pipelined schedule -----------------------------------------------------------
    def _pipelined_iteration(self, iteration: int) -> dict[str, Any]:
        """Train on the rollout sampled before the last update (the first iteration's, and a
        resumed run's first, is sampled now), after sampling the next one on these weights."""
        cfg = self.cfg
        t0 = time.perf_counter()
        prompts, seeds, init_seeds = iteration_batch(
            cfg, self.train_prompts, iteration, with_init_seeds=True
        )
        pend, sampled_before = self.pending, self.pending is not None
        if pend is None:  # the first iteration, or a resumed run's: sampled now
            if self.resume_rollout is not None:  # the checkpoint's plan and weights
                exp, weights = self.resume_rollout
                with weights.applied(self.policy):
                    pend = self._sample_pipelined(exp)
            else:
                pend = self._plan_pipelined(iteration)
        if pend.exploration.iteration != iteration:
            raise RuntimeError(
                f"iteration {iteration}: the rollout sampled is iteration"
                f" {pend.exploration.iteration}'s"
            )
        self.resume_rollout = None
        selection, extra = self.explore.pipelined_selected(pend.exploration, pend.explored)
        plan = self._plan(prompts, seeds, init_seeds, selection)
        trajectories, advantages, group_stats = self._batch(
            iteration, plan, pend.rolled, pend.rolled_r, selection, extra
        )
        self.explore.measured(pend.sample_s, pend.rate)
        t1 = time.perf_counter()
        self.pending = None
        if iteration + 1 < cfg.num_iterations:  # the Ray job samples it during the update
            self.pending = self._plan_pipelined(iteration + 1)
            extra["next_rollout_s"] = time.perf_counter() - t1
        lag = samples_lag(
            [tr.weights_version for tr in trajectories],
            self.weights_version,
            ROLLOUT_LAG[cfg.schedule],
        )
        v_old = old_policy_for(cfg, lag, self.old_policy, pend.weights)
        stats, train_s = self._train(iteration, trajectories, advantages, v_old)
        row = metrics_row(
            iteration,
            self.weights_version,
            group_stats,
            len(trajectories),
            (pend.sample_s if sampled_before else 0.0) + (t1 - t0),
            train_s,
            stats,
        )
        row["schedule"] = "pipelined"
        row["rollout_weights_version"] = pend.exploration.weights_version
        row["rollout_lag"] = lag
        if self.explore.mode != "off":
            row["exploration"] = self.explore.mode
        return {**row, **extra}

    def _plan_pipelined(self, iteration: int) -> PendingRollout:
        """Plan iteration ``iteration``'s pipelined rollout on the current weights and sample
        it with the sampling weights."""
        exp = self.explore.plan_pipelined(
            iteration, self.weights_version, *group_batch(self.cfg, self.train_prompts, iteration)
        )
        with self.sampling_weights():
            return self._sample_pipelined(exp)

    def _sample_pipelined(self, exp: Exploration) -> PendingRollout:
        """Sample the pipelined rollout of ``exp`` (its candidates and the other prompts'
        seeds) with the weights the policy holds now, which it copies."""
        cfg = self.cfg
        t0 = time.perf_counter()
        prompts, seeds, init_seeds = iteration_batch(
            cfg, self.train_prompts, exp.iteration, with_init_seeds=True
        )
        plan = pipelined_plan(prompts, seeds, cfg.grpo.group_size, exp, init_seeds)
        weights = OldPolicy(self.policy)
        explored = self._run_items(
            exp.work_items(cfg.seed, cfg.sampler.batch_size), sampling_weights=False
        )
        todo, rolled, rolled_r = plan.to_sample, [], []
        if todo:
            rolled, rolled_r = self._sample_scored(plan, exp.weights_version)
        n = len(todo) + sum(len(r.rewards) for r in explored.values())
        took = time.perf_counter() - t0
        rate = n / took if n else None
        return PendingRollout(exp, plan, explored, rolled, rolled_r, weights, took, rate)

    # -- The steps both schedules share ---------------------------------------------------
    def _plan(self, prompts, seeds, init_seeds, selection) -> RolloutPlan:
        """The batch's rollout with a selection's seeds in place and its sampled prompts
        reused (``selection`` None: the random seeds, all sampled)."""
        return plan_rollout(
            prompts,
            seeds,
            self.cfg.grpo.group_size,
            selection.seeds if selection is not None else None,
            set(selection.trajectories) if selection is not None else set(),
            init_seeds,
        )

    def _sample_scored(self, plan: RolloutPlan, version: int) -> tuple[list, list[float]]:
        """Sample and score what ``plan`` samples, with the weights the policy holds (labelled
        ``version``): its trajectories and rewards, in order."""
        todo = plan.to_sample
        rolled = sample(
            self.policy,
            [p for p, _ in todo],
            [s for _, s in todo],
            self.cfg.sampler,
            version,
            init_seeds=plan.to_sample_init,
        )
        images = self.policy.decode(torch.stack([tr.latents for tr in rolled]))
        return rolled, [float(r) for r in self.reward(images, [p for p, _ in todo])]

    def _batch(self, iteration: int, plan: RolloutPlan, rolled, rolled_r, selection, extra):
        """The training batch: the sampled and the selected samples in batch order, scored
        (exploration learns from the rewards); (trajectories, advantages, group stats)."""
        group = self.cfg.grpo.group_size
        reused = {} if selection is None else selection.trajectories
        trajectories = plan.assemble(
            rolled, {p: [Trajectory.from_bytes(b) for b in bs] for p, bs in reused.items()}
        )
        rewards = plan.assemble(rolled_r, {p: selection.selected_rewards[p] for p in reused})
        per_prompt = [(p, rewards[b * group : (b + 1) * group]) for b, p in enumerate(plan.prompts)]
        pools = self.explore.rollout_scored(per_prompt, selection, extra)
        advantages, group_stats = score_groups(
            torch.tensor(rewards, dtype=torch.float32), self.cfg, iteration, pools
        )
        return trajectories, advantages, group_stats

    def _train(self, iteration: int, trajectories, advantages, v_old) -> tuple[dict, float]:
        """The update of ``iteration`` (``v_old``: DiffusionNFT's old policy for it), the EMA
        step, the new version; (loss statistics, seconds)."""
        t0 = time.perf_counter()
        stats = grpo_update(
            self.policy,
            self.optimizer,
            trajectories,
            advantages,
            self.cfg.grpo,
            seed=update_seed(self.cfg, iteration),
            ref_policy=self.ref_policy,
            old_policy=v_old,
        )
        if self.old_policy is not None:
            steps = int(stats["num_optimizer_steps"])
            stats["nft_old_decay"] = self.old_policy.step(self.policy, steps, self.cfg.grpo)
        train_s = time.perf_counter() - t0
        self.weights_version += 1
        self.explore.trained(train_s)
        return stats, train_s

    def _run_items(
        self, items: list[WorkItem], sampling_weights: bool = True
    ) -> dict[str, ItemResult]:
        """Sample and score exploration's work items here, one after the other, each with the
        sampling weights (they are the items' version: the loop explores on current weights;
        without ``sampling_weights``, with the weights the policy holds)."""
        out = {}
        for item in items:
            t0 = time.perf_counter()
            init = list(item.init_seeds) if item.init_seeds is not None else None
            with self.sampling_weights() if sampling_weights else nullcontext():
                trajs = sample(
                    self.policy,
                    list(item.prompts),
                    list(item.seeds),
                    self.cfg.sampler,
                    item.weights_version,
                    init_seeds=init,
                )
            images = self.policy.decode(torch.stack([tr.latents for tr in trajs]))
            rewards = self.reward(images, list(item.prompts))
            out[item.item_id] = item_result(
                item,
                trajs,
                rewards,
                worker_id="local",
                pool=Pool.ON_DEMAND,
                busy_s=time.perf_counter() - t0,
                resumed_from_step=0,
            )
        return out

    def evaluate(self) -> float:
        """Mean reward on the validation prompts with fixed seeds 0..num_val_seeds-1, sampled
        with the sampling weights (as the Ray job's replicas do)."""
        with self.sampling_weights():
            scores = score_prompts(
                self.policy,
                self.reward,
                self.val_prompts,
                self.cfg.num_val_seeds,
                self.cfg.sampler,
                self.weights_version,
            )
        return summarize(scores)["mean_reward"]
