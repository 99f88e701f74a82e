"""The exploration bench's paired statistics: AUC, censoring, the bootstrap and the chosen arm."""

import math

import numpy as np
import pytest

from spotlight import bench_stats as bs


def test_val_auc_is_the_trapezoid_mean_over_the_run():
    # 0.0 at 0, 0.2 at 2, 0.2 at 4: trapezoids 0.2 + 0.4 over 4 iterations
    assert bs.val_auc([(0, 0.0, 0.0), (2, 9.0, 0.2), (4, 18.0, 0.2)]) == pytest.approx(0.15)
    # uneven spacing weighs each validation by the iterations it spans
    assert bs.val_auc([(0, 0, 0.1), (1, 0, 0.1), (4, 0, 0.4)]) == pytest.approx(
        (0.1 + 3 * 0.25) / 4
    )
    with pytest.raises(ValueError):
        bs.val_auc([(0, 0.0, 0.1)])


def test_a_run_that_missed_the_target_counts_at_its_last_validation():
    assert bs.censored_iterations({"iterations_to_target": 12, "val_curve": [(0, 0, 0)]}) == 12
    run = {"iterations_to_target": None, "val_curve": [(0, 0, 0.0), (15, 0, 0.1), (30, 0, 0.1)]}
    assert bs.censored_iterations(run) == 30


def test_binomial_se():
    assert bs.binomial_se(0.5, 100) == pytest.approx(0.05)
    assert bs.binomial_se(0.0, 512) == 0.0


def test_the_paired_interval_holds_the_seeds_own_statistic_and_is_reproducible():
    a, b = [0.12, 0.10, 0.15, 0.11], [0.10, 0.09, 0.11, 0.10]
    one = bs.paired_interval(a, b, bs.mean_difference)
    assert one == bs.paired_interval(a, b, bs.mean_difference)
    assert one["mean"] == pytest.approx(np.mean(np.subtract(a, b)))
    assert 0 < one["lo90"] <= one["mean"] <= one["hi90"]
    # every difference is between 0.01 and 0.04: so is every resample's mean
    assert one["lo90"] >= 0.01 - 1e-12 and one["hi90"] <= 0.04 + 1e-12


def test_pairing_removes_the_spread_between_seeds():
    # seeds differ a lot, the arm is ahead by exactly 0.01 on each: the paired interval is a point
    base = [0.05, 0.20, 0.10, 0.30, 0.15, 0.25, 0.02, 0.12]
    arm = [x + 0.01 for x in base]
    iv = bs.paired_interval(arm, base, bs.mean_difference)
    assert iv["lo90"] == pytest.approx(0.01) and iv["hi90"] == pytest.approx(0.01)


def test_the_ratio_of_means_is_above_one_when_the_arm_needs_fewer_iterations():
    iv = bs.paired_interval([10, 12, 14], [20, 24, 28], bs.ratio_of_means)
    assert iv["mean"] == pytest.approx(2.0)
    assert iv["lo90"] == pytest.approx(2.0) and iv["hi90"] == pytest.approx(2.0)
    with pytest.raises(ValueError):
        bs.paired_interval([1, 2], [1], bs.ratio_of_means)


def _modes(diffs: dict[str, list[float]], its: dict[str, list[int]] | None = None):
    base_auc = [0.05 + 0.01 * s for s in range(len(next(iter(diffs.values()))))]
    modes = {"off": {"runs": []}}
    for s, auc in enumerate(base_auc):
        modes["off"]["runs"].append(
            {"seed": s, "val_auc": auc, "iterations_to_target_censored": 30}
        )
    for mode, d in diffs.items():
        modes[mode] = {
            "runs": [
                {
                    "seed": s,
                    "val_auc": base_auc[s] + x,
                    "iterations_to_target_censored": (its or {}).get(mode, [30] * len(d))[s],
                }
                for s, x in enumerate(d)
            ]
        }
    return modes


def test_paired_report_pairs_by_seed_and_counts_where_the_arm_was_ahead():
    modes = _modes({"rescue": [0.01, 0.02, -0.01]}, {"rescue": [20, 30, 30]})
    modes["rescue"]["runs"].reverse()  # order does not matter: seeds pair
    del modes["off"]["runs"][2]  # a seed off has not run yet is left out of the pairs
    p = bs.paired_report(modes)["rescue"]
    assert p["paired_seeds"] == [0, 1]
    assert p["val_auc_diff_vs_off"]["mean"] == pytest.approx(0.015)
    assert p["iterations_to_target_ratio_vs_off"]["mean"] == pytest.approx(60 / 50)
    assert p["val_auc_ahead_of_off_on"] == 2
    assert p["iterations_to_target_ahead_of_off_on"] == 1
    assert bs.paired_report({"rescue": modes["rescue"]}) == {}  # no baseline, no pairs


def test_the_chosen_arm_clears_zero_on_enough_seeds_and_is_the_best_of_those():
    steady = [0.01, 0.012, 0.011, 0.009, 0.013, 0.01, 0.011, 0.012]
    better_but_noisy = [0.08, -0.05, 0.09, -0.04, 0.07, -0.05, 0.08, -0.04]
    best = [0.02, 0.021, 0.019, 0.022, 0.02, 0.018, 0.021, 0.02]
    paired = bs.paired_report(_modes({"a": steady, "b": better_but_noisy, "c": best}))
    assert paired["b"]["val_auc_diff_vs_off"]["lo90"] < 0
    assert bs.chosen_arm(paired) == "c"
    del paired["c"]
    assert bs.chosen_arm(paired) == "a"
    # too few seeds to decide
    few = bs.paired_report(_modes({"c": best[:5]}))
    assert few["c"]["val_auc_diff_vs_off"]["lo90"] > 0
    assert bs.chosen_arm(few) is None
    # no arm above zero: none is chosen
    assert bs.chosen_arm(bs.paired_report(_modes({"b": better_but_noisy}))) is None
    assert not math.isnan(paired["a"]["val_auc_diff_vs_off"]["mean"])


def test_the_bandit_planner_stays_the_default_only_when_it_beats_the_even_split():
    steady = [0.01, 0.012, 0.011, 0.009, 0.013, 0.01, 0.011, 0.012]
    modes = _modes({"spot_uniform": [0.0] * 8, "spot": steady})
    assert bs.bandit_beats_uniform(modes) is True
    # ahead of off but level with the even split: not shown, the even split is the default
    modes = _modes({"spot_uniform": steady, "spot": [x + 0.001 * (-1) ** i for i, x in
                                                      enumerate(steady)]})  # fmt: skip
    assert bs.bandit_beats_uniform(modes) is False
    # too few paired seeds, or an arm missing: undecided
    assert bs.bandit_beats_uniform(_modes({"spot_uniform": [0.0] * 5, "spot": steady[:5]})) is None
    assert bs.bandit_beats_uniform(_modes({"spot": steady})) is None


def test_the_planner_report_pairs_the_bandit_with_the_even_split():
    modes = _modes({"spot_uniform": [0.0, 0.01, 0.02], "spot": [0.01, 0.02, 0.03]})
    got = bs.planner_report(modes)
    assert got["paired_seeds"] == [0, 1, 2] and got["bandit_beats_uniform"] is None
    diff = got["val_auc_diff_bandit_vs_uniform"]
    assert diff["mean"] == pytest.approx(0.01) and diff["lo90"] == pytest.approx(0.01)
    assert bs.planner_report(_modes({"rescue": [0.0]})) is None
