"""The GenEval-mini reward: a rule-based shape detector and GenEval's scoring rules.

Detection: every pixel is read as a palette color blended over the background and kept when
it is mostly that color (so the soft edges of a generated image keep their color, while mixes
of two colors and dim smudges are background); 8-connected components of one color, of at least
``MIN_AREA`` pixels, are objects; a shape comes from the component's descriptors (a hole:
ring; bounding-box fill ~1: square; mass in the lower part: triangle; fill ~0.78: circle),
else ``unknown``.

Scoring, per category, as a list of clauses (the prompt is correct when all hold; the reward
is the fraction that hold):

- single_object: [shape present]
- two_object: [A present, B present]
- counting: [shape present, exactly N of the shape]
- colors: [shape present, an object of the shape has the color]
- position: [A present, B present, the relation holds between the largest A and largest B]
- color_attr: [A present, an A has color A, B present, a B has color B]

Extra objects are allowed (as in GenEval) except in counting, where the count is exact. The
clauses are evaluated by the rule code shared with the real GenEval reward
(spotlight.rewards.geneval_rules), with this world's centroid relation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spotlight.rewards import geneval_rules as rules
from spotlight.rewards.simple import check_images
from spotlight.tasks.geneval_mini import (
    BACKGROUND,
    PALETTE,
    SIZE,
    PromptSpec,
    parse,
    relation_offsets,
)

COLOR_NAMES = tuple(PALETTE)
_BG = np.array(BACKGROUND, dtype=np.float32)
_DIRS = np.array(list(PALETTE.values()), dtype=np.float32) - _BG
"""Row i: palette color COLOR_NAMES[i] minus the background."""
MIN_ALPHA = 0.6
"""An object pixel is at least this much of its color over the background ..."""
MAX_RESIDUAL = 80.0
"""... and at most this RGB distance from that blend (palette colors are >= 255 apart)."""
MIN_AREA = 15
"""Components smaller than this (pixels) are noise; the smallest rendered object has 28."""
MAX_SIDE = 16
"""Components wider or taller than this are ``unknown`` (rendered objects are 7-12 px)."""
MIN_HOLE = 3
"""Enclosed background pixels that make a ring (the smallest rendered ring has 9)."""
POSITION_MIN_OFFSET = 3.0
"""A relation holds when A's centroid is >= this many px from B's in its direction ..."""
POSITION_CONE = 0.5
"""... and that offset is > this fraction of the centroid distance (GenEval's 60-degree cone)."""
SQUARE_FILL = 0.88
"""Bounding-box fill of a square (rendered 1.0, 3x3-blurred >= 0.92; discs <= 0.82)."""
_N8 = ((-1, -1), (-1, 0), (-1, 1), (0, -1), (0, 1), (1, -1), (1, 0), (1, 1))
_N4 = ((-1, 0), (0, -1), (0, 1), (1, 0))


@dataclass(frozen=True)
class Detection:
    """A detected object.

    Attributes:
        shape: One of the task's shapes, or ``"unknown"``.
        color: A palette color name.
        centroid: (x, y) pixel centroid.
        bbox: (x0, y0, x1, y1), end-exclusive.
        area: Pixels in the component.
    """

    shape: str
    color: str
    centroid: tuple[float, float]
    bbox: tuple[int, int, int, int]
    area: int


def segment_colors(image: np.ndarray) -> np.ndarray:
    """Per-pixel color index: 0 for background or no clear color, i for COLOR_NAMES[i - 1].

    A pixel ``p`` is read as palette color ``c`` blended over the background ``b``:
    ``p - b ~ alpha (c - b)``. It takes the color with the smallest residual, and is an object
    pixel when ``alpha >= MIN_ALPHA`` and the residual is at most ``MAX_RESIDUAL``: a soft edge
    keeps its color, a mix of two colors or a gray smudge is background.
    """
    p = image.astype(np.float32).reshape(-1, 3) - _BG
    alpha = np.clip(p @ _DIRS.T / (_DIRS**2).sum(axis=1), 0.0, 1.0)  # (pixels, colors)
    resid = np.linalg.norm(p[:, None, :] - alpha[..., None] * _DIRS[None], axis=-1)
    best = resid.argmin(axis=1)
    rows = np.arange(len(p))
    ok = (alpha[rows, best] >= MIN_ALPHA) & (resid[rows, best] <= MAX_RESIDUAL)
    return np.where(ok, best + 1, 0).reshape(image.shape[:2])


def components(labels: np.ndarray, connectivity: int = 8) -> np.ndarray:
    """Connected components of equal nonzero ``labels``.

    Returns an int array: -1 off the labels, else the smallest flat index in the component.
    Min-label propagation with pointer jumping, in numpy (a few ms for 32x32).
    """
    h, w = labels.shape
    big = h * w
    lab = np.where(labels > 0, np.arange(big).reshape(h, w), big)
    padded = np.pad(labels, 1)
    steps = _N8 if connectivity == 8 else _N4
    same = [padded[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w] == labels for dy, dx in steps]
    same = [s & (labels > 0) for s in same]
    while True:
        lp = np.pad(lab, 1, constant_values=big)
        new = lab.copy()
        for (dy, dx), ok in zip(steps, same, strict=True):
            np.minimum(new, np.where(ok, lp[1 + dy : 1 + dy + h, 1 + dx : 1 + dx + w], big), new)
        flat = new.ravel()
        on = flat < big
        flat[on] = flat[flat[on]]  # pointer jumping: a label is a pixel of the same component
        if np.array_equal(new, lab):
            return np.where(lab < big, lab, -1)
        lab = new


def holes(mask: np.ndarray) -> np.ndarray:
    """The background pixels that the bool ``mask`` 4-encloses (unreachable from outside)."""
    outside = np.pad(~mask, 1, constant_values=True).astype(np.int8)
    comp = components(outside, connectivity=4)[1:-1, 1:-1]
    return (comp >= 0) & (comp != 0)  # label 0: the component of the padded border


def _outline_shape(mask: np.ndarray) -> str:
    h, w = mask.shape
    fill = mask.sum() / (h * w)
    low = (np.nonzero(mask)[0].mean() + 0.5) / h  # 0.5: symmetric top to bottom; triangle ~0.63
    if fill >= SQUARE_FILL and abs(low - 0.5) < 0.04:
        return "square"
    if low >= 0.57 and 0.45 <= fill <= 0.8:
        return "triangle"
    if abs(low - 0.5) < 0.04 and 0.5 <= fill < SQUARE_FILL:
        return "circle"
    return "unknown"


def classify_shape(mask: np.ndarray) -> str:
    """The shape of one component, from its bool mask cropped to its bounding box.

    Too elongated or larger than ``MAX_SIDE`` is ``unknown`` (a frame-filling blob is no
    square). A hole of ``MIN_HOLE`` pixels or more makes a ring when the filled outline is a circle;
    otherwise bounding-box fill and the height of the centroid tell square (fill ~1),
    triangle (centroid low, fill ~0.6) and circle (fill ~0.78).
    """
    h, w = mask.shape
    if not 0.6 <= w / h <= 1.67 or max(h, w) > MAX_SIDE:
        return "unknown"
    hole = holes(mask)
    if hole.sum() >= MIN_HOLE:
        return "ring" if _outline_shape(mask | hole) == "circle" else "unknown"
    return _outline_shape(mask)


def detect(image: np.ndarray) -> list[Detection]:
    """The objects in a uint8 ``(H, W, 3)`` image, largest first."""
    colors = segment_colors(image)
    comp = components(colors)
    found = []
    for label in np.unique(comp[comp >= 0]):
        ys, xs = np.nonzero(comp == label)
        if len(ys) < MIN_AREA:
            continue
        x0, y0, x1, y1 = int(xs.min()), int(ys.min()), int(xs.max()) + 1, int(ys.max()) + 1
        mask = comp[y0:y1, x0:x1] == label
        color = COLOR_NAMES[int(colors.flat[label]) - 1]
        centroid = (float(xs.mean()), float(ys.mean()))
        found.append(Detection(classify_shape(mask), color, centroid, (x0, y0, x1, y1), len(ys)))
    return sorted(found, key=lambda d: -d.area)


def relation_holds(relation: str, a: Detection, b: Detection) -> bool:
    """Whether ``a`` is ``relation`` (left of, right of, above, below) ``b``, by centroids."""
    along, across = relation_offsets(relation, a.centroid, b.centroid)
    norm = float(np.hypot(along, across))
    return along >= POSITION_MIN_OFFSET and along > POSITION_CONE * norm


def requirements(spec: PromptSpec) -> rules.Spec:
    """``spec`` in the shared rules' terms: shapes as names, the relation on the first object."""
    objects = tuple(
        rules.Requirement(
            o.shape,
            spec.count,
            o.color,
            (spec.relation, 1) if spec.relation is not None and i == 0 else None,
        )
        for i, o in enumerate(spec.objects)
    )
    return rules.Spec(spec.category, objects)


def clauses(spec: PromptSpec, found: list[Detection]) -> list[bool]:
    """The clauses of ``spec``'s category (module docstring), evaluated on ``found``.

    GenEval's rules (spotlight.rewards.geneval_rules) with this world's relation predicate
    (``relation_holds`` on the largest A and B: ``found`` is largest first), any object of a
    shape carrying a colour, and exact counts.
    """
    return rules.clauses(
        requirements(spec),
        found,
        relation=relation_holds,
        any_color=True,
        exact_count=True,
        label_of=lambda d: d.shape,
    )


def score(image: np.ndarray, prompt: str) -> tuple[bool, float]:
    """(correct, partial) for one uint8 ``(32, 32, 3)`` image and its GenEval-mini prompt.

    Raises:
        ValueError: for a wrong image shape or dtype, or a prompt outside the grammar.
    """
    _check_image(image, "score")
    held = clauses(parse(prompt), detect(image))
    return all(held), sum(held) / len(held)


def _check_image(image: np.ndarray, who: str) -> None:
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8:
        raise ValueError(f"GenEval-mini {who}: image must be a uint8 numpy array")
    if image.shape != (SIZE, SIZE, 3):
        raise ValueError(
            f"GenEval-mini {who}: image must be ({SIZE}, {SIZE}, 3), got {image.shape}"
        )


class GenEvalReward:
    """GenEval-mini partial score: the fraction of the prompt's clauses that hold, in [0, 1];
    with ``exact``, GenEval's own binary score: 1 when every clause holds, else 0."""

    def __init__(self, exact: bool = False) -> None:
        self.exact = exact

    def __call__(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        """Scores, float32 ``(N,)``, for uint8 ``(N, 32, 32, 3)`` images."""
        check_images(images, prompts, "GenEvalReward")
        if images.shape[1:] != (SIZE, SIZE, 3):
            raise ValueError(
                f"GenEvalReward: images must be (N, {SIZE}, {SIZE}, 3), got {images.shape}"
            )
        specs = [parse(p) for p in prompts]  # all prompts checked before any detection
        out = [clauses(s, detect(img)) for s, img in zip(specs, images, strict=True)]
        if self.exact:
            return np.array([float(all(c)) for c in out], dtype=np.float32)
        return np.array([sum(c) / len(c) for c in out], dtype=np.float32)

    def score(self, image: np.ndarray, prompt: str) -> tuple[bool, float]:
        """(correct, partial) for one image: correct when every clause holds."""
        return score(image, prompt)
