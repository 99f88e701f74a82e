"""GenEval-mini: grammar, splits, renders, and the detector reward agreeing with the renders."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from spotlight.rewards import build_reward
from spotlight.rewards.geneval import GenEvalReward, detect, relation_holds, score
from spotlight.tasks import get_task
from spotlight.tasks.geneval_mini import (
    BACKGROUND,
    CATEGORIES,
    MAX_PROMPT_BYTES,
    PALETTE,
    POSITION_MIN_OFFSET,
    GenEvalMini,
    Placed,
    all_specs,
    draw,
    format_prompt,
    meaning,
    parse,
    place,
    relation_offsets,
)

ALL = [format_prompt(s) for s in all_specs()]


def test_prompt_space_fits_the_text_encoder_and_round_trips():
    assert len(ALL) == len(set(ALL)) == 336
    assert max(len(p.encode("utf-8")) for p in ALL) <= MAX_PROMPT_BYTES
    assert {s.category for s in all_specs()} == set(CATEGORIES)
    assert all(parse(p) == s for p, s in zip(ALL, all_specs(), strict=True))


@pytest.mark.parametrize(
    "prompt",
    [
        "a picture of a circle",
        "a photo of a hexagon",
        "a photo of a purple circle",
        "a photo of five circles",
        "a photo of a circle and a circle",
        "a photo of a red circle and a square",
        "a photo of a red circle and a red square",
        "a photo of a red circle left of a square",
        "a photo of a circle and a square and a ring",
        "a photo of circle",
        "",
    ],
)
def test_parse_rejects_prompts_outside_the_grammar(prompt):
    with pytest.raises(ValueError, match="outside the grammar") as err:
        parse(prompt)
    assert repr(prompt) in str(err.value)


def test_splits_are_fixed_disjoint_and_cover_every_category():
    task = GenEvalMini()
    train, val = task.prompts("train"), task.prompts("val")
    assert (len(train), len(val)) == (252, 84)
    assert not set(train) & set(val) and sorted(train + val) == sorted(ALL)
    assert {parse(p).category for p in val} == set(CATEGORIES)
    assert (train, val) == (GenEvalMini().prompts("train"), GenEvalMini().prompts("val"))
    rng = np.random.default_rng(0)
    assert {task.sample_prompt(rng) for _ in range(2000)} <= set(train)
    with pytest.raises(ValueError, match="split"):
        task.prompts("test")


def test_task_protocol_and_registry():
    task = get_task("geneval-mini")
    assert isinstance(task, GenEvalMini)
    assert (task.name, task.height, task.width, task.channels, task.reward) == (
        "geneval-mini",
        32,
        32,
        3,
        "geneval",
    )


def test_render_is_seeded_crisp_and_draws_only_the_named_objects():
    task = GenEvalMini()
    allowed = {BACKGROUND, *PALETTE.values()}
    for i, prompt in enumerate(ALL[::7]):
        img = task.render(prompt, np.random.default_rng(i))
        assert img.dtype == np.uint8 and img.shape == (32, 32, 3)
        assert np.array_equal(img, task.render(prompt, np.random.default_rng(i)))
        assert {tuple(int(v) for v in px) for px in img.reshape(-1, 3)} <= allowed
        spec = parse(prompt)
        expected = spec.count if spec.category == "counting" else len(spec.objects)
        assert len(detect(img)) == expected, prompt


def test_position_renders_have_a_clear_margin():
    for i, prompt in enumerate(p for p in ALL if parse(p).category == "position"):
        spec = parse(prompt)
        a, b = place(spec, np.random.default_rng(i))
        along, across = relation_offsets(spec.relation, a.centroid(), b.centroid())
        assert along >= POSITION_MIN_OFFSET and abs(across) <= 0.5 * along


def _cases(num: int, seed: int) -> list[tuple[str, int]]:
    rng = np.random.default_rng(seed)
    return [(ALL[int(rng.integers(len(ALL)))], seed * 100_000 + i) for i in range(num)]


def test_detector_agrees_with_ground_truth_renders():
    task = GenEvalMini()
    ok: Counter[str] = Counter()
    for prompt, seed in _cases(500, seed=1):
        ok[score(task.render(prompt, np.random.default_rng(seed)), prompt)[0]] += 1
    assert ok[True] / 500 >= 0.98, ok


def test_detector_is_not_permissive():
    """A render scored against another prompt of its category (a different scene) fails."""
    task, rng = GenEvalMini(), np.random.default_rng(5)
    specs = dict(zip(ALL, all_specs(), strict=True))
    wrong = 0
    for prompt, seed in _cases(300, seed=2):
        spec = specs[prompt]
        others = [p for p, s in specs.items() if s.category == spec.category]
        others = [p for p in others if meaning(specs[p]) != meaning(spec)]
        other = others[int(rng.integers(len(others)))]
        wrong += not score(task.render(prompt, np.random.default_rng(seed)), other)[0]
    assert wrong / 300 >= 0.95


def test_reward_is_the_fraction_of_clauses_that_hold():
    img = draw([Placed("circle", "red", 9, 2, 2), Placed("square", "blue", 9, 20, 20)])
    prompts = [
        "a photo of a red circle and a blue square",  # 4/4
        "a photo of a blue circle and a red square",  # shapes yes, colors no: 2/4
        "a photo of two circles",  # present, count wrong: 1/2
        "a photo of a circle left of a square",  # 3/3
        "a photo of a circle below a square",  # 2/3
        "a photo of a triangle",  # 0/1
    ]
    reward = GenEvalReward()(np.stack([img] * len(prompts)), prompts)
    assert reward.dtype == np.float32
    np.testing.assert_allclose(reward, [1, 0.5, 0.5, 1, 2 / 3, 0], atol=1e-6)
    blank = np.zeros((1, 32, 32, 3), np.uint8)
    assert GenEvalReward()(blank, ["a photo of a circle"])[0] == 0
    assert GenEvalReward().score(img, prompts[0]) == (True, 1.0)
    assert GenEvalReward().score(img, prompts[4]) == (False, pytest.approx(2 / 3))


def test_the_exact_reward_is_one_only_when_every_clause_holds():
    img = draw([Placed("circle", "red", 9, 2, 2), Placed("square", "blue", 9, 20, 20)])
    prompts = [
        "a photo of a red circle and a blue square",  # 4/4
        "a photo of a blue circle and a red square",  # 2/4
        "a photo of a circle left of a square",  # 3/3
        "a photo of a circle below a square",  # 2/3
    ]
    exact = build_reward("geneval-exact")(np.stack([img] * len(prompts)), prompts)
    assert exact.dtype == np.float32
    np.testing.assert_array_equal(exact, [1, 0, 1, 0])


def test_detector_ignores_color_mixes_and_specks():
    img = np.zeros((32, 32, 3), np.uint8)
    img[2:12, 2:12] = (255, 128, 0)  # halfway between red and yellow: no palette color
    img[20:30, 20:30] = (90, 90, 90)  # a dim gray smudge: mostly background
    img[14:17, 2:5] = PALETTE["green"]  # 9 pixels: below the minimum area
    assert detect(img) == []
    full = np.full((32, 32, 3), PALETTE["red"], np.uint8)  # one frame-filling blob: no square
    assert [d.shape for d in detect(full)] == ["unknown"]
    assert GenEvalReward()(full[None], ["a photo of a red square"])[0] == 0


def test_relations_use_a_cone_around_the_axis():
    left = draw([Placed("circle", "red", 8, 2, 12), Placed("square", "red", 8, 20, 14)])
    a, b = sorted(detect(left), key=lambda d: d.shape)  # circle, square
    assert relation_holds("left of", a, b) and relation_holds("right of", b, a)
    assert not relation_holds("above", a, b) and not relation_holds("below", a, b)


@pytest.mark.parametrize(
    ("images", "prompts", "match"),
    [
        (np.zeros((1, 32, 32, 3), np.float32), ["a photo of a circle"], "uint8"),
        (np.zeros((1, 32, 32, 1), np.uint8), ["a photo of a circle"], r"\(N, 32, 32, 3\)"),
        (np.zeros((1, 16, 16, 3), np.uint8), ["a photo of a circle"], r"\(N, 32, 32, 3\)"),
        (np.zeros((2, 32, 32, 3), np.uint8), ["a photo of a circle"], "2 images but 1"),
        (np.zeros((1, 32, 32, 3), np.uint8), ["a photo of a cat"], "outside the grammar"),
    ],
)
def test_reward_rejects_bad_input(images, prompts, match):
    with pytest.raises(ValueError, match=match):
        GenEvalReward()(images, prompts)


def test_score_rejects_bad_images():
    with pytest.raises(ValueError, match="uint8"):
        score(np.zeros((32, 32, 3), np.float32), "a photo of a circle")
    with pytest.raises(ValueError, match=r"\(32, 32, 3\)"):
        score(np.zeros((32, 32), np.uint8), "a photo of a circle")


def test_task_and_reward_modules_import_no_torch_or_ray():
    code = (
        "import sys, spotlight.tasks.geneval_mini, spotlight.rewards.geneval; "
        "bad = {'torch', 'ray'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
