"""GenEval's scoring rules (spotlight.rewards.geneval_rules) on synthetic detections."""

from __future__ import annotations

import math

import pytest

from spotlight.rewards import geneval_rules as rules
from spotlight.rewards.geneval_rules import (
    Detection,
    Requirement,
    Spec,
    clauses,
    keep_confident,
    partial_score,
    relative_position,
    score,
)


def det(label: str, score: float = 0.99, box=(0, 0, 10, 10), color: str | None = None):
    return Detection(label, score, tuple(float(v) for v in box), color)


def single(name: str) -> Spec:
    return Spec("single_object", (Requirement(name),))


def counting(name: str, n: int) -> Spec:
    return Spec("counting", (Requirement(name, count=n),))


def position(a: str, rel: str, b: str) -> Spec:
    return Spec("position", (Requirement(a, position=(rel, 1)), Requirement(b)))


def colored(*pairs: tuple[str, str]) -> Spec:
    objects = tuple(Requirement(name, color=c) for c, name in pairs)
    return Spec("colors" if len(objects) == 1 else "color_attr", objects)


def test_constants_are_genevals():
    assert (rules.THRESHOLD, rules.COUNTING_THRESHOLD) == (0.3, 0.9)
    assert (rules.MAX_OBJECTS, rules.POSITION_THRESHOLD) == (16, 0.1)
    assert len(rules.COLORS) == 10 and rules.COLORS[0] == "red" and rules.COLORS[-1] == "white"
    assert rules.CATEGORIES[0] == "single_object" and len(rules.CATEGORIES) == 6


def test_thresholds_are_strict_at_their_edges():
    found = [det("cat", 0.3), det("cat", 0.30001), det("dog", 0.9), det("dog", 0.90001)]
    kept = keep_confident(found, "two_object")
    assert [d.score for d in kept] == [0.30001, 0.90001, 0.9]  # per class, most confident first
    kept = keep_confident(found, "counting")
    assert [d.score for d in kept] == [0.90001]
    assert keep_confident(found, "counting", counting_threshold=0.2) == [
        found[1],
        found[0],
        found[3],
        found[2],
    ]


def test_at_most_max_objects_per_class_the_most_confident():
    found = [det("cup", 0.4 + i / 100) for i in range(20)] + [det("fork", 0.5)]
    kept = keep_confident(found, "single_object")
    cups = [d for d in kept if d.label == "cup"]
    assert len(cups) == rules.MAX_OBJECTS and min(d.score for d in cups) == pytest.approx(0.44)
    assert [d.label for d in kept].count("fork") == 1
    assert len(keep_confident(found, "single_object", max_objects=3)) == 4


def test_single_and_two_object_clauses():
    assert clauses(single("cat"), [det("cat")]) == [True]
    assert clauses(single("cat"), [det("dog")]) == [False]
    assert clauses(single("cat"), []) == [False]
    two = Spec("two_object", (Requirement("cat"), Requirement("dog")))
    assert clauses(two, [det("dog"), det("bird")]) == [False, True]
    assert clauses(two, [det("dog"), det("cat"), det("cat")]) == [True, True]  # extras allowed


def test_counting_is_exact_by_default():
    spec = counting("clock", 3)
    for n, want in [(0, [False, False]), (2, [True, False]), (3, [True, True]), (4, [True, False])]:
        assert clauses(spec, [det("clock")] * n) == want
    assert clauses(spec, [det("clock")] * 4, exact_count=False) == [True, True]
    assert clauses(spec, [det("clock")] * 2, exact_count=False) == [True, False]


def test_counting_uses_the_counting_threshold():
    """GenEval: 'three clocks' with three confident clocks and a fourth at 0.5 is correct (the
    fourth is under 0.9), with a fourth at 0.95 it is not (four clocks)."""
    three = [det("clock", 0.95), det("clock", 0.97), det("clock", 0.92)]
    assert score(counting("clock", 3), [*three, det("clock", 0.5)]) == (True, 1.0)
    assert score(counting("clock", 3), [*three, det("clock", 0.95)]) == (False, 0.5)
    assert score(counting("clock", 2), [det("clock", 0.95), det("clock", 0.6)]) == (False, 0.5)


def test_color_is_read_on_the_most_confident_object():
    spec = colored(("red", "car"))
    top_blue = [det("car", 0.9, color="blue"), det("car", 0.5, color="red")]
    assert clauses(spec, keep_confident(top_blue, "colors")) == [True, False]
    assert clauses(spec, top_blue, any_color=True) == [True, True]  # GenEval-mini's variant
    assert clauses(spec, [det("car", 0.9, color="red"), det("car", 0.5, color="blue")]) == [
        True,
        True,
    ]
    assert clauses(spec, [det("bus", color="red")]) == [False, False]
    assert clauses(spec, [det("car", color=None)]) == [True, False]  # not classified: no colour


def test_color_attr_has_four_clauses():
    spec = colored(("purple", "wine glass"), ("black", "apple"))
    right = [det("wine glass", color="purple"), det("apple", color="black")]
    swapped = [det("wine glass", color="black"), det("apple", color="purple")]
    assert clauses(spec, right) == [True, True, True, True]
    assert clauses(spec, swapped) == [True, False, True, False]
    assert clauses(spec, right[:1]) == [True, True, False, False]
    assert partial_score(clauses(spec, swapped)) == 0.5


def test_relative_position_hand_worked_example():
    """GenEval's rule by hand for 'a dog right of a teddy bear':

    dog (300, 100, 450, 300): centre (375, 200), size (150, 200); teddy bear
    (50, 120, 250, 320): centre (150, 220), size (200, 200). Offset (225, -20), |offset| =
    225.89. Shrunk by 0.1 * (150 + 200) = 35 in x and 0.1 * (200 + 200) = 40 in y: (190, 0).
    Divided by |offset|: dx = 0.841 > 0.5, dy = 0: "right of" only.
    """
    dog, teddy = (300, 100, 450, 300), (50, 120, 250, 320)
    assert relative_position(dog, teddy) == {"right of"}
    assert relative_position(teddy, dog) == {"left of"}
    assert 190 / math.hypot(225, 20) == pytest.approx(0.8411, abs=1e-4)
    found = [det("dog", 0.8, dog), det("teddy bear", 0.7, teddy)]
    assert score(position("dog", "right of", "teddy bear"), found) == (True, 1.0)
    held = clauses(position("dog", "left of", "teddy bear"), found)
    assert held == [True, True, False] and partial_score(held) == pytest.approx(2 / 3)


def test_relative_position_vertical_diagonal_and_too_close():
    assert relative_position((0, 0, 10, 10), (0, 50, 10, 60)) == {"above"}
    assert relative_position((0, 50, 10, 60), (0, 0, 10, 10)) == {"below"}
    assert relative_position((40, 40, 40, 40), (0, 0, 0, 0)) == {"right of", "below"}  # 45 deg
    assert relative_position((60, 80, 60, 80), (0, 0, 0, 0)) == {"right of", "below"}  # .6, .8
    assert relative_position((30, 80, 30, 80), (0, 0, 0, 0)) == {"below"}  # dx 0.35
    assert relative_position((1, 0, 11, 10), (0, 0, 10, 10)) == set()  # shrunk to nothing
    assert relative_position((0, 0, 10, 10), (0, 0, 10, 10)) == set()  # same box


def test_relative_position_direction_threshold_edge():
    """Offset 10 px in x; shrink 0.1 * summed widths: 50 px -> dx = 5 / 10 = 0.5, not > 0.5,
    so no relation; 49 px -> dx = 0.51: right of."""
    assert relative_position((10, 0, 35, 10), (0, 0, 25, 10)) == set()
    assert relative_position((10.25, 0, 34.75, 10), (0.25, 0, 24.75, 10)) == {"right of"}
    assert relative_position((10, 0, 35, 10), (0, 0, 25, 10), threshold=0.0) == {"right of"}


def test_position_uses_the_most_confident_of_each_and_needs_both():
    spec = position("cat", "left of", "dog")
    left, right = (0, 0, 10, 10), (50, 0, 60, 10)
    found = [det("cat", 0.9, left), det("cat", 0.4, right), det("dog", 0.8, right)]
    assert clauses(spec, found) == [True, True, True]
    found = [det("cat", 0.4, left), det("cat", 0.9, right), det("dog", 0.8, right)]
    assert clauses(spec, keep_confident(found, "position")) == [True, True, False]
    assert clauses(spec, [det("cat", 0.9, left)]) == [True, False, False]
    assert clauses(spec, [det("dog", 0.9, right)]) == [False, True, False]


def test_position_with_a_custom_predicate_and_bad_target():
    spec = position("cat", "above", "dog")
    calls = []

    def predicate(rel, a, b):
        calls.append((rel, a.label, b.label))
        return True

    assert clauses(spec, [det("cat"), det("dog")], relation=predicate) == [True, True, True]
    assert calls == [("above", "cat", "dog")]
    bad = Spec("position", (Requirement("cat", position=("above", 5)), Requirement("dog")))
    with pytest.raises(ValueError, match="position target 5"):
        clauses(bad, [det("cat"), det("dog")])


def test_labels_can_come_from_another_attribute():
    class Shape:
        def __init__(self, shape: str, color: str):
            self.shape, self.color = shape, color

    spec = colored(("red", "ring"))
    found = [Shape("ring", "blue"), Shape("ring", "red")]
    assert clauses(spec, found, any_color=True, label_of=lambda d: d.shape) == [True, True]
    assert clauses(spec, found, label_of=lambda d: d.shape) == [True, False]


def test_correct_means_every_clause():
    spec = colored(("red", "car"), ("blue", "bus"))
    assert score(spec, [det("car", color="red"), det("bus", color="blue")]) == (True, 1.0)
    assert score(spec, [det("car", color="red")]) == (False, 0.5)
    assert score(spec, [det("car", 0.2, color="red")]) == (False, 0.0)  # under the threshold
    assert score(spec, [det("car", 0.2, color="red")], threshold=0.1) == (False, 0.5)
