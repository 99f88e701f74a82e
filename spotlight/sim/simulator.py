"""A trace-driven discrete-event simulator of a training run at cluster scale. No Ray.

What it simulates, per iteration: the **rollout** (work items of ``batch_size`` samples pulled from
the real :class:`~spotlight.scheduling.work_queue.WorkQueue` by sampler replicas, each replica an SP
group of GPUs), the **update** on the on-demand trainer GPUs, and, for Spotlight, **exploration**
during the update (sized by the real :class:`~spotlight.explore.planner.Planner` from the update
time and the measured throughput, exactly as the controller does; seeds chosen by the real
:func:`~spotlight.explore.seeds.max_variance_subset`). Spot capacity comes and goes in nodes of
``Scenario.gpus_per_node`` GPUs, as a replayed capacity trace says
(:mod:`spotlight.scheduling.traces`, scaled to the scenario's spot nodes); SP groups are formed
within a node, so a preemption takes whole groups: every group of the node commits its item at the
next step boundary and hands it back (a notice, ``notice_s`` ahead) or loses what it sampled since
the item's last commit (no notice: the item's lease expires and it resumes from the commit, every
``commit_every`` steps). New spot nodes take ``replica_start_s`` before they sample. When rollout
items wait ``spill_wait_s`` for spot capacity, on-demand fallback GPUs are added for the rest of the
phase, and the queue's spill rule lets them take rollout items only.

Two baselines change the schedule (``System.pipeline``). **Colocated** systems have no sampler
pool: the same on-demand GPUs sample the rollout and then all of them run the update, whose time
scales with their number as the trainer's does (:func:`update_s`). **One-step-stale** pipelines
(``async_one_step``) sample iteration t+1's rollout on the weights before t's update while t
trains, so an iteration takes the longer of the two instead of their sum; the learning model
charges the staleness (``LearningModel.async_staleness_factor``). **Pipelined** Spotlight
(``spotlight_pipelined``) runs that schedule on spot samplers: the next rollout is oversampled by
the exploration budget (the max-variance G of a prompt's candidates trained, selected on the same
rewards; candidates beyond a prompt's G only in the update time the rollout leaves, dropped when
it ends), and the trainer GPUs sample what is left of the rollout once the update ends.

Accounting uses :class:`~spotlight.scheduling.costs.Ledger`: held GPU-seconds per pool (spot while
the trace holds the GPU, on-demand trainer GPUs for the whole run, on-demand samplers for the whole
run in on-demand systems, a colocated system's GPUs once, fallback GPUs while launched) and
busy GPU-seconds (sampling and training work). Work redone after preemptions without notice is
counted separately.

Inputs and what is measured versus modelled: :mod:`spotlight.sim.sim_model`. The cluster
(events, nodes, SP groups, preemptions, held GPU time) is :mod:`spotlight.sim.sim_cluster`,
sampling work items through the queue :mod:`spotlight.sim.sim_sampling`; this module holds a
run's state and the systems' iterations (:meth:`Simulation.run`) with what they learn.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import Any

from spotlight.config import ExplorationConfig
from spotlight.explore.planner import Planner
from spotlight.explore.seeds import max_variance_subset
from spotlight.explore.strategy import exploration_seeds, pipelined_seeds
from spotlight.scheduling.costs import Ledger, PriceTable
from spotlight.scheduling.traces import CapacityTrace
from spotlight.scheduling.work_queue import (
    KIND_PRIORITY,
    Kind,
    Pool,
    SpillPolicy,
    WorkItem,
    WorkQueue,
)
from spotlight.sim.sim_cluster import Group, Node
from spotlight.sim.sim_model import EVALS, LearningModel, Scenario, StepCosts, System
from spotlight.sim.sim_rewards import PopulationDraws, Rewards, pstdev
from spotlight.sim.sim_sampling import QueueSampling
from spotlight.sp.sp_groups import form_groups


@dataclass
class RunResult:
    system: str
    reached: bool
    iterations: int
    time_to_target_h: float | None
    wall_h: float
    ledger: Ledger
    preemptions: int
    notices: int
    work_redone_gpu_s: float
    spill_launches: int
    timeline: list[dict[str, Any]]
    """Per iteration: t_h, val_reward, cost_usd, util_spot, util_on_demand, spot_gpus."""
    preemption_times_h: list[float]
    on_demand_gpus: int = 0
    """On-demand GPUs held for the whole run (:meth:`System.on_demand_gpus`)."""
    total_gpus: int = 0
    """GPUs at full spot capacity (:meth:`System.total_gpus`)."""

    @property
    def time_per_iteration_s(self) -> float | None:
        """Mean seconds per iteration: ``wall_h`` (the time to target when it was reached)
        over ``iterations``, so time to target = iterations x time per iteration."""
        return self.wall_h * 3600 / self.iterations if self.iterations else None

    def summary(self) -> dict[str, Any]:
        return {
            "time_to_target_h": self.time_to_target_h,
            "reached_target": self.reached,
            "iterations": self.iterations,
            "time_per_iteration_s": self.time_per_iteration_s,
            "on_demand_gpus": self.on_demand_gpus,
            "total_gpus": self.total_gpus,
            "wall_h": self.wall_h,
            "cost_usd": self.ledger.cost_usd(),
            "gpu_util_spot": self.ledger.utilization(Pool.SPOT),
            "gpu_util_on_demand": self.ledger.utilization(Pool.ON_DEMAND),
            "gpu_h_spot": self.ledger.held_s[Pool.SPOT] / 3600,
            "gpu_h_on_demand": self.ledger.held_s[Pool.ON_DEMAND] / 3600,
            "idle_gpu_h": sum(
                self.ledger.held_s[p] - self.ledger.busy_s[p] for p in self.ledger.held_s
            )
            / 3600,
            "preemptions": self.preemptions,
            "preemption_notices": self.notices,
            "work_redone_gpu_h": self.work_redone_gpu_s / 3600,
            "spill_launches": self.spill_launches,
        }


def update_s(sc: Scenario, costs: StepCosts, gpus: int) -> float:
    """Seconds of one update on ``gpus`` GPUs: every sample of the rollout costs
    ``num_steps x train_step_fraction`` forward + backward passes (the paper scenarios: its
    recipe's, ``spotlight.sim.scenarios.trained_passes``), spread over the GPUs with linear
    data-parallel scaling (no communication cost modelled, for every system alike)."""
    return (
        sc.prompts_per_iteration
        * sc.group_size
        * max(1, round(sc.num_steps * sc.train_step_fraction))
        * costs.train_step_s
        / gpus
    )


class EmpiricalRewards(PopulationDraws):
    """The measured rewards resampled (``LearningModel.reward_draws = "empirical"``): seed ``k``
    of prompt ``p`` at iteration ``it`` draws one of the prompt's measured values. Kept to
    compare with the fitted draws (spotlight.sim.sim_rewards): it caps the best group's std at half
    the prompt's measured range, and it has no stale rewards (the selection's gain is shrunk
    linearly by the rank correlation instead). Common random numbers, as there."""

    def __init__(self, eval_file: str | Path, seed: int):
        path = Path(eval_file)
        if not path.exists():
            path = EVALS / str(eval_file)
        doc = json.loads(path.read_text())
        self.prompts = [p["rewards"] for p in doc["per_prompt"]]
        self.seed = seed

    def draw(self, it: int, prompt: int, n: int) -> list[float]:
        rng = random.Random(f"{self.seed}/{it}/{prompt}")
        pool = self.prompts[prompt]
        return [rng.choice(pool) for _ in range(n)]


class Simulation(QueueSampling):
    """One system on one scenario and trace (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        system: System,
        trace: CapacityTrace | None,
        prices: PriceTable | None = None,
        learning: LearningModel | None = None,
        seed: int = 0,
        trace_offset_s: float = 0.0,
    ):
        """``trace_offset_s``: start the (looped) trace this far past its first capacity, a
        trace window; 0 is where it first has GPUs."""
        self.sc, self.sys = scenario, system
        self.trace_offset_s = trace_offset_s
        self.costs = scenario.costs()
        self.oh = scenario.overheads
        self.learning = learning or LearningModel()
        self.rng = random.Random(seed)
        lm = self.learning
        if lm.reward_draws == "empirical":
            self.rewards = EmpiricalRewards(lm.prompts_file, seed)
        else:
            self.rewards = Rewards(lm.prompts_file, seed, lm.rank_preservation, EVALS)
        self.baseline_contrast = self.rewards.expected_random_std(scenario.group_size)
        self._shift = 0.0  # latent shift of the reward draws (LearningModel.follow_level)
        self._baseline_live: dict[float, float] = {}  # plain GRPO's live share, by shift
        self.ledger = Ledger(prices or PriceTable())
        self.t = 0.0
        self._seq = count()
        self._events: list[tuple[float, int, str, Any]] = []
        self.groups: dict[int, Group] = {}
        self._idle: set[int] = set()  # groups without an item (ready or not)
        self._od_held: int | None = None  # on-demand GPUs held now (None: count again)
        self._gid = count()
        self.nodes: dict[int, Node] = {}  # spot nodes held (starting, up or leaving)
        self._nid = count()
        self.version = 0
        self.preemptions = 0
        self.notices = 0
        self.redone_gpu_s = 0.0
        self.spill_launches = 0
        self.preemption_times: list[float] = []
        # Leases are modelled by the simulator (a killed group's items come back lease_s after
        # the kill); the queue itself never expires a live group's lease.
        # On-demand systems' samplers are on-demand GPUs: the spill rule must let them work.
        mode = "always" if system.samplers == Pool.ON_DEMAND else "after_wait"
        self.queue = WorkQueue(lease_s=1e15, spill=SpillPolicy(mode, self.oh.spill_wait_s))
        self.leases_expired = 0
        self.queue.open_run(f"sim-{system.name}")
        self._pending: dict[str, int] | None = None  # the queue's pending items by kind
        self._held: list[WorkItem] = []  # this phase's items not submitted yet, last first
        self._held_since = 0.0  # when the phase began
        self._fresh: set[str] = set()  # submitted items no worker has pulled yet
        self._takeable: tuple[bool, bool] | None = None  # (by spot, by on-demand); None: ask
        # what an on-demand pull may ever take (the spill rule, however long items waited)
        self._on_demand_kinds = [k for k in KIND_PRIORITY if self.queue.spill.allows(k, math.inf)]
        self._spot_poll: tuple[int, float] | None = None  # the last spot pull skipped
        self._orphans: list[WorkItem] = []
        self.exploration = ExplorationConfig(
            mode="spot",
            max_candidates=scenario.explore_candidates,
            uniform=system.uniform_planner,
            planner_gain=system.planner_gain,
            max_seeds_per_iteration=(
                scenario.explore_budget if scenario.explore_budget is not None else 10**9
            ),
        )
        """Spotlight's exploration settings: its planner's, and its budget's
        (``spotlight.explore.strategy.exploration_seeds``, as the runners size it)."""
        self.planner = Planner(self.exploration, scenario.group_size)
        self._rate: float | None = None  # measured sampling throughput, samples/s
        self._fallback: list[int] = []
        self.spot_capacity = 0  # spot GPUs the trace holds now (incl. starting and leaving)
        self.colocated = system.pipeline == "colocated"
        self.trainer_gpus = system.trainer_gpus(scenario)
        if system.samplers == Pool.ON_DEMAND:
            # colocated: the trainer GPUs themselves sample, between updates
            samplers = system.sampler_gpus(scenario)
            for size in form_groups(samplers, scenario.sp_degree, scenario.valid_degrees):
                self._add_group(size, Pool.ON_DEMAND, 0.0)
        else:
            if trace is None:
                raise ValueError("a spot system needs a capacity trace")
            self._schedule_trace(trace.scaled(scenario.spot_nodes))

    # -- One run -------------------------------------------------------------------------
    def run(self) -> RunResult:
        sc, lm = self.sc, self.learning
        G, P = sc.group_size, sc.prompts_per_iteration
        train_s = update_s(sc, self.costs, self.trainer_gpus)
        one_step_stale = self.sys.pipeline == "async_one_step"
        pipelined = self.sys.pipeline == "pipelined"
        progress = 0.0
        it = 0
        timeline = []
        reached_at = None
        explored: dict[int, int] = {}  # prompt index -> seeds explored (from the last update)
        horizon = sc.max_hours * 3600
        while self.t < horizon:
            if lm.follow_level:  # the draws at the current validation level
                level = lm.initial + (lm.target - lm.initial) * progress / lm.baseline_iterations
                self._shift = self.rewards.shift_for_level(level)
            batch = self.rewards.batch(it, P)
            next_prompts = self.rewards.batch(it + 1, P)
            t0 = self.t
            if one_step_stale:  # this rollout was sampled during the last update
                if it == 0:  # ... except the first, which fills the pipeline
                    self._sample(self._items(Kind.ROLLOUT, it, P * G))
                contrast, live = self._rollout(it, batch, explored, fresh=False)
            elif pipelined:  # the same, the trainer sampling the first rollout too
                if it == 0:  # the rate unknown yet: no oversampling
                    joined = self._trainer_joins()
                    self._sample(self._items(Kind.ROLLOUT, it, P * G))
                    self._trainer_leaves(joined)
                # the candidates are the trained samples: selected on the rewards trained on
                contrast, live = self._rollout(it, batch, explored, fresh=True)
            elif self.sys.exploration == "critical_path":
                n = sc.critical_candidates
                self._sample(self._items(Kind.ROLLOUT, it, P * n))
                contrast, live = self._rollout(it, batch, dict.fromkeys(batch, n), fresh=True)
            else:
                joined = self._trainer_joins()
                self._sample(self._items(Kind.ROLLOUT, it, P * G))
                self._trainer_leaves(joined)
                contrast, live = self._rollout(it, batch, explored, fresh=False)
            sample_s = self.t - t0
            if sample_s > 0 and not pipelined:  # (pipelined: measured at the update's start)
                samples = P * (
                    sc.critical_candidates if self.sys.exploration == "critical_path" else G
                )
                if self.sys.trainer_samples:  # the samplers' own rate: what explores later
                    self._rate = self._samplers_rate() or self._rate
                else:
                    self._rate = samples / sample_s
            # the update; Spotlight explores the next prompts meanwhile, a one-step-stale
            # pipeline samples the next rollout, a colocated system's samplers are training
            t_train_end = self.t + train_s
            self.ledger.busy(Pool.ON_DEMAND, train_s * self.trainer_gpus)
            explored = {}
            gain = self._progress(contrast, live)
            if (one_step_stale or pipelined) and it > 0:
                gain *= lm.async_staleness_factor  # trained on the weights before the last update
            last = min(1.0, (progress + gain) / lm.baseline_iterations) >= 1.0
            if one_step_stale:
                if not last:  # the next rollout, on the weights before this update, meanwhile
                    self._sample(self._items(Kind.ROLLOUT, it + 1, P * G))
                self._sample([], deadline=t_train_end)
            elif pipelined:
                if not last:
                    explored = self._pipelined_rollout(it + 1, next_prompts, train_s, t_train_end)
                self._sample([], deadline=t_train_end)
            elif self.sys.exploration == "spot":
                budget = exploration_seeds(self.exploration, train_s, self._rate)
                names = [str(p) for p in next_prompts]
                plan = self.planner.plan(names, budget)
                want = {p: plan[str(p)] for p in next_prompts if plan[str(p)] > 0}
                items = self._items(Kind.EXPLORE, it, sum(want.values()))
                done = self._sample(items, deadline=t_train_end)
                share = len(done) / len(items) if items else 0.0
                # exploration finishes in item order: prompts are covered in plan order
                covered = int(share * len(want) + 1e-9)
                explored = dict(list(want.items())[:covered])
            else:
                self._sample([], deadline=t_train_end)
            self.version += 1
            self.t = max(self.t, t_train_end)
            progress += gain
            it += 1
            frac = min(1.0, progress / lm.baseline_iterations)
            val = lm.initial + (lm.target - lm.initial) * frac
            snap = self.ledger.snapshot()
            timeline.append(
                {
                    "iteration": it,
                    "t_h": self.t / 3600,
                    "val_reward": val,
                    "cost_usd": snap["cost_usd"],
                    "util_spot": snap["util_spot"],
                    "util_on_demand": snap["util_on_demand"],
                    "spot_gpus": self.spot_capacity,
                    "contrast": contrast,
                    "live_share": live,
                }
            )
            if frac >= 1.0:
                reached_at = self.t
                break
        return RunResult(
            system=self.sys.name,
            reached=reached_at is not None,
            iterations=it,
            time_to_target_h=reached_at / 3600 if reached_at is not None else None,
            wall_h=self.t / 3600,
            ledger=self.ledger,
            preemptions=self.preemptions,
            notices=self.notices,
            work_redone_gpu_s=self.redone_gpu_s,
            spill_launches=self.spill_launches,
            timeline=timeline,
            preemption_times_h=[t / 3600 for t in self.preemption_times],
            on_demand_gpus=self.sys.on_demand_gpus(sc),
            total_gpus=self.sys.total_gpus(sc),
        )

    def _pipelined_rollout(
        self, it: int, prompts: list[int], train_s: float, t_train_end: float
    ) -> dict[int, int]:
        """``pipeline='pipelined'``: sample iteration ``it``'s rollout during the update that
        ends at ``t_train_end``, on the weights before it; returns the candidates per prompt
        (prompts with fewer than 2G train on G random seeds: :meth:`_rollout`).

        With ``exploration='oversample'`` the candidates are the real runners'
        (``pipelined_seeds``: what the samplers draw in the update time, their own rate now,
        the trainer's left out, less the rollout's P x G; no sampler up: none), split by the
        planner as Spotlight's exploration splits its budget: a prompt planned k seeds has k
        candidates in place of its G. Its first G are rollout work (the P x G items every
        pipeline samples); the other k - G are optional (``pipelined_required_items``):
        sampled once the rollout is done, dropped when the update ends, and given to the
        prompts in plan order as they finished. If the rollout is not done when the update
        ends, the trainer GPUs join it (``trainer_samples``), and the next iteration waits for
        all of it, as without candidates."""
        G, P = self.sc.group_size, self.sc.prompts_per_iteration
        self._rate = self._samplers_rate() or None
        budget = 0
        if self.sys.exploration == "oversample":
            budget = pipelined_seeds(self.exploration, train_s, self._rate, P * G)
        plan = self.planner.plan([str(p) for p in prompts], budget) if budget else {}
        extra = {p: plan[str(p)] - G for p in prompts if plan.get(str(p), 0) > G}
        self._sample(self._items(Kind.ROLLOUT, it, P * G), join_at=t_train_end)
        if not extra or self.t >= t_train_end:
            return {}
        items = self._items(Kind.EXPLORE, it, sum(extra.values()))
        left = len(self._sample(items, deadline=t_train_end)) * self.sc.batch_size
        n = {}
        for p, k in extra.items():  # the finished candidates, in plan order
            n[p], left = G + min(k, left), max(0, left - k)
        return {p: k for p, k in n.items() if k > G}

    def _progress(self, contrast: float, live: float) -> float:
        """What an iteration with this rollout counts for, in plain-GRPO iterations
        (LearningModel.signal)."""
        lm = self.learning
        if lm.signal == "contrast":
            return (contrast / self.baseline_contrast) ** lm.contrast_exponent
        baseline = self._baseline_live.get(self._shift)
        if baseline is None:  # once per level (once per run without follow_level)
            baseline = self.rewards.live_share(self.sc.group_size, self._shift)
            self._baseline_live[self._shift] = baseline
        return (live / max(baseline, MIN_BASELINE_LIVE)) ** lm.live_exponent

    def _rollout(
        self, it: int, batch: list[int], explored: dict[int, int], fresh: bool
    ) -> tuple[float, float]:
        """(mean group reward std, share of live groups) of this rollout (see LearningModel): a
        prompt explored with at least 2G seeds trains on the max-variance G of them, chosen on
        its stale rewards and scored by its fresh ones (``fresh``: chosen on the rewards it
        trains on: the critical path's, on the current weights, and the pipelined rollout's,
        whose candidates are the trained samples)."""
        G = self.sc.group_size
        stds, live = [], 0
        if isinstance(self.rewards, EmpiricalRewards):
            for p in batch:
                n = explored.get(p, 0)
                if n < 2 * G:
                    draws = self.rewards.draw(it, p, G)
                    self.planner.note_rollout(str(p), draws)
                    stds.append(pstdev(draws))
                else:
                    draws = self.rewards.draw(it, p, n)
                    rho = 1.0 if fresh else self.learning.rank_preservation
                    random_std = pstdev(draws[:G])
                    chosen = [draws[i] for i in max_variance_subset(draws, G)]
                    self.planner.observe(str(p), draws)
                    stds.append(random_std + rho * (pstdev(chosen) - random_std))
                    draws = chosen
                live += max(draws) > min(draws)
            return statistics.fmean(stds), live / len(batch)
        # every prompt's seeds at once: seed i's rewards do not depend on how many are drawn
        ns = [explored.get(p, 0) for p in batch]
        stale_all, now_all = self.rewards.pairs(
            [it] * len(batch), batch, max([G, *ns]), self._shift
        )
        for p, n, stale, now in zip(batch, ns, stale_all.tolist(), now_all.tolist(), strict=True):
            if n < 2 * G:
                trained = now[:G]
                self.planner.note_rollout(str(p), trained)
            else:
                seen = now[:n] if fresh else stale[:n]
                trained = [now[i] for i in max_variance_subset(seen, G)]
                self.planner.observe(str(p), seen)
            stds.append(pstdev(trained))
            live += max(trained) > min(trained)
        return statistics.fmean(stds), live / len(batch)


MIN_BASELINE_LIVE = 1e-3
"""Floor of plain GRPO's expected live share in the ``live_groups`` progress ratio (a population
whose groups are all dead gives plain GRPO nothing to learn from, and no ratio)."""
