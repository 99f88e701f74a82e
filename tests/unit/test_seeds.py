"""Max-variance seed selection against brute force; Spearman against a hand computation."""

import itertools

import numpy as np
import pytest

from spotlight.explore.seeds import max_variance_subset, spearman


@pytest.mark.parametrize("trial", range(300))
def test_matches_brute_force_on_random_inputs(trial):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(2, 10))
    g = int(rng.integers(1, n + 1))
    # OCR-like rewards: many ties (0, 1, a few fractions) half of the time.
    if trial % 2:
        rewards = rng.choice([0.0, 0.25, 0.5, 1.0], size=n).tolist()
    else:
        rewards = rng.random(n).tolist()
    chosen = max_variance_subset(rewards, g)
    assert len(chosen) == g == len(set(chosen))
    best = max(np.var([rewards[i] for i in c]) for c in itertools.combinations(range(n), g))
    assert np.var([rewards[i] for i in chosen]) == pytest.approx(best, abs=1e-12)
    assert max_variance_subset(rewards, g) == chosen  # deterministic


def test_ties_break_towards_earlier_seeds_and_fewer_lows():
    assert max_variance_subset([0.5, 0.5, 0.5, 0.5], 2) == [2, 3]  # k = 0: the two "largest"
    assert max_variance_subset([0, 1, 0, 1], 2) == [0, 3]
    assert max_variance_subset([0.1, 0.9, 0.5, 0.2], 4) == [0, 1, 2, 3]


def test_bad_input():
    with pytest.raises(ValueError, match="group"):
        max_variance_subset([1.0], 2)
    with pytest.raises(ValueError, match="finite"):
        max_variance_subset([1.0, float("nan")], 1)


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # With ties: ranks (1.5, 1.5, 3) vs (1, 2, 3) -> Pearson of the ranks.
    assert spearman([0, 0, 1], [1, 2, 3]) == pytest.approx(
        np.corrcoef([1.5, 1.5, 3], [1, 2, 3])[0, 1]
    )
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError):
        spearman([1], [1])


def _reference_subset(rewards, group):
    """The selection as first written (one variance per k): the fast one must match it."""
    r = np.asarray(rewards, dtype=np.float64)
    n = len(r)
    order = np.lexsort((np.arange(n), r))
    best_k, best_var = 0, -1.0
    for k in range(group + 1):
        var = float(r[np.concatenate([order[:k], order[n - (group - k) :]])].var())
        if var > best_var + 1e-15:
            best_k, best_var = k, var
    return sorted(int(i) for i in np.concatenate([order[:best_k], order[n - (group - best_k) :]]))


@pytest.mark.parametrize("trial", range(60))
def test_same_subsets_as_the_one_variance_per_k_scan(trial):
    rng = np.random.default_rng(1000 + trial)
    for _ in range(40):
        g = int(rng.choice([1, 2, 3, 7, 8, 9, 16, 17, 32, 127, 129, 256, 300]))
        n = g + int(rng.integers(0, 2 * g + 2))
        kind = int(rng.integers(0, 3))
        if kind == 0:  # OCR-like: a 3-letter grid, many ties and equal-variance subsets
            rewards = (rng.integers(0, 4, n) / 3).tolist()
        elif kind == 1:
            rewards = rng.choice([0.0, 1.0], size=n).tolist()
        else:
            rewards = (rng.normal(size=n) * 10.0 ** rng.integers(-6, 6)).tolist()
        assert max_variance_subset(rewards, g) == _reference_subset(rewards, g)
