"""Dead groups: how often a group of G samples of one prompt has no reward variance at all.

With group-normalized advantages a group whose G rewards are all equal (a *dead* group) gives
no gradient. From N >= G candidate rewards of a prompt (N seeds sampled with one set of weights)
these functions say what a group of G would be under each way of choosing it:

* a uniformly random G-subset (plain GRPO's G random seeds) is dead with probability
  ``sum_v C(n_v, G) / C(N, G)`` over the distinct reward values ``v`` held by ``n_v`` of the N;
* the max-variance subset (``seeds.max_variance_subset``) is dead only when all N are equal;
* ``rescue`` (``seeds.rescue_subset``) keeps the first G (random) unless they are dead, so it is
  dead exactly when the max-variance subset is.

``benchmarks/dead_groups.py`` applies them to sampled checkpoints; no Ray, no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import comb

import numpy as np

from spotlight.explore.seeds import max_variance_subset

STD_DRAWS = 256
"""Random G-subsets drawn per prompt to estimate a random group's expected std."""


def dead_probability_random(rewards: Sequence[float], group: int) -> float:
    """Probability that a uniformly random ``group``-subset of ``rewards`` is all equal."""
    n = len(rewards)
    if not 1 <= group <= n:
        raise ValueError(f"need 1 <= group <= number of rewards, got group {group} of {n}")
    _, counts = np.unique(np.asarray(rewards, np.float64), return_counts=True)
    return sum(comb(int(c), group) for c in counts) / comb(n, group)


def is_dead(rewards: Sequence[float]) -> bool:
    """True when every reward equals the first (no variance, no gradient)."""
    r = np.asarray(rewards, np.float64)
    return bool(np.all(r == r[0]))


def expected_std_random(rewards: Sequence[float], group: int, rng: np.random.Generator) -> float:
    """Mean population std of ``STD_DRAWS`` uniformly random ``group``-subsets of ``rewards``."""
    r = np.asarray(rewards, np.float64)
    picks = np.argsort(rng.random((STD_DRAWS, len(r))), axis=1)[:, :group]
    return float(r[picks].std(axis=1).mean())


def selected_std(rewards: Sequence[float], group: int) -> float:
    """Population std of the max-variance ``group``-subset of ``rewards``."""
    r = np.asarray(rewards, np.float64)
    return float(r[max_variance_subset(r.tolist(), group)].std())


def group_statistics(
    per_prompt: Sequence[Sequence[float]], group: int, seed: int = 0
) -> dict[str, float]:
    """Over prompts (each with N >= ``group`` candidate rewards): the mean reward, the expected
    share of dead groups under random and max-variance selection, and the mean std of a random
    and of the selected group."""
    if not per_prompt:
        raise ValueError("group_statistics: no prompts")
    rng = np.random.default_rng(seed)
    return {
        "mean": float(np.mean([np.mean(r) for r in per_prompt])),
        "dead_share_random": float(
            np.mean([dead_probability_random(r, group) for r in per_prompt])
        ),
        "dead_share_max_variance": float(np.mean([is_dead(r) for r in per_prompt])),
        "std_random": float(np.mean([expected_std_random(r, group, rng) for r in per_prompt])),
        "std_selected": float(np.mean([selected_std(r, group) for r in per_prompt])),
    }


def rescued_dead_share(
    judged: Sequence[Sequence[float]], chosen_by: Sequence[Sequence[float]], group: int
) -> float | None:
    """Of the groups that random selection leaves dead on the ``judged`` rewards, the share that
    max-variance selection on the ``chosen_by`` rewards of the same seeds makes live:
    ``sum_p P(random G dead on judged_p) * live(judged_p[max-variance G of chosen_by_p]) / sum_p
    P(random G dead on judged_p)``. With ``chosen_by = judged`` it is the share any selection
    could rescue (a prompt whose N rewards are all equal stays dead). None when no random group
    would be dead."""
    if len(judged) != len(chosen_by):
        raise ValueError("judged and chosen_by need the same prompts")
    dead = np.array([dead_probability_random(j, group) for j in judged])
    if dead.sum() == 0:
        return None
    live = np.array(
        [
            not is_dead(np.asarray(j, np.float64)[max_variance_subset(list(c), group)])
            for j, c in zip(judged, chosen_by, strict=True)
        ]
    )
    return float((dead * live).sum() / dead.sum())
