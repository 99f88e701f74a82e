"""Dead-group statistics against brute force over every G-subset; the rescue selection rule."""

import itertools

import numpy as np
import pytest

from spotlight.config import SELECTION_RULES
from spotlight.explore.dead_groups import (
    dead_probability_random,
    expected_std_random,
    group_statistics,
    is_dead,
    selected_std,
)
from spotlight.explore.seeds import SELECTIONS, max_variance_subset, rescue_subset


@pytest.mark.parametrize("trial", range(40))
def test_dead_probability_is_the_share_of_all_equal_subsets(trial):
    rng = np.random.default_rng(trial)
    n = int(rng.integers(2, 9))
    g = int(rng.integers(1, n + 1))
    rewards = rng.choice([0.0, 1 / 3, 2 / 3, 1.0], size=n, p=[0.6, 0.1, 0.1, 0.2]).tolist()
    subsets = list(itertools.combinations(rewards, g))
    brute = sum(len(set(s)) == 1 for s in subsets) / len(subsets)
    assert dead_probability_random(rewards, g) == pytest.approx(brute, abs=1e-12)


def test_binary_dead_probability_by_formula():
    # 2 successes among 32: a random 8 is dead when it holds neither: C(30, 8) / C(32, 8)
    rewards = [1.0, 1.0] + [0.0] * 30
    assert dead_probability_random(rewards, 8) == pytest.approx((24 * 23) / (32 * 31))
    assert not is_dead(rewards) and is_dead([0.5] * 4)
    assert dead_probability_random([0.0] * 10, 8) == 1.0


def test_expected_std_random_approaches_the_exact_mean():
    rewards = [1.0, 1.0] + [0.0] * 6  # G = 4 of 8: exact mean std over all 70 subsets
    exact = np.mean([np.std(s) for s in itertools.combinations(rewards, 4)])
    estimate = expected_std_random(rewards, 4, np.random.default_rng(0))
    assert estimate == pytest.approx(exact, abs=0.02)


def test_group_statistics_on_a_sparse_binary_prompt_set():
    live = [1.0] + [0.0] * 31  # one success in 32: selection always finds it
    dead = [0.0] * 32
    stats = group_statistics([live, dead], 8)
    assert stats["mean"] == pytest.approx(1 / 64)
    assert stats["dead_share_max_variance"] == 0.5
    assert stats["dead_share_random"] == pytest.approx((1 + 24 / 32) / 2)
    assert stats["std_selected"] == pytest.approx(selected_std(live, 8) / 2)
    assert selected_std(live, 8) == pytest.approx(np.std([1.0] + [0.0] * 7))
    with pytest.raises(ValueError, match="no prompts"):
        group_statistics([], 8)


def test_rescue_keeps_a_live_random_group_and_rescues_a_dead_one():
    live_head = [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    assert rescue_subset(live_head, 3) == [0, 1, 2]
    dead_head = [0.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert rescue_subset(dead_head, 3) == max_variance_subset(dead_head, 3)
    assert sorted(dead_head[i] for i in rescue_subset(dead_head, 3)) == [0.0, 1.0, 1.0]
    assert rescue_subset([0.0] * 6, 3) == max_variance_subset([0.0] * 6, 3)  # nothing to rescue
    assert (
        tuple(SELECTIONS) == SELECTION_RULES == ("max_variance", "rescue")
    )  # every rule has a name
    with pytest.raises(ValueError, match="group"):
        rescue_subset([1.0], 2)


def test_the_screen_reuses_stored_scores_of_a_checkpoint_that_is_gone(tmp_path, capsys):
    import json
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "dead_groups.py"
    main = runpy.run_path(str(script))["main"]
    scores = [[0.0, 1 / 3, 2 / 3, 1.0]] * 2
    old = {
        "num_seeds": 4,
        "num_prompts": 2,
        "checkpoints": [
            {"name": "gone", "path": "runs/gone.safetensors", "seconds": 1.0, "scores": scores}
        ],
    }
    (tmp_path / "dead-groups-ocr-mini.json").write_text(json.dumps(old))
    args = ["--num-prompts", "2", "--num-seeds", "4", "--group", "2", "--out", str(tmp_path)]
    assert main([*args, "--checkpoint", "gone=runs/gone.safetensors"]) == 0
    doc = json.loads((tmp_path / "dead-groups-ocr-mini.json").read_text())
    rewards = doc["checkpoints"][0]["rewards"]
    assert list(rewards) == ["ocr", "ocr-1of3", "ocr-2of3", "ocr-exact"]
    assert [rewards[v]["mean"] for v in ("ocr-1of3", "ocr-2of3", "ocr-exact")] == [0.75, 0.5, 0.25]
    assert "scores reused" in capsys.readouterr().out
    population = tmp_path / "population.json"
    ck = "gone=runs/gone.safetensors"
    assert (
        main([*args, "--checkpoint", ck, "--population", "gone", "ocr-2of3", str(population)]) == 0
    )
    per_prompt = json.loads(population.read_text())["per_prompt"]
    assert [p["rewards"] for p in per_prompt] == [[0.0, 0.0, 1.0, 1.0]] * 2
    # two easy prompts cannot make a training and a validation split: refused, nothing written
    easy = tmp_path / "easy.json"
    with pytest.raises(SystemExit, match="too few to split"):
        main([*args, "--checkpoint", ck, "--easy-split", "gone", "ocr-1of3", "0.75", str(easy)])
    assert not easy.exists()
    # a missing file whose scores are not stored is refused before anything runs
    with pytest.raises(SystemExit):
        main([*args, "--checkpoint", "other=runs/other.safetensors"])
    assert "no such file" in capsys.readouterr().err


def test_the_easy_split_keeps_the_prompts_drawn_right_and_every_fourth_for_validation(tmp_path):
    import json
    import runpy
    from pathlib import Path

    from spotlight.prompts import read_prompt_file

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "dead_groups.py"
    ns = runpy.run_path(str(script))
    prompts = [f"p{k}" for k in range(10)]
    rewards = [[1.0, 1.0, 1.0, 0.0] if k % 5 else [0.0, 0.0, 1.0, 0.0] for k in range(10)]
    train, val, rates = ns["easy_split"](prompts, rewards, 0.75)
    assert rates == [0.75] * 8  # p0 and p5 are hard
    assert val == ["p4", "p9"]  # the 4th and 8th easy prompts
    assert train == ["p1", "p2", "p3", "p6", "p7", "p8"]
    doc = {"command": "c", "task": "ocr-mini", "num_seeds": 4, "checkpoints": []}
    doc["checkpoints"].append({"name": "t", "path": "t.safetensors", "scores": rewards})
    path = tmp_path / "easy.json"
    ns["write_easy_split"](doc, prompts, "t", "ocr-exact", "0.75", str(path))
    assert read_prompt_file(str(path)) == (train, val)
    assert json.loads(path.read_text())["checkpoint"] == "t.safetensors"


def test_rescued_dead_share_judges_a_selection_on_other_rewards():
    from spotlight.explore.dead_groups import dead_probability_random, rescued_dead_share

    full = [[1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]]
    # prompt 0: the short rewards point at the one good seed; prompt 2: they are all equal, and
    # the seeds kept (2 and 3) are both bad on the full rewards
    short = [[1, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    g = 2
    dead = [dead_probability_random(r, g) for r in full]  # 0.5, 1, 1/3
    assert rescued_dead_share(full, full, g) == pytest.approx((dead[0] + dead[2]) / sum(dead))
    assert rescued_dead_share(full, short, g) == pytest.approx(dead[0] / sum(dead))
    assert rescued_dead_share([[1, 0], [0, 1]], [[0, 0], [0, 0]], 2) is None
    with pytest.raises(ValueError):
        rescued_dead_share(full, short[:2], g)
