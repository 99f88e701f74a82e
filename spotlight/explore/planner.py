"""The exploration planner: how many candidate seeds to explore for which prompts.

**Objective.** While the trainer computes theta_{t+1}, spot replicas can sample a budget of
``B`` candidate seeds with theta_t (``B`` = predicted training time x measured sampling
throughput, both measured online by the caller). For each prompt of the next iteration we then
keep the G seeds whose rewards vary most (:func:`spotlight.explore.seeds.max_variance_subset`). The
planner splits ``B`` among the prompts to maximize the expected sum over prompts of the reward
std of the selected group (a larger group std means larger advantages and no dead groups).

**Arms.** Seeds are explored in chunks of G. Exploring ``L`` chunks for a prompt (``L * G``
candidates) is worth nothing for ``L = 1`` (the G seeds would be used anyway) and then adds a
diminishing gain per extra chunk. An arm is ``(bucket, L)``: the expected gain in selected-group
std from the ``L``-th chunk (``L >= 2``) for a prompt of bucket ``bucket``: the std of all
rewards the prompt has had so far (exploration and rollouts), in ``num_buckets`` equal bins of
[0, 0.5] (the largest std of rewards in [0, 1]), plus one bucket for prompts never seen. A
prompt that always scores 0 (or always 1) lands in bucket 0, where exploring gains nothing; one
whose seeds disagree lands higher. (Bucketing by mean reward cannot tell "never right" from
"right for one seed in twenty".)

**Update rule.** Every exploration tells what each of its chunks added, counterfactually: for a
prompt explored with ``L`` chunks, the gain of chunk ``l`` is ``std(best G of the first l*G
seeds) - std(best G of the first (l-1)*G seeds)`` (the first G seeds are random, so chunk 1
is the no-exploration baseline). Each gain updates its arm's running mean. With
``planner_gain="live"`` the gain is instead 1 when chunk ``l`` turns the best group from dead
(all rewards equal: no gradient under group-normalized advantages) to live, else 0: the arm's
mean is then the chance that the chunk rescues a dead group, which is what the exact-reward
bench found to move learning (docs/benchmarks.md), where a higher std of a group already live
did not.

**Allocation (UCB).** Arm score = mean gain + ``ucb_c * sqrt(ln(1 + n_total) / (1 + n_arm))``;
an arm never observed scores ``prior_gain`` plus its bonus (optimism). Greedily, the next chunk
goes to the prompt whose next chunk has the highest score per seed (its first allocation costs
two chunks: baseline + first useful chunk), until the budget or ``max_candidates`` per prompt
is reached. ``uniform=True`` is the ablation: the same budget spread evenly over the prompts.

Its knobs are the ``ExplorationConfig`` fields of the run's config. Pure logic; its state is a
JSON-able dict kept in the ``BanditState`` actor between iterations
and driver restarts.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spotlight.config import ExplorationConfig
from spotlight.explore.seeds import max_variance_subset


@dataclass
class Planner:
    """Bandit statistics and the allocation rule (see the module docstring)."""

    cfg: ExplorationConfig
    """Its knobs: max_candidates, num_buckets, ucb_c, prior_gain, uniform."""
    group: int
    arms: dict[str, list[float]] = field(default_factory=dict)
    """'bucket,L' -> [count, mean gain]."""
    prompt_stats: dict[str, list[float]] = field(default_factory=dict)
    """Per prompt: [count, mean, sum of squared deviations] of all rewards seen (Welford)."""

    def __post_init__(self) -> None:
        self.cfg.validate(self.group)

    # -- Allocation ----------------------------------------------------------------------
    def bucket(self, prompt: str) -> int:
        stats = self.prompt_stats.get(prompt)
        if stats is None:
            return self.cfg.num_buckets
        n, _, m2 = stats
        std = math.sqrt(m2 / n) if n else 0.0
        return min(self.cfg.num_buckets - 1, int(std / 0.5 * self.cfg.num_buckets))

    def score(self, bucket: int, level: int) -> float:
        """UCB score of the gain of the ``level``-th chunk (level >= 2) for ``bucket``."""
        total = sum(c for c, _ in self.arms.values())
        count, mean = self.arms.get(f"{bucket},{level}", (0, self.cfg.prior_gain))
        return mean + self.cfg.ucb_c * math.sqrt(math.log(1 + total) / (1 + count))

    def plan(self, prompts: Sequence[str], budget: int) -> dict[str, int]:
        """Seeds to explore per prompt (0 or a multiple of the group size, >= 2 groups)."""
        g = self.group
        max_chunks = self.cfg.max_candidates // g
        chunks = dict.fromkeys(prompts, 0)
        left = max(0, int(budget)) // g
        if self.cfg.uniform:
            per = min(max_chunks, left // max(1, len(chunks)))
            if per >= 2:
                return {p: per * g for p in chunks}
            for p in chunks:  # too little for everyone: two chunks each, in order
                if left >= 2:
                    chunks[p], left = 2, left - 2
            return {p: c * g for p, c in chunks.items()}
        buckets = {p: self.bucket(p) for p in chunks}
        while left > 0:
            best, best_value = None, 0.0
            for p, c in chunks.items():
                if c >= max_chunks:
                    continue
                cost = 2 if c == 0 else 1
                if cost > left:
                    continue
                value = self.score(buckets[p], max(2, c + 1)) / cost
                if best is None or value > best_value + 1e-12:
                    best, best_value = p, value
            if best is None:
                break
            cost = 2 if chunks[best] == 0 else 1
            chunks[best] += cost
            left -= cost
        return {p: c * g for p, c in chunks.items()}

    # -- Learning ------------------------------------------------------------------------
    def chunk_gains(self, rewards: Sequence[float]) -> list[float]:
        """What each chunk after the first added to the selected group: its std, or its being
        live (``planner_gain``; see the module docstring)."""
        g = self.group
        values = []
        for n in range(g, len(rewards) + 1, g):
            head = list(rewards[:n])
            if self.cfg.planner_gain == "live":  # the best group is live iff the head is
                values.append(float(max(head) > min(head)))
            else:
                values.append(float(np.std([head[i] for i in max_variance_subset(head, g)])))
        return [b - a for a, b in itertools.pairwise(values)]

    def observe(self, prompt: str, rewards: Sequence[float]) -> list[float]:
        """Learn from one prompt's explored rewards (in exploration order); returns the gains."""
        bucket = self.bucket(prompt)
        gains = self.chunk_gains(rewards)
        for level, gain in enumerate(gains, start=2):
            key = f"{bucket},{level}"
            count, mean = self.arms.get(key, (0, 0.0))
            count += 1
            self.arms[key] = [count, mean + (gain - mean) / count]
        self.note_rollout(prompt, rewards)
        return gains

    def note_rollout(self, prompt: str, rewards: Sequence[float]) -> None:
        """Add rewards a prompt had (rollout or exploration) to its statistics."""
        n, mean, m2 = self.prompt_stats.get(prompt, (0, 0.0, 0.0))
        for r in rewards:
            n += 1
            delta = float(r) - mean
            mean += delta / n
            m2 += delta * (float(r) - mean)
        self.prompt_stats[prompt] = [n, mean, m2]

    # -- State ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"arms": self.arms, "prompt_stats": self.prompt_stats}

    def load(self, state: dict[str, Any] | None) -> None:
        if state:
            self.arms = {k: list(v) for k, v in state.get("arms", {}).items()}
            self.prompt_stats = {k: list(v) for k, v in state.get("prompt_stats", {}).items()}


def exploration_budget(train_s: float, samples_per_s: float, cap: int) -> int:
    """Seeds the spot replicas can explore while the trainer trains (both measured online)."""
    if train_s <= 0 or samples_per_s <= 0:
        return 0
    return max(0, min(int(cap), int(train_s * samples_per_s)))
