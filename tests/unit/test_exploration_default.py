"""The exact-reward recipe explores with the arm the power bench chose, whatever it chose."""

import dataclasses
import json
from pathlib import Path

import pytest

from spotlight import bench_stats
from spotlight.bench import MODES, run_config
from spotlight.config import ExplorationConfig
from spotlight.explore.arms import ARMS, EXACT_REWARD_ARM, POWER_BENCH, with_arm
from spotlight.recipes import get_recipe

ROOT = Path(__file__).resolve().parents[2]


def _paired(report: dict) -> dict:
    return {
        mode: v
        for mode, v in report["modes"].items()
        if mode != bench_stats.BASELINE and "val_auc_diff_vs_off" in v
    }


def test_the_exact_reward_arm_is_the_one_the_power_bench_chose():
    report = json.loads((ROOT / POWER_BENCH).read_text())
    assert bench_stats.chosen_arm(_paired(report)) == EXACT_REWARD_ARM


def test_the_default_planner_is_the_bandit_only_while_the_power_bench_does_not_refute_it():
    """The paper's bandit planner stays the default unless 8 paired seeds show it no better
    than the even split of the same budget (then ``uniform`` is the default)."""
    report = json.loads((ROOT / POWER_BENCH).read_text())
    verdict = bench_stats.bandit_beats_uniform(report["modes"])
    assert ExplorationConfig().uniform is (verdict is False)


def test_the_exact_reward_recipe_runs_that_arm_at_the_bench_budget():
    cfg = get_recipe("tiny-ocr-exact")
    assert cfg.reward == "ocr-exact" and cfg.exploration.budget_seeds == 128
    standing = ExplorationConfig()
    # no arm shown: the standing defaults, the bandit's or (refuted) the even split's
    default_arm = "spot_uniform" if standing.uniform else "spot"
    arm = EXACT_REWARD_ARM or default_arm
    assert cfg.exploration == with_arm(cfg.exploration, arm)
    assert {k: getattr(standing, k) for k in ARMS[default_arm] if k != "mode"} == {
        k: v for k, v in ARMS[default_arm].items() if k != "mode"
    }
    # the rest of the run is the default recipe's
    plain = get_recipe("tiny-ocr")
    assert (
        dataclasses.replace(
            cfg, recipe=plain.recipe, reward=plain.reward, exploration=plain.exploration
        )
        == plain
    )


def test_an_arm_sets_its_fields_and_keeps_the_budget():
    base = ExplorationConfig(budget_seeds=64, selection="rescue", uniform=True)
    spot = with_arm(base, "spot")
    assert (spot.selection, spot.uniform, spot.budget_seeds) == ("max_variance", False, 64)
    assert with_arm(base, "off").mode == "off"
    assert MODES is ARMS  # the benches run the same arms
    cfg = run_config(get_recipe("tiny-ocr"), "rescue", 3)
    assert cfg.seed == 3 and cfg.exploration == with_arm(cfg.exploration, "rescue")
    with pytest.raises(ValueError, match="unknown arm 'best'"):
        with_arm(base, "best")


def test_a_run_of_a_shipped_recipe_says_why_it_explores():
    from spotlight.overrides import apply_overrides
    from spotlight.recipes import exploration_note

    graded = exploration_note(get_recipe("tiny-ocr"))
    assert graded is not None and "to exercise the system" in graded
    # the graded recipe's note speaks of the exact-match reward as the power bench found it
    assert ("nor on the exact-match reward" in graded) == (EXACT_REWARD_ARM is None)
    exact = exploration_note(get_recipe("tiny-ocr-exact"))
    if EXACT_REWARD_ARM is None:
        assert exact is not None and "no arm's gain over no exploration cleared zero" in exact
    else:
        assert exact is not None and repr(EXACT_REWARD_ARM) in exact
    # a run whose reward or exploration the user changed is not the recipe's: no note
    assert exploration_note(apply_overrides(get_recipe("tiny-ocr"), ["reward=ocr-exact"])) is None
    off = apply_overrides(get_recipe("tiny-ocr"), ["exploration.mode=off"])
    assert exploration_note(off) is None
    assert exploration_note(get_recipe("tiny-brightness")) is None
