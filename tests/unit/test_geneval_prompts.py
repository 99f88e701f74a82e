"""The GenEval prompt set: grammar, GenEval's wording, splits disjoint by meaning, sampling."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from spotlight.tasks import geneval as g
from spotlight.tasks import get_task
from spotlight.tasks.geneval import (
    GENEVAL_COUNTS,
    OBJECT_NAMES,
    PLURALS,
    VAL_COUNTS,
    GenEvalTask,
    format_prompt,
    meaning,
    parse,
)
from spotlight.tasks.geneval_spec import CATEGORIES, COLORS, INVERSE, Requirement, Spec

TASK = GenEvalTask()
TRAIN, VAL = TASK.prompts("train"), TASK.prompts("val")


def test_task_protocol_and_registry():
    task = get_task("geneval")
    assert isinstance(task, GenEvalTask)
    assert (task.name, task.reward, task.channels, task.height, task.width) == (
        "geneval",
        "geneval-model",
        3,
        512,
        512,
    )
    assert g.VERSION == 1 and isinstance(g.SPLIT_SEED, int)
    with pytest.raises(NotImplementedError, match="prompt set for pretrained models"):
        task.render("a photo of a cat", np.random.default_rng(0))
    with pytest.raises(ValueError, match="split"):
        task.prompts("test")


def test_object_names_and_counts_are_genevals():
    assert len(OBJECT_NAMES) == len(set(OBJECT_NAMES)) == 80
    assert OBJECT_NAMES[:3] == ("person", "bicycle", "car") and OBJECT_NAMES[-1] == "toothbrush"
    assert {"computer mouse", "tv remote", "computer keyboard"} <= set(OBJECT_NAMES)
    assert g.COUNT_WORDS == {2: "two", 3: "three", 4: "four"}
    assert sum(GENEVAL_COUNTS.values()) == 553


@pytest.mark.parametrize(
    ("prompt", "spec"),
    [
        ("a photo of a bench", Spec("single_object", (Requirement("bench"),))),
        ("a photo of an umbrella", Spec("single_object", (Requirement("umbrella"),))),
        (
            "a photo of a bench and a sports ball",
            Spec("two_object", (Requirement("bench"), Requirement("sports ball"))),
        ),
        ("a photo of two cats", Spec("counting", (Requirement("cat", count=2),))),
        ("a photo of four benches", Spec("counting", (Requirement("bench", count=4),))),
        ("a photo of three people", Spec("counting", (Requirement("person", count=3),))),
        ("a photo of two sheep", Spec("counting", (Requirement("sheep", count=2),))),
        ("a photo of four knives", Spec("counting", (Requirement("knife", count=4),))),
        ("a photo of a pink car", Spec("colors", (Requirement("car", color="pink"),))),
        ("a photo of an orange orange", Spec("colors", (Requirement("orange", color="orange"),))),
        (
            "a photo of a dog right of a teddy bear",
            Spec(
                "position",
                (Requirement("dog", position=("right of", 1)), Requirement("teddy bear")),
            ),
        ),
        (
            "a photo of a purple wine glass and a black apple",
            Spec(
                "color_attr",
                (Requirement("wine glass", color="purple"), Requirement("apple", color="black")),
            ),
        ),
    ],
)
def test_genevals_templates_round_trip(prompt, spec):
    assert parse(prompt) == spec
    assert format_prompt(spec) == prompt


@pytest.mark.parametrize(
    ("genevals", "ours"),
    [
        ("a photo of four benchs", "a photo of four benches"),
        ("a photo of three persons", "a photo of three people"),
        ("a photo of two sheeps", "a photo of two sheep"),
        ("a photo of four knifes", "a photo of four knives"),
        ("a photo of two toothbrushs", "a photo of two toothbrushes"),
        ("a photo of three wine glasses", "a photo of three wine glasses"),
        ("a photo of four buses", "a photo of four buses"),
    ],
)
def test_genevals_own_plural_spelling_parses(genevals, ours):
    assert parse(genevals) == parse(ours)
    assert format_prompt(parse(genevals)) == ours


def test_plural_table():
    assert len(set(PLURALS.values())) == 80
    assert PLURALS["computer mouse"] == "computer mice" and PLURALS["skis"] == "skis"
    assert PLURALS["sandwich"] == "sandwiches" and PLURALS["tv"] == "tvs"
    for name in OBJECT_NAMES:
        for plural in (PLURALS[name], g.GENEVAL_PLURALS[name]):
            assert parse(f"a photo of two {plural}") == Spec(
                "counting", (Requirement(name, count=2),)
            )


@pytest.mark.parametrize(
    "prompt",
    [
        "a picture of a cat",
        "a photo of a apple",
        "a photo of an cat",
        "a photo of a unicorn",
        "a photo of a pink person",
        "a photo of a cat and a cat",
        "a photo of a red cat and a red dog",
        "a photo of a red cat and a dog",
        "a photo of a red cat left of a dog",
        "a photo of a cat and a dog and a bird",
        "a photo of five cats",
        "a photo of two cat",
        "a photo of cat",
        "",
    ],
)
def test_parse_rejects_prompts_outside_the_grammar(prompt):
    with pytest.raises(ValueError, match="outside the grammar") as err:
        parse(prompt)
    assert repr(prompt) in str(err.value)


def test_format_rejects_specs_outside_the_grammar():
    for spec in [
        Spec("counting", (Requirement("cat", count=7),)),
        Spec("colors", (Requirement("cat", color="teal"),)),
        Spec("single_object", (Requirement("cat", count=2),)),
        Spec("two_object", (Requirement("cat"), Requirement("cat"))),
    ]:
        with pytest.raises(ValueError, match="not a spec of the grammar"):
            format_prompt(spec)


def test_splits_are_fixed_sized_and_round_trip():
    assert len(VAL) == sum(VAL_COUNTS.values()) == 277 and len(set(VAL)) == 277
    assert len(TRAIN) == len(set(TRAIN)) == 40 + 6220 + 200 + 743 + 25180 + g.COLOR_ATTR_TRAIN
    g._splits.cache_clear()
    start = time.perf_counter()
    again = (GenEvalTask().prompts("train"), GenEvalTask().prompts("val"))
    assert time.perf_counter() - start < 3.0  # ~0.1 s on an idle core
    assert again == (TRAIN, VAL)
    for p in [*VAL, *TRAIN[::7]]:
        assert format_prompt(parse(p)) == p


def test_validation_is_balanced_like_geneval():
    counts = Counter(parse(p).category for p in VAL)
    assert counts == VAL_COUNTS and list(counts) == list(CATEGORIES)
    for cat in CATEGORIES:
        assert counts[cat] / len(VAL) == pytest.approx(GENEVAL_COUNTS[cat] / 553, abs=0.005)
    colors = Counter(o.color for p in VAL for o in parse(p).objects if o.color)
    assert set(colors) == set(COLORS)  # every colour is asked for
    assert Counter(parse(p).category for p in TRAIN[::50]).keys() == set(CATEGORIES)


def wordings(spec: Spec) -> set[str]:
    """Every prompt of ``spec``'s meaning: both orders of a pair, both sides of a relation."""
    out = {format_prompt(spec)}
    if len(spec.objects) == 2:
        a, b = spec.objects
        if spec.category == "position":
            rel = a.position[0]
            flipped = (Requirement(b.name, position=(INVERSE[rel], 1)), Requirement(a.name))
        else:
            flipped = (b, a)
        out.add(format_prompt(Spec(spec.category, flipped)))
    return out


def test_splits_are_disjoint_by_meaning():
    train = set(TRAIN)
    held = [parse(p) for p in VAL]
    assert all(not wordings(s) & train for s in held)
    assert sum(len(wordings(s)) for s in held) == 277 + 150  # pairs have two wordings each
    val_meanings = {meaning(s) for s in held}
    assert len(val_meanings) == 277
    assert not {meaning(parse(p)) for p in TRAIN[::5]} & val_meanings
    assert meaning(parse("a photo of a cat left of a dog")) == meaning(
        parse("a photo of a dog right of a cat")
    )
    assert meaning(parse("a photo of a red cat and a blue dog")) == meaning(
        parse("a photo of a blue dog and a red cat")
    )
    assert meaning(parse("a photo of a cat left of a dog")) != meaning(
        parse("a photo of a cat right of a dog")
    )


def test_sample_prompt_is_training_only_in_genevals_proportions():
    rng = np.random.default_rng(0)
    drawn = [TASK.sample_prompt(rng) for _ in range(3000)]
    assert set(drawn) <= set(TRAIN) and not set(drawn) & set(VAL)
    counts = Counter(parse(p).category for p in drawn)
    for cat in CATEGORIES:
        assert counts[cat] / 3000 == pytest.approx(GENEVAL_COUNTS[cat] / 553, abs=0.03)
    again = [TASK.sample_prompt(np.random.default_rng(0)) for _ in range(3)]
    assert again == [drawn[0]] * 3
