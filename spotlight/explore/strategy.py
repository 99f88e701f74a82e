"""Seed exploration's decisions for one run, written once: how many seeds to explore, which
prompts get them, which explored seeds each iteration trains on, and what a checkpoint keeps of
it. It samples nothing: the runner samples the work items it is handed and gives the results
back (the Ray job on its sampler replicas, the local runner in its own process, one item after
the other). Both runners therefore explore the same seeds and, with a fixed budget
(``exploration.budget_seeds``), select the same ones.

The modes (``exploration.mode``):

* ``off``: every iteration samples random seeds; the strategy only counts nothing.
* ``spot``: while the trainer trains iteration ``t`` (weights ``v_t`` published), the next
  iteration's prompts are explored on ``v_t``; after the update the finished explorations select
  the seeds iteration ``t + 1`` samples on ``v_t + 1`` (:meth:`spot_explored`, :meth:`take`).
* ``critical_path``: iteration ``t`` explores its own prompts on ``v_t`` first and trains on the
  selected samples themselves (:meth:`critical_path_explored`): same weights, nothing sampled
  twice.

With ``schedule="pipelined"`` the rollout itself explores (``spot``: oversampling): iteration
``t + 1``'s rollout, sampled on ``v_t`` during update ``t``, gives the prompts the planner picks
candidates in place of their G seeds (:meth:`plan_pipelined`), and each trains on the G its
selection rule keeps, those samples themselves (:meth:`pipelined_selected`); ``off``: no
candidates, a plain one-step-stale rollout.

The budget is ``budget_seeds`` when fixed; else, for ``critical_path``, the cap; for ``spot``,
the seeds the samplers can draw in the predicted update time, both measured by the runner
(:meth:`measured`, :meth:`trained`); for a pipelined rollout, what is left of those seeds after
the rollout's own ``B x G``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from spotlight.config import Config, ExplorationConfig
from spotlight.explore.exploration import (
    Exploration,
    Selection,
    rank_preservation,
    select_groups,
)
from spotlight.explore.planner import Planner, exploration_budget
from spotlight.scheduling.work_queue import ItemResult, Kind, WorkItem


def exploration_seeds(x: ExplorationConfig, train_s: float | None, rate: float | None) -> int:
    """Seeds to explore in an iteration: ``budget_seeds`` when fixed; else, for
    ``critical_path``, the cap; for ``spot``, the seeds samplers at ``rate`` samples/s draw in
    ``budget_scale`` x the update time ``train_s`` (0 while either is unknown); never more than
    ``max_seeds_per_iteration``. The runners and the simulator size exploration with it."""
    if x.budget_seeds:
        return min(x.budget_seeds, x.max_seeds_per_iteration)
    if x.mode == "critical_path":  # best-of-N: as much as it takes
        return x.max_seeds_per_iteration
    return exploration_budget(
        x.budget_scale * (train_s or 0.0), rate or 0.0, x.max_seeds_per_iteration
    )


def pipelined_seeds(
    x: ExplorationConfig, train_s: float | None, rate: float | None, rollout: int
) -> int:
    """Candidates of a pipelined rollout (``schedule="pipelined"``): ``budget_seeds`` when
    fixed; else what is left of :func:`exploration_seeds` (the seeds the samplers draw in the
    update time ``train_s`` at the measured ``rate``) after the rollout's own ``rollout``
    samples: the time the update leaves once the rollout is sampled. A prompt given candidates
    trains on G of them in place of its own G seeds. The runners and the simulator size it
    with this.

    The size is a forecast (the update time and the rate are measured on earlier iterations,
    and spot capacity changes meanwhile); what keeps the candidates off the critical path is
    :func:`pipelined_required_items`: with a measured budget only a prompt's first G
    candidates are rollout work, the rest are optional and dropped when the update ends."""
    seeds = exploration_seeds(x, train_s, rate)
    return seeds if x.budget_seeds else max(0, seeds - rollout)


def pipelined_required_items(x: ExplorationConfig, items: int, group: int, batch_size: int) -> int:
    """How many of a prompt's ``items`` candidate work items (``batch_size`` seeds each, in
    seed order) the pipelined rollout waits for: all of them with a fixed budget
    (``budget_seeds``: explored in full, so both runners select the same seeds); else the
    ones that hold its first ``group`` seeds. The others are optional: sampled after every
    rollout item (they are exploration items, served last), and those not finished when the
    update ends are dropped; the selection takes the G of the candidates that finished.

    Why this never makes the pipeline slower than the same pipeline without candidates (the
    simulator's ``spotlight_pipelined`` against ``ablation_pipelined_no_oversampling``): the
    required items are the rollout's own P x G samples (a prompt's first G candidates stand
    in for its G random seeds), so the rollout the next iteration waits for is the same work;
    the optional ones only use sampler time the update leaves idle and end with it, so no
    iteration ends later. Each prompt's trained G is the best of a superset of its G seeds,
    so no group is deader; the same iterations at the same times reach the target no later.
    The forecast in :func:`pipelined_seeds` then only decides how much idle time is used."""
    if x.budget_seeds:
        return items
    return min(items, -(-group // batch_size))


def _ema(old: float | None, new: float, weight: float = 0.5) -> float:
    return new if old is None else weight * new + (1 - weight) * old


class ExplorationStrategy:
    """The exploration state of a run (see the module docstring)."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.mode = cfg.exploration.mode
        self.pipelined = cfg.schedule == "pipelined"
        self.planner = Planner(cfg.exploration, cfg.grpo.group_size)
        self.next_selection: Selection | None = None
        """Seeds chosen by the exploration that ran during the last update (``spot``)."""
        self.next_metrics: dict[str, Any] = {}
        self.train_s: float | None = None
        """Measured (EMA) trainer update time: the exploration budget's time."""
        self.sample_s: float | None = None
        """Before the first update is measured, the rollout's time stands in for it."""
        self.rate: float | None = None
        """Measured (EMA) sampling throughput, samples/s: the budget's rate."""

    # -- Measurements ----------------------------------------------------------------------
    def measured(self, sample_s: float, rate: float | None) -> None:
        """The rollout took ``sample_s`` at ``rate`` samples/s (None: not measurable)."""
        self.sample_s = sample_s
        if rate is not None:
            self.rate = _ema(self.rate, rate)

    def trained(self, train_s: float) -> None:
        """The trainer's update took ``train_s``."""
        self.train_s = _ema(self.train_s, train_s)

    def budget(self) -> int:
        """This iteration's exploration budget, in seeds (:func:`exploration_seeds` of the
        measured update time, the rollout's before the first update, and rate)."""
        train_s = self.train_s if self.train_s is not None else self.sample_s
        if self.pipelined:  # the update's time samples the rollout too
            rollout = self.cfg.num_prompts_per_iteration * self.cfg.grpo.group_size
            return pipelined_seeds(self.cfg.exploration, train_s, self.rate, rollout)
        return exploration_seeds(self.cfg.exploration, train_s, self.rate)

    # -- Planning and selection ------------------------------------------------------------
    def plan(
        self, iteration: int, version: int, prompts: Sequence[str], init: Sequence[int] | None
    ) -> Exploration:
        """The exploration of iteration ``iteration``'s ``prompts`` (one per group, with the
        initial-noise seed each group shares, or None) on weights ``version``."""
        budget = self.budget()
        plan = self.planner.plan(prompts, budget)
        return Exploration(
            iteration,
            version,
            list(prompts),
            plan,
            budget=budget,
            init_seeds=list(init) if init is not None else None,
        )

    def explores_next(self, iteration: int) -> bool:
        """Whether iteration ``iteration``'s update time explores the next one's prompts."""
        return (
            self.mode == "spot" and not self.pipelined and iteration + 1 < self.cfg.num_iterations
        )

    def waits_for_all(self) -> bool:
        """A fixed budget is explored in full; a measured one takes what finished in time."""
        return bool(self.cfg.exploration.budget_seeds)

    def _select(
        self,
        exp: Exploration,
        results: Mapping[str, ItemResult],
        fresh_version: int,
        keep_trajectories: bool,
        required: Mapping[str, int] | None = None,
    ) -> Selection:
        """The kept seeds of what ``exp`` explored; the planner learns from every explored
        prompt."""
        x = self.cfg.exploration
        sel = select_groups(
            exp,
            dict(results),
            self.cfg.grpo.group_size,
            fresh_version,
            x.max_staleness,
            keep_trajectories,
            x.selection,
            required,
        )
        for prompt, rewards in sel.explored.items():
            self.planner.observe(prompt, rewards)
        return sel

    def spot_explored(
        self, exp: Exploration, results: Mapping[str, ItemResult], fresh_version: int
    ) -> None:
        """What finished of the spot exploration ``exp`` (unfinished items left out) selects
        the seeds of the next iteration, trained on weights ``fresh_version``."""
        sel = self._select(exp, results, fresh_version, keep_trajectories=False)
        self.next_selection = sel
        self.next_metrics = {
            **sel.metrics(),
            "explore_budget_predicted": exp.budget,
            "explore_budget_used": sel.seeds_explored,
            "explore_weights_version": exp.weights_version,
        }

    def critical_path_explored(
        self, exp: Exploration, results: Mapping[str, ItemResult]
    ) -> tuple[Selection, dict[str, Any]]:
        """The critical path's selection (its trajectories kept: the rollout reuses them) and
        the metrics it adds to the iteration's row."""
        sel = self._select(exp, results, exp.weights_version, keep_trajectories=True)
        return sel, {
            **sel.metrics(),
            "explore_budget_predicted": exp.budget,
            "explore_budget_used": sel.seeds_explored,
        }

    def plan_pipelined(
        self, iteration: int, version: int, prompts: Sequence[str], init: Sequence[int] | None
    ) -> Exploration:
        """The candidates of a pipelined rollout of iteration ``iteration`` on weights
        ``version`` (:meth:`plan` with ``spot``; none with ``off``)."""
        if self.mode == "spot":
            return self.plan(iteration, version, prompts, init)
        return Exploration(
            iteration, version, list(prompts), {}, init_seeds=list(init) if init else None
        )

    def pipelined_items(self, exp: Exploration) -> tuple[list[WorkItem], list[WorkItem]]:
        """The work items of a pipelined rollout's candidates ``exp``: those the rollout waits
        for (rollout items) and the optional ones (exploration items, dropped when the update
        ends): :func:`pipelined_required_items`."""
        cfg = self.cfg
        items = exp.work_items(cfg.seed, cfg.sampler.batch_size, Kind.ROLLOUT)
        need = self._required(exp)
        required, optional = [], []
        for item in items:
            ids = exp.items[item.prompts[0]]
            if ids.index(item.item_id) < need[item.prompts[0]]:
                required.append(item)
            else:
                optional.append(dataclasses.replace(item, kind=Kind.EXPLORE))
        return required, optional

    def _required(self, exp: Exploration) -> dict[str, int]:
        g, b = self.cfg.grpo.group_size, self.cfg.sampler.batch_size
        x = self.cfg.exploration
        return {p: pipelined_required_items(x, len(ids), g, b) for p, ids in exp.items.items()}

    def pipelined_selected(
        self, exp: Exploration, results: Mapping[str, ItemResult]
    ) -> tuple[Selection | None, dict[str, Any]]:
        """The selection of a pipelined rollout's candidates (the required ones finished: the
        rollout waits for them; the optional ones that finished before the update ended),
        their trajectories kept, and the metrics it adds to the row; None without
        candidates."""
        if not exp.items:
            return None, {}
        sel = self._select(
            exp, results, exp.weights_version, keep_trajectories=True, required=self._required(exp)
        )
        return sel, {
            **sel.metrics(),
            "explore_budget_predicted": exp.budget,
            "explore_budget_used": sel.seeds_explored,
        }

    def take(self) -> tuple[Selection | None, dict[str, Any]]:
        """The spot selection for this iteration (None: random seeds) and its metrics; it is
        used once."""
        sel, extra = None, {}
        if self.mode == "spot" and self.next_selection is not None:
            sel, extra = self.next_selection, dict(self.next_metrics)
        self.next_selection, self.next_metrics = None, {}
        return sel, extra

    def rollout_scored(
        self,
        per_prompt: Sequence[tuple[str, Sequence[float]]],
        selection: Selection | None,
        extra: dict[str, Any],
    ) -> list[list[float] | None] | None:
        """The rollout's rewards, per prompt in batch order: the planner learns from them, a
        spot selection's stale/fresh rank agreement goes into ``extra``. Returns, per group,
        the candidates' rewards its advantages are normalized by (``pool_advantages``), or
        None."""
        for prompt, rewards in per_prompt:
            self.planner.note_rollout(prompt, rewards)
        if self.mode == "spot" and selection is not None and not self.pipelined:
            fresh = {p: list(r) for p, r in per_prompt}
            extra["rank_spearman_stale_fresh"] = rank_preservation(
                {p: selection.selected_rewards[p] for p in selection.seeds}, fresh
            )
        if self.cfg.exploration.pool_advantages and selection is not None:
            return [selection.explored.get(p) for p, _ in per_prompt]
        return None

    # -- What a checkpoint keeps -----------------------------------------------------------
    def state(self) -> dict[str, Any] | None:
        """The next iteration's explored seeds: a resumed run rolls out the same ones."""
        sel = self.next_selection
        if sel is None:
            return None
        return {
            "seeds": sel.seeds,
            "explored": sel.explored,
            "selected_rewards": sel.selected_rewards,
            "fallback_prompts": sel.fallback_prompts,
            "seeds_explored": sel.seeds_explored,
            "metrics": self.next_metrics,
        }

    def load_state(self, state: dict[str, Any] | None) -> None:
        """Back to :meth:`state`'s (None: nothing explored for the next iteration)."""
        if not state:
            self.next_selection, self.next_metrics = None, {}
            return
        self.next_selection = Selection(
            state["seeds"],
            state["explored"],
            state["selected_rewards"],
            state["fallback_prompts"],
            state["seeds_explored"],
        )
        self.next_metrics = state["metrics"]
