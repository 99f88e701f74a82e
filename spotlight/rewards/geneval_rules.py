"""GenEval's scoring rules on detections, shared by the real GenEval reward and GenEval-mini.

The rules are those of GenEval (Ghosh et al. 2023; djghosh13/geneval,
``evaluation/evaluate_images.py``), restated on a small data model: a prompt is a ``Spec`` (its
category and the objects it asks for, each a ``Requirement``), a detector's output is a list of
``Detection`` records, and ``clauses`` evaluates the spec's clauses on them:

- Detections count when their score is above ``THRESHOLD`` (0.3), or above
  ``COUNTING_THRESHOLD`` (0.9) for a counting prompt, strictly (GenEval keeps ``score > t``);
  at most ``MAX_OBJECTS`` (16) per class, the most confident first (``keep_confident``).
- Per requirement, in the spec's order: the class is present; for a count N > 1, exactly N
  (GenEval: at least N, and not N + 1); for a colour, the top N detections of the class all
  have it (GenEval classifies colour on the most confident ones only).
- Per position requirement, after all objects: each of the top N detections of the object is
  in the relation to each of the top detections of its target, by ``relative_position`` on
  their boxes; the clause fails when either object or its colour clause fails.
- The prompt is correct when every clause holds (GenEval's ``correct``).

The reward is the fraction of clauses that hold (``partial_score``). That per-clause partial
credit is ours (GenEval-mini introduced it): Flow-GRPO's GenEval reward (yifan123/reward-server,
``reward_server/gen_eval.py``) also gives partial credit, but per requirement by how far the
count is off (``1 - |N - found| / N``), so it is not the same number.

GenEval-mini calls ``clauses`` with its own relation predicate (centroids instead of boxes),
``any_color=True`` (any object of the shape may carry the colour) and its shape as the label.
Pure numpy: no model, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spotlight.tasks.geneval_spec import (  # noqa: F401 (the rules speak of these)
    CATEGORIES,
    COLORS,
    INVERSE,
    RELATIONS,
    Requirement,
    Spec,
)

THRESHOLD = 0.3
"""A detection counts when its score is above this (GenEval's ``threshold`` option)."""
COUNTING_THRESHOLD = 0.9
"""... or above this for counting prompts (GenEval's ``counting_threshold``)."""
MAX_OBJECTS = 16
"""At most this many detections per class, the most confident (GenEval's ``max_objects``)."""
POSITION_THRESHOLD = 0.1
"""Each centre offset shrinks by this fraction of the two objects' summed sizes along the axis
before the direction is read (GenEval's ``position_threshold``)."""


@dataclass(frozen=True)
class Detection:
    """One detected object instance.

    Attributes:
        label: Its class (a GenEval object name).
        score: The detector's confidence in [0, 1].
        box: ``(x0, y0, x1, y1)`` in pixels, end-exclusive.
        color: Its colour (one of ``COLORS``) where it was classified, else None.
        area: Pixels in its mask, where there is one.
    """

    label: str
    score: float
    box: tuple[float, float, float, float]
    color: str | None = None
    area: int | None = None


def keep_confident(
    detections: Sequence[Detection],
    category: str,
    *,
    threshold: float = THRESHOLD,
    counting_threshold: float = COUNTING_THRESHOLD,
    max_objects: int = MAX_OBJECTS,
) -> list[Detection]:
    """GenEval's filter: per class, the detections scoring above the category's threshold,
    most confident first, at most ``max_objects``; classes in order of first appearance."""
    limit = counting_threshold if category == "counting" else threshold
    by_label: dict[str, list[Detection]] = {}
    for d in detections:
        by_label.setdefault(d.label, []).append(d)
    kept = []
    for group in by_label.values():
        ranked = sorted(group, key=lambda d: -d.score)  # stable: ties keep detector order
        kept += [d for d in ranked if d.score > limit][:max_objects]
    return kept


def relative_position(
    box_a: Sequence[float], box_b: Sequence[float], threshold: float = POSITION_THRESHOLD
) -> set[str]:
    """The relations that hold for box A relative to box B, by GenEval's rule.

    With ``c`` the box centres, ``d`` the box sizes (width, height) and
    ``o = c_a - c_b``, each axis offset is shrunk towards 0 by ``threshold * (d_a + d_b)``
    (not past 0) and divided by ``|o|``; "left of" holds when the x part is < -0.5, "right of"
    when > 0.5, "above" when the y part is < -0.5 (image y grows downwards), "below" when
    > 0.5. Objects too close to call (both shrunk offsets under 1e-3 px) have no relation.
    """
    boxes = np.array([box_a[:4], box_b[:4]], dtype=np.float64).reshape(2, 2, 2)
    center_a, center_b = boxes.mean(axis=1)
    size_a, size_b = boxes[:, 1] - boxes[:, 0]
    offset = center_a - center_b
    shrunk = np.maximum(np.abs(offset) - threshold * (size_a + size_b), 0) * np.sign(offset)
    if np.all(np.abs(shrunk) < 1e-3):
        return set()
    dx, dy = shrunk / np.linalg.norm(offset)
    found = set()
    if dx < -0.5:
        found.add("left of")
    if dx > 0.5:
        found.add("right of")
    if dy < -0.5:
        found.add("above")
    if dy > 0.5:
        found.add("below")
    return found


def box_relation(relation: str, a: Detection, b: Detection) -> bool:
    """Whether ``a`` is ``relation`` ``b`` by GenEval's box rule (``relative_position``)."""
    return relation in relative_position(a.box, b.box)


def clauses(
    spec: Spec,
    detections: Sequence[Any],
    *,
    relation: Callable[[str, Any, Any], bool] = box_relation,
    any_color: bool = False,
    exact_count: bool = True,
    label_of: Callable[[Any], str] = lambda d: d.label,
) -> list[bool]:
    """The clauses of ``spec`` evaluated on ``detections`` (module docstring for the order).

    ``detections`` are the ones that count (after ``keep_confident`` for a real detector),
    ranked: "the top N" of a class are its first N in this order.

    Args:
        spec: The prompt's requirements.
        detections: Records with a ``color`` attribute and a label read by ``label_of``.
        relation: ``relation(rel, a, b)``: whether detection ``a`` is ``rel`` detection ``b``.
        any_color: False: the top N of the class must all have the colour (GenEval); True: at
            least N of them anywhere in the list (GenEval-mini).
        exact_count: True: a count N > 1 needs exactly N (GenEval's include + exclude); False:
            at least N.
        label_of: The class of a detection.

    Raises:
        ValueError: a position's target is not an object of the spec.
    """
    found = [[d for d in detections if label_of(d) == r.name] for r in spec.objects]
    out: list[bool] = []
    matched: list[bool] = []  # GenEval's "matched": enough of the class, colour right
    for req, ds in zip(spec.objects, found, strict=True):
        out.append(bool(ds))
        if req.count > 1:
            out.append(len(ds) == req.count if exact_count else len(ds) >= req.count)
        ok = len(ds) >= req.count
        if req.color is not None:
            pool = ds if any_color else ds[: req.count]
            has = sum(d.color == req.color for d in pool) >= req.count
            out.append(has)
            ok = ok and has
        matched.append(ok)
    for i, req in enumerate(spec.objects):
        if req.position is None:
            continue
        rel, target = req.position
        if not 0 <= target < len(spec.objects) or target == i:
            raise ValueError(f"position target {target} is not another object of {spec}")
        holds = matched[i] and matched[target]
        if holds:
            tops = found[target][: spec.objects[target].count]
            holds = all(relation(rel, a, b) for a in found[i][: req.count] for b in tops)
        out.append(holds)
    return out


def partial_score(held: Sequence[bool]) -> float:
    """The fraction of clauses that hold (the reward), in [0, 1]."""
    return sum(held) / len(held)


def score(
    spec: Spec,
    detections: Sequence[Detection],
    *,
    threshold: float = THRESHOLD,
    counting_threshold: float = COUNTING_THRESHOLD,
    max_objects: int = MAX_OBJECTS,
) -> tuple[bool, float]:
    """(correct, partial) of GenEval's rules on a real detector's raw ``detections``."""
    kept = keep_confident(
        detections,
        spec.category,
        threshold=threshold,
        counting_threshold=counting_threshold,
        max_objects=max_objects,
    )
    held = clauses(spec, kept)
    return all(held), partial_score(held)
