"""Tasks: deterministic disjoint splits, renders that satisfy their prompts, shipped base models."""

import json

import numpy as np
import pytest

from spotlight.cli import main
from spotlight.policies.tiny import TinyPolicy
from spotlight.recipes import get_recipe
from spotlight.tasks import TASK_NAMES, base_checkpoint, get_task
from spotlight.tasks.ocr_mini import target_text
from spotlight.training.pretrain import task_model_config


def test_ocr_mini_splits_are_fixed_disjoint_and_sized():
    task = get_task("ocr-mini")
    train, val = task.prompts("train"), task.prompts("val")
    assert (len(train), len(val)) == (2000, 256)
    assert not set(train) & set(val)
    assert train == get_task("ocr-mini").prompts("train")
    assert val[:2] == ['a sign that says "RNX"', 'a sign that says "OUF"']  # versioned by seed
    rng = np.random.default_rng(0)
    assert not {task.sample_prompt(rng) for _ in range(2000)} & set(val)
    with pytest.raises(ValueError, match="split"):
        task.prompts("test")


def test_ocr_mini_render_and_target():
    task = get_task("ocr-mini")
    images = [task.render('a sign that says "QXF"', np.random.default_rng(i)) for i in range(200)]
    assert all(img.dtype == np.uint8 and img.shape == (32, 64, 1) for img in images)
    # v2: about half are in the small font. The text's height (rows holding dark pixels) is
    # 6-8 px in the small font and 11-15 px in the large one.
    heights = np.array(
        [np.ptp(np.nonzero((img[..., 0] < 128).sum(axis=1) >= 2)[0]) + 1 for img in images]
    )
    small = heights <= 10
    assert 0.4 < small.mean() < 0.6
    assert set(heights[small]) <= set(range(5, 10)) and set(heights[~small]) <= set(range(11, 18))
    assert all(img.max() >= 215 for img in images)  # a light sign
    large = [img for img, s in zip(images, small, strict=True) if not s]
    assert all(img.min() <= 60 for img in large)  # dark text (thin small strokes blend lighter)
    assert target_text('a sign that says "AB C"') == "AB C"
    with pytest.raises(ValueError, match="no quoted target"):
        target_text("a sign that says nothing")


SHIPPED_ARCH = {"ocr-mini": {}, "geneval-mini": {"patch": 2}}
"""The shipped base models' architecture fields that differ from pretraining's default
(docs/tasks.md: GenEval-mini v2 has 2-pixel patches)."""


@pytest.mark.parametrize("name", TASK_NAMES)
def test_shipped_base_models_load_with_the_task_architecture(name):
    policy = TinyPolicy.load(base_checkpoint(name))
    assert policy.config == task_model_config(get_task(name), **SHIPPED_ARCH[name])
    assert get_recipe(f"tiny-{name.removesuffix('-mini')}").policy.checkpoint == base_checkpoint(
        name
    )


def test_unknown_task_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        get_task("nope")


def test_eval_command_writes_the_documented_fields(tmp_path):
    out = tmp_path / "ev"
    rc = main(
        [
            "eval",
            "--task",
            "geneval-mini",
            "--num-seeds",
            "2",
            "--num-prompts",
            "2",
            "--steps",
            "2",
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    doc = json.loads((out / "eval.json").read_text())
    # the shipped base model by its path in the repository, not this machine's absolute path
    assert doc["task"] == "geneval-mini"
    assert doc["checkpoint"] == "spotlight/assets/geneval-mini.safetensors"
    assert (doc["num_prompts"], doc["num_seeds"]) == (2, 2)
    assert len(doc["per_prompt"]) == 2
    row = doc["per_prompt"][0]
    assert set(row) == {"prompt", "seeds", "rewards"} and row["seeds"] == [0, 1]
    rewards = [r for p in doc["per_prompt"] for r in p["rewards"]]
    assert doc["mean_reward"] == pytest.approx(sum(rewards) / len(rewards))
    assert doc["split"] == "val"
    assert [p["prompt"] for p in doc["per_prompt"]] == get_task("geneval-mini").prompts("val")[:2]


def test_eval_command_scores_the_training_prompts_on_request(tmp_path):
    out = tmp_path / "ev"
    args = ["eval", "--task", "geneval-mini", "--split", "train", "--num-seeds", "1"]
    assert main([*args, "--num-prompts", "3", "--steps", "2", "--out", str(out)]) == 0
    doc = json.loads((out / "eval.json").read_text())
    train = get_task("geneval-mini").prompts("train")
    assert doc["split"] == "train"
    assert [p["prompt"] for p in doc["per_prompt"]] == train[:3]
    assert not set(train[:3]) & set(get_task("geneval-mini").prompts("val"))
