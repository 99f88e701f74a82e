"""Seed selection: from N explored seeds of a prompt, the G whose rewards vary most.

For a fixed group size G, the subset of a list of numbers with maximal (population) variance
consists of some k smallest and the G - k largest values (variance is convex in each member,
so an optimal subset never holds a value strictly between two values it leaves out). A scan over
k = 0..G of the sorted list therefore finds the optimum exactly in O(N log N + G^2).

Ties are broken deterministically: rewards sort by (reward, position in the input), and among
subsets of equal variance the smallest k wins.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np


def max_variance_subset(rewards: Sequence[float], group: int) -> list[int]:
    """Indices (ascending) of the ``group`` rewards with maximal population variance."""
    return list(_max_variance_subset(tuple(rewards), group))


@functools.lru_cache(maxsize=4096)
def _max_variance_subset(rewards: tuple[float, ...], group: int) -> tuple[int, ...]:
    """:func:`max_variance_subset`, remembered: a function of the values alone (equal values
    convert to the same floats), and discrete rewards repeat (OCR-mini: 4 levels, mostly 0)."""
    n = len(rewards)
    if group < 1 or group > n:
        raise ValueError(f"need 1 <= group <= number of rewards, got group {group} of {n}")
    r = np.asarray(rewards, dtype=np.float64)
    if not np.all(np.isfinite(r)):
        raise ValueError("rewards must be finite")
    if group == n:  # every subset scanned is all of them
        return tuple(range(n))
    order = np.lexsort((np.arange(n), r))  # by reward, then input position
    if group > _ROWS_MAX_GROUP:
        return tuple(_max_variance_subset_loop(r, order, group))
    # row k: the k smallest, then the group - k largest, in sorted order (as the loop below
    # takes them); each row's variance is computed as ndarray.var computes it (a mean, the
    # squared deviations, their mean: the same ufuncs in the same order), which is bit for
    # bit the variance of the row on its own
    rows = r[order[_positions(n, group)]]
    dev = rows - np.add.reduce(rows, axis=1, keepdims=True) / group
    np.multiply(dev, dev, out=dev)
    variances = (np.add.reduce(dev, axis=1) / group).tolist()
    best_k, best_var = 0, -1.0
    for k, var in enumerate(variances):
        if var > best_var + 1e-15:
            best_k, best_var = k, var
    return tuple(sorted(order[_positions(n, group)[best_k]].tolist()))


@functools.lru_cache(maxsize=256)
def _positions(n: int, group: int) -> np.ndarray:
    """(group + 1, group): row k holds sorted positions 0..k-1, then n - (group - k)..n-1."""
    cols = np.arange(group)
    pos = cols[None, :] + (cols[None, :] >= np.arange(group + 1)[:, None]) * (n - group)
    pos.setflags(write=False)
    return pos


_ROWS_MAX_GROUP = 256
"""Largest group whose candidate subsets are scored in one array (checked bit for bit against
the loop in tests/unit/test_seeds.py); larger ones take the loop."""


def _max_variance_subset_loop(r: np.ndarray, order: np.ndarray, group: int) -> list[int]:
    n = len(r)
    best_k, best_var = 0, -1.0
    for k in range(group + 1):
        idx = np.concatenate([order[:k], order[n - (group - k) :]])
        var = float(r[idx].var())
        if var > best_var + 1e-15:
            best_k, best_var = k, var
    chosen = np.concatenate([order[:best_k], order[n - (group - best_k) :]])
    return sorted(int(i) for i in chosen)


def rescue_subset(rewards: Sequence[float], group: int) -> list[int]:
    """The first ``group`` of ``rewards`` (random seeds: candidates are drawn at random) unless
    their rewards are all equal (a dead group, no gradient): then the max-variance subset.

    Rescues dead groups and leaves live ones as plain GRPO would have drawn them, so a live
    group keeps its unbiased spread of samples."""
    if group < 1 or group > len(rewards):
        n = len(rewards)
        raise ValueError(f"need 1 <= group <= number of rewards, got group {group} of {n}")
    head = np.asarray(rewards[:group], dtype=np.float64)
    if np.all(head == head[0]):
        return max_variance_subset(rewards, group)
    return list(range(group))


SELECTIONS = {"max_variance": max_variance_subset, "rescue": rescue_subset}
"""Selection rules by name (``ExplorationConfig.selection``): indices of the kept seeds."""


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman rank correlation (average ranks for ties); NaN when either side is constant."""
    if len(a) != len(b) or len(a) < 2:
        raise ValueError(f"need two sequences of the same length >= 2, got {len(a)} and {len(b)}")
    ra, rb = _ranks(np.asarray(a, float)), _ranks(np.asarray(b, float))
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: np.ndarray) -> np.ndarray:
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    for v in np.unique(x):  # average ranks of ties
        tie = x == v
        if tie.sum() > 1:
            ranks[tie] = ranks[tie].mean()
    return ranks
