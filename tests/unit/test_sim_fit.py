"""The learning model's exponent fitted on an exploration bench, with its interval over seeds."""

import math

import pytest

from spotlight.sim.sim_fit import exponent_band, fit_exponent


def _run(seed: int, dead: float, its: int | None) -> dict:
    return {
        "seed": seed,
        "zero_std_group_share": dead,
        "group_reward_std_mean": 0.2,
        "iterations_to_target": its,
        "val_curve": [[0, 0.0, 0.1], [30, 1.0, 0.2]],
    }


def _summary(modes: dict[str, list[tuple[float, int | None]]]) -> dict:
    out = {}
    for name, runs in modes.items():
        rs = [_run(s, dead, its) for s, (dead, its) in enumerate(runs)]
        out[name] = {
            "runs": rs,
            "zero_std_group_share": sum(r["zero_std_group_share"] for r in rs) / len(rs),
            "group_reward_std_mean": 0.2,
            "reached_target": "n/a",
        }
    return {"modes": out}


def test_seeds_that_agree_give_a_band_of_one_point():
    # on every seed the live share doubles (50% dead -> none) and the iterations halve: k = 1
    summary = _summary({"off": [(0.5, 20)] * 4, "arm": [(0.0, 10)] * 4})
    band = exponent_band(summary, num_resamples=200)
    assert band["k"] == pytest.approx(1.0) == fit_exponent(summary)["k"]
    assert band["lo"] == pytest.approx(1.0) and band["hi"] == pytest.approx(1.0)
    assert band["seeds"] == [0, 1, 2, 3] and band["unfitted_draws"] == 0


def test_seeds_that_disagree_widen_the_band_around_the_fit():
    off = [(0.5, 20), (0.5, 30), (0.5, None), (0.5, 16), (0.5, 24), (0.5, 18)]
    arm = [(0.25, 10), (0.3, 30), (0.25, 20), (0.3, 20), (0.25, 12), (0.3, None)]
    summary = _summary({"off": off, "arm": arm})
    band = exponent_band(summary, num_resamples=500, seed=3)
    assert band["k"] == pytest.approx(fit_exponent(summary)["k"])
    assert band["lo"] < band["k"] < band["hi"] and band["hi"] - band["lo"] > 0.2
    assert band == exponent_band(summary, num_resamples=500, seed=3)  # seeded: reproducible
    # by hand: off's mean is (20+30+30+16+24+18)/6 = 23 (the miss counted at 30), the arm's
    # (10+30+20+20+12+30)/6 = 20.33; live shares 0.5 and 0.725
    assert band["k"] == pytest.approx(math.log(23 / (122 / 6)) / math.log(0.725 / 0.5))


def test_only_seeds_every_mode_ran_are_paired():
    summary = _summary({"off": [(0.5, 20)] * 3, "arm": [(0.0, 10)] * 2})
    assert exponent_band(summary, num_resamples=50)["seeds"] == [0, 1]
    with pytest.raises(ValueError, match="needs >= 2 seeds"):
        exponent_band(_summary({"off": [(0.5, 20)] * 3, "arm": [(0.0, 10)]}))
    with pytest.raises(ValueError, match=r"the runs of mode 'off' carry no .*seed"):
        exponent_band({"modes": {"off": {"runs": [{"iterations_to_target": 3}]}}})


def test_simulate_prints_the_band_of_each_bench_it_fits(tmp_path, capsys):
    import json

    from spotlight.cli import main

    bench = tmp_path / "exploration.json"
    bench.write_text(json.dumps(_summary({"off": [(0.5, 20)] * 3, "arm": [(0.0, 10)] * 3})))
    out = tmp_path / "sim"
    args = ["simulate", "--scenario", "small", "--systems", "spotlight", "--out", str(out)]
    assert main([*args, "--fit-exploration", str(bench)]) == 0
    said = capsys.readouterr().out
    assert "live_groups exponent k = 1.000" in said
    assert f"{bench}: k = 1.000 on its 3 paired seeds, 90% bootstrap interval over seeds" in said
