"""Seed exploration bookkeeping, without Ray: candidate seeds, exploration items, selection.

The controller (job/controller.py) drives it: it plans with :class:`spotlight.explore.planner.
Planner`, submits :func:`explore_items`, and turns what finished into the next rollout's seeds
with :func:`select_groups`. Every explored sample carries its weights version; results older
than ``max_staleness`` versions are not used.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from spotlight.explore.seeds import SELECTIONS, spearman
from spotlight.flow.streams import EXPLORE_STREAM, SEED_SPACE, iteration_rng
from spotlight.scheduling.work_queue import ItemResult, Kind, WorkItem


def candidate_seeds(seed: int, iteration: int, prompt_index: int, n: int) -> list[int]:
    """The first ``n`` candidate seeds of prompt ``prompt_index`` of ``iteration``."""
    rng = iteration_rng(seed, iteration, EXPLORE_STREAM, prompt_index)
    return rng.integers(0, SEED_SPACE, size=n).tolist()


@dataclass
class Exploration:
    """The exploration of one iteration's prompts."""

    iteration: int
    weights_version: int
    prompts: list[str]
    plan: dict[str, int]
    """Seeds to explore per prompt."""
    seeds: dict[str, list[int]] = field(default_factory=dict)
    items: dict[str, list[str]] = field(default_factory=dict)
    """Item ids per prompt."""
    budget: int = 0
    init_seeds: list[int] | None = None
    """Per prompt, the initial-noise seed its group shares in the iteration
    (``sampler.group_init_noise``): every candidate starts from that noise, as the group will."""

    def work_items(
        self, cfg_seed: int, batch_size: int, kind: str = Kind.EXPLORE
    ) -> list[WorkItem]:
        """The candidates' work items (``kind``: a pipelined rollout's are rollout items)."""
        out = []
        for k, prompt in enumerate(self.prompts):
            n = self.plan.get(prompt, 0)
            if n == 0:
                continue
            seeds = candidate_seeds(cfg_seed, self.iteration, k, n)
            self.seeds[prompt] = seeds
            self.items[prompt] = []
            for j, lo in enumerate(range(0, n, batch_size)):
                item_id = f"e{self.iteration}-v{self.weights_version}-p{k}-{j}"
                part = seeds[lo : lo + batch_size]
                out.append(
                    WorkItem(
                        item_id,
                        kind,
                        self.iteration,
                        self.weights_version,
                        (prompt,) * len(part),
                        tuple(part),
                        init_seeds=(self.init_seeds[k],) * len(part) if self.init_seeds else None,
                    )
                )
                self.items[prompt].append(item_id)
        return out

    def all_item_ids(self) -> list[str]:
        return [i for ids in self.items.values() for i in ids]

    def to_state(self) -> dict:
        """What a checkpoint keeps of a planned exploration (its seeds and item ids follow
        from it: :meth:`work_items`)."""
        return {
            "iteration": self.iteration,
            "weights_version": self.weights_version,
            "prompts": self.prompts,
            "plan": self.plan,
            "budget": self.budget,
            "init_seeds": self.init_seeds,
        }

    @staticmethod
    def from_state(state: dict) -> Exploration:
        """:meth:`to_state` back (call :meth:`work_items` for its seeds and items)."""
        return Exploration(
            state["iteration"],
            state["weights_version"],
            list(state["prompts"]),
            dict(state["plan"]),
            budget=state["budget"],
            init_seeds=state["init_seeds"],
        )


@dataclass
class Selection:
    """The next rollout's seeds per prompt, and what exploration achieved."""

    seeds: dict[str, list[int]]
    """Selected seeds of the prompts whose exploration finished."""
    explored: dict[str, list[float]]
    """Explored rewards (in seed order) of those prompts."""
    selected_rewards: dict[str, list[float]]
    """Stale rewards of the selected seeds, in selection order."""
    fallback_prompts: int
    """Planned prompts whose exploration did not finish (random seeds instead)."""
    seeds_explored: int
    """Samples of finished exploration items (used or not)."""
    trajectories: dict[str, list[bytes]] = field(default_factory=dict)
    """Selected trajectories (critical-path mode reuses them: same weights)."""

    def metrics(self) -> dict[str, float]:
        sel = [float(np.std(r)) for r in self.selected_rewards.values()]
        rand = [
            float(np.std(r[: len(s)]))
            for r, s in zip(self.explored.values(), self.selected_rewards.values(), strict=True)
        ]
        return {
            "explore_prompts": len(self.seeds),
            "explore_fallback_prompts": self.fallback_prompts,
            "seeds_explored": self.seeds_explored,
            "explored_selected_group_std": float(np.mean(sel)) if sel else float("nan"),
            "explored_random_group_std": float(np.mean(rand)) if rand else float("nan"),
        }


def select_groups(
    exp: Exploration,
    results: dict[str, ItemResult],
    group: int,
    fresh_version: int,
    max_staleness: int,
    keep_trajectories: bool = False,
    rule: str = "max_variance",
    required: Mapping[str, int] | None = None,
) -> Selection:
    """Per prompt whose exploration items all finished (and are fresh enough), the ``group``
    seeds the selection ``rule`` keeps (``SELECTIONS``: by default those with maximal reward
    variance); the others fall back to random seeds. ``required`` (a pipelined rollout's
    optional candidates): per prompt, how many of its first items must finish; it is
    selected from its leading finished items."""
    choose = SELECTIONS[rule]
    seeds, explored, chosen_rewards, trajs = {}, {}, {}, {}
    fallback = 0
    done_samples = sum(len(r.rewards) for r in results.values())
    stale = fresh_version - exp.weights_version > max_staleness
    for prompt, all_ids in exp.items.items():
        ids = _leading_finished(all_ids, results)
        need = len(all_ids) if required is None else required[prompt]
        if stale or len(ids) < need:
            fallback += 1
            continue
        rewards = [r for i in ids for r in results[i].rewards]
        pick = choose(rewards, group)
        seeds[prompt] = [exp.seeds[prompt][i] for i in pick]
        explored[prompt] = rewards
        chosen_rewards[prompt] = [rewards[i] for i in pick]
        if keep_trajectories:
            all_trajs = [t for i in ids for t in results[i].trajectories]
            trajs[prompt] = [all_trajs[i] for i in pick]
    return Selection(seeds, explored, chosen_rewards, fallback, done_samples, trajs)


def _leading_finished(ids: list[str], results: Mapping[str, ItemResult]) -> list[str]:
    """The items of ``ids`` before the first one without a result."""
    out = []
    for i in ids:
        if i not in results:
            break
        out.append(i)
    return out


def rank_preservation(stale: dict[str, list[float]], fresh: dict[str, list[float]]) -> float:
    """Mean over prompts of the Spearman correlation between the rewards of the same seeds
    under the stale (explored) and fresh (rollout) weights; NaN when no prompt has variation
    on both sides."""
    values = []
    for prompt, a in stale.items():
        b = fresh.get(prompt)
        if b is not None and len(a) == len(b) >= 2:
            rho = spearman(a, b)
            if not math.isnan(rho):
                values.append(rho)
    return float(np.mean(values)) if values else float("nan")
