"""benchmarks/geneval_samples.py: what the detector makes of a base model's GenEval-mini samples."""

import runpy
from pathlib import Path

import numpy as np
import pytest

from spotlight.tasks import get_task

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "geneval_samples.py"


@pytest.fixture(scope="module")
def census():
    return runpy.run_path(str(SCRIPT))["census"]


def test_ground_truth_renders_meet_their_prompts_with_every_shape_known(census):
    task = get_task("geneval-mini")
    prompts = task.prompts("val")[:24]
    rng = np.random.default_rng(3)
    got = census([task.render(p, rng) for p in prompts], prompts)
    assert got["mean_reward"] == 1.0 and got["exact_share"] == 1.0
    assert got["unknown_shape_share"] == 0.0 and "unknown" not in got["shapes_found"]
    assert sum(v["images"] for v in got["by_category"].values()) == 24


def test_blank_and_blob_images_count_as_what_they_are(census):
    task = get_task("geneval-mini")
    prompt = next(p for p in task.prompts("val") if p == "a photo of a red square")
    blank = np.zeros((32, 32, 3), np.uint8)
    blob = blank.copy()
    blob[8:20, 8:12] = (255, 0, 0)  # a red bar 3x as tall as wide: no shape's outline
    got = census([blank, blob], [prompt, prompt])
    assert got["objects_per_image"] == {"0": 1, "1": 1}
    assert got["shapes_found"] == {"unknown": 1} and got["unknown_shape_share"] == 1.0
    assert got["exact_share"] == 0.0


def test_the_census_scores_as_the_reward_does(census):
    from spotlight.rewards.geneval import score

    task = get_task("geneval-mini")
    prompts = task.prompts("val")[:32]
    rng = np.random.default_rng(5)
    images = [task.render(p, rng) for p in prompts]
    for image in images[::2]:  # damaged renders: some clauses fail
        image[:16, :16] = 0
    scores = [score(i, p) for i, p in zip(images, prompts, strict=True)]
    got = census(images, prompts)
    assert got["mean_reward"] == pytest.approx(np.mean([s for _, s in scores]), abs=1e-12)
    assert got["exact_share"] == np.mean([c for c, _ in scores]) < 1.0
