"""GenEval-mini: GenEval's six compositional prompt categories in a 32x32 world of flat shapes.

The world: a black background and up to four objects, each a ``circle``, ``square``,
``triangle`` (upright: apex at the top, base at the bottom) or ``ring`` (a circle with a hole),
7-12 px across, in one of five pure colors, fully inside the image, with at least
``MARGIN`` px of background between bounding boxes. No anti-aliasing: every object pixel is
exactly its palette color. The prompts follow GenEval's wording ("a photo of ...") and fit the
tiny text encoder's 47 bytes. The detector and the scoring live in
``spotlight.rewards.geneval``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

SIZE = 32
"""Image height and width in pixels."""
BACKGROUND = (0, 0, 0)
PALETTE: dict[str, tuple[int, int, int]] = {
    "red": (255, 0, 0),
    "green": (0, 255, 0),
    "blue": (0, 0, 255),
    "yellow": (255, 255, 0),
    "white": (255, 255, 255),
}
"""Color name -> its one RGB value (corners of the RGB cube: >= 255 apart, and from black)."""
SHAPES = ("circle", "square", "triangle", "ring")
PLURALS = {shape: shape + "s" for shape in SHAPES}
COUNT_WORDS = {2: "two", 3: "three", 4: "four"}
RELATIONS = ("left of", "right of", "above", "below")
CATEGORIES = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
"""GenEval's six categories, in GenEval's order."""
MAX_PROMPT_BYTES = 47
"""The tiny policy's byte-level text encoder reads at most this many UTF-8 bytes."""
MIN_OBJECT, MAX_OBJECT = 7, 12
"""Object size range (bounding box side) in pixels."""
MARGIN = 2
"""Minimum background gap between two objects' bounding boxes, in pixels."""
POSITION_MIN_OFFSET = 6.0
"""Rendered position relations: centroid offset along the axis >= this, across <= half of it."""
SPLIT_SEED = 20261201
"""Fixes the splits: changing it changes both prompt sets (bump the task version then)."""
VAL_FRACTION = 0.25
"""Share of each category's prompts held out for validation (at least one per category)."""
PREFIX = "a photo of "


@dataclass(frozen=True)
class ObjectSpec:
    """One object named by a prompt: its shape and, when the prompt gives one, its color."""

    shape: str
    color: str | None = None


@dataclass(frozen=True)
class PromptSpec:
    """What a prompt asks for.

    Attributes:
        category: One of ``CATEGORIES``.
        objects: One object (single_object, counting, colors) or two (the others).
        count: How many of ``objects[0]`` (counting); 1 otherwise.
        relation: For position prompts, where ``objects[0]`` is relative to ``objects[1]``.
    """

    category: str
    objects: tuple[ObjectSpec, ...]
    count: int = 1
    relation: str | None = None


def _phrase(obj: ObjectSpec) -> str:
    return f"a {obj.color} {obj.shape}" if obj.color else f"a {obj.shape}"


def format_prompt(spec: PromptSpec) -> str:
    """The canonical prompt text of ``spec`` (``parse(format_prompt(s)) == s``)."""
    if spec.category == "counting":
        return f"{PREFIX}{COUNT_WORDS[spec.count]} {PLURALS[spec.objects[0].shape]}"
    if spec.category == "position":
        a, b = spec.objects
        return f"{PREFIX}{_phrase(a)} {spec.relation} {_phrase(b)}"
    return PREFIX + " and ".join(_phrase(o) for o in spec.objects)


def _bad(prompt: str, why: str) -> ValueError:
    return ValueError(
        f"GenEval-mini prompt {prompt!r} is outside the grammar: {why}. Expected one of "
        "'a photo of a <shape>', 'a photo of a <shape> and a <shape>', "
        "'a photo of <two|three|four> <shape>s', 'a photo of a <color> <shape>', "
        "'a photo of a <shape> <left of|right of|above|below> a <shape>', "
        "'a photo of a <color> <shape> and a <color> <shape>' with shapes "
        f"{'/'.join(SHAPES)}, colors {'/'.join(PALETTE)}"
    )


def _parse_object(prompt: str, phrase: str) -> ObjectSpec:
    words = phrase.split(" ")
    if words[0] != "a" or len(words) not in (2, 3):
        raise _bad(prompt, f"{phrase!r} is not 'a <shape>' or 'a <color> <shape>'")
    if words[-1] not in SHAPES:
        raise _bad(prompt, f"unknown shape {words[-1]!r}")
    if len(words) == 3 and words[1] not in PALETTE:
        raise _bad(prompt, f"unknown color {words[1]!r}")
    return ObjectSpec(words[-1], words[1] if len(words) == 3 else None)


def _parse_body(prompt: str, body: str) -> PromptSpec:
    words = body.split(" ")
    counts = {w: n for n, w in COUNT_WORDS.items()}
    if words[0] in counts:
        shape = {p: s for s, p in PLURALS.items()}.get(" ".join(words[1:]))
        if shape is None:
            raise _bad(prompt, f"{' '.join(words[1:])!r} is not a plural shape")
        return PromptSpec("counting", (ObjectSpec(shape),), count=counts[words[0]])
    for rel in RELATIONS:
        if f" {rel} " in body:
            a, b = (_parse_object(prompt, p) for p in body.split(f" {rel} ", 1))
            if a.color or b.color:
                raise _bad(prompt, "position prompts name no colors")
            return PromptSpec("position", (a, b), relation=rel)
    objects = tuple(_parse_object(prompt, p) for p in body.split(" and "))
    if len(objects) > 2:
        raise _bad(prompt, "at most two objects")
    colored = sum(o.color is not None for o in objects)
    if colored not in (0, len(objects)):
        raise _bad(prompt, "either every object has a color or none does")
    if len(objects) == 1:
        return PromptSpec("colors" if colored else "single_object", objects)
    return PromptSpec("color_attr" if colored else "two_object", objects)


def parse(prompt: str) -> PromptSpec:
    """The spec of a GenEval-mini prompt.

    Raises:
        ValueError: naming the prompt and the expected forms, when it is outside the grammar
            (including two objects of the same shape, or color attribution with one color).
    """
    if not isinstance(prompt, str) or not prompt.startswith(PREFIX):
        raise _bad(prompt, f"it must start with {PREFIX!r}")
    spec = _parse_body(prompt, prompt[len(PREFIX) :])
    if len(spec.objects) == 2:
        a, b = spec.objects
        if a.shape == b.shape:
            raise _bad(prompt, "the two objects must be different shapes")
        if a.color is not None and a.color == b.color:
            raise _bad(prompt, "color attribution needs two different colors")
    return spec


def all_specs() -> list[PromptSpec]:
    """The whole prompt space, in a fixed order (by category)."""
    colors = list(PALETTE)
    pairs = [(a, b) for a in SHAPES for b in SHAPES if a != b]
    specs = [PromptSpec("single_object", (ObjectSpec(s),)) for s in SHAPES]
    specs += [PromptSpec("two_object", (ObjectSpec(a), ObjectSpec(b))) for a, b in pairs]
    specs += [
        PromptSpec("counting", (ObjectSpec(s),), count=n) for s in SHAPES for n in COUNT_WORDS
    ]
    specs += [PromptSpec("colors", (ObjectSpec(s, c),)) for s in SHAPES for c in colors]
    specs += [
        PromptSpec("position", (ObjectSpec(a), ObjectSpec(b)), relation=r)
        for a, b in pairs
        for r in RELATIONS
    ]
    specs += [
        PromptSpec("color_attr", (ObjectSpec(a, ca), ObjectSpec(b, cb)))
        for a, b in pairs
        for ca in colors
        for cb in colors
        if ca != cb
    ]
    return specs


_INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}


def meaning(spec: PromptSpec) -> tuple:
    """A hashable key, equal for prompts that ask for the same scene.

    "a circle and a square" means "a square and a circle"; "a circle left of a square" means
    "a square right of a circle".
    """
    if spec.category == "position":
        a, b = spec.objects
        rel = spec.relation or ""
        return ("position", *min([(a, rel, b), (b, _INVERSE[rel], a)], key=repr))
    if len(spec.objects) == 2:
        return (spec.category, frozenset(spec.objects))
    return (spec.category, spec.objects, spec.count)


@functools.lru_cache(maxsize=1)
def _splits() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(train, val): per category, a seeded permutation; the first VAL_FRACTION go to val."""
    rng = np.random.default_rng(SPLIT_SEED)
    train: list[str] = []
    val: list[str] = []
    prompts = [format_prompt(s) for s in all_specs()]
    for cat in CATEGORIES:
        group = [p for p, s in zip(prompts, all_specs(), strict=True) if s.category == cat]
        order = rng.permutation(len(group))
        n_val = max(1, round(VAL_FRACTION * len(group)))
        val += [group[i] for i in order[:n_val]]
        train += [group[i] for i in order[n_val:]]
    return tuple(train), tuple(val)


def shape_mask(shape: str, size: int) -> np.ndarray:
    """The bool ``(size, size)`` pixel mask of ``shape`` (no anti-aliasing)."""
    c = np.arange(size) + 0.5 - size / 2  # pixel-center offsets from the box center
    dy, dx = c[:, None], c[None, :]
    r2 = dx**2 + dy**2
    outer = size / 2 - 0.15  # a hair inside the box: rounder discs (fill 0.74-0.81)
    if shape == "square":
        return np.ones((size, size), dtype=bool)
    if shape == "circle":
        return r2 <= outer**2
    if shape == "ring":
        inner = size / 2 - max(2, round(size * 0.3))
        return (r2 <= outer**2) & (r2 >= inner**2)
    if shape == "triangle":
        return np.abs(dx) <= (np.arange(size)[:, None] + 1) / 2
    raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)}")


@dataclass(frozen=True)
class Placed:
    """A rendered object: shape, color, size and top-left corner (x0, y0)."""

    shape: str
    color: str
    size: int
    x0: int
    y0: int

    def centroid(self) -> tuple[float, float]:
        """The (x, y) pixel centroid of the object's mask."""
        ys, xs = np.nonzero(shape_mask(self.shape, self.size))
        return self.x0 + float(xs.mean()), self.y0 + float(ys.mean())


def _apart(a: Placed, b: Placed) -> bool:
    return (
        a.x0 + a.size + MARGIN <= b.x0
        or b.x0 + b.size + MARGIN <= a.x0
        or a.y0 + a.size + MARGIN <= b.y0
        or b.y0 + b.size + MARGIN <= a.y0
    )


def relation_offsets(
    relation: str, a: tuple[float, float], b: tuple[float, float]
) -> tuple[float, float]:
    """(along, across): A's centroid offset from B's in the relation's direction, and across it."""
    dx, dy = a[0] - b[0], a[1] - b[1]
    along = {"left of": -dx, "right of": dx, "above": -dy, "below": dy}[relation]
    across = dy if relation in ("left of", "right of") else dx
    return along, across


def _holds_clearly(spec: PromptSpec, objs: list[Placed]) -> bool:
    if spec.relation is None:
        return True
    along, across = relation_offsets(spec.relation, objs[0].centroid(), objs[1].centroid())
    return along >= POSITION_MIN_OFFSET and abs(across) <= 0.5 * along


def _objects_to_draw(spec: PromptSpec, rng: np.random.Generator) -> list[tuple[str, str]]:
    colors = list(PALETTE)
    wanted = [spec.objects[0]] * spec.count if spec.category == "counting" else spec.objects
    return [(o.shape, o.color or colors[int(rng.integers(len(colors)))]) for o in wanted]


def place(spec: PromptSpec, rng: np.random.Generator, max_tries: int = 10_000) -> list[Placed]:
    """Random sizes and positions for ``spec``'s objects: inside, apart, relation clear."""
    todo = _objects_to_draw(spec, rng)
    for _ in range(max_tries):
        objs: list[Placed] = []
        for shape, color in todo:
            size = int(rng.integers(MIN_OBJECT, MAX_OBJECT + 1))
            x0, y0 = (int(v) for v in rng.integers(0, SIZE - size + 1, 2))
            obj = Placed(shape, color, size, x0, y0)
            if not all(_apart(obj, o) for o in objs):
                break
            objs.append(obj)
        if len(objs) == len(todo) and _holds_clearly(spec, objs):
            return objs
    msg = f"could not place the objects of {format_prompt(spec)!r} in {max_tries} tries"
    raise RuntimeError(msg)  # pragma: no cover


def draw(objs: list[Placed]) -> np.ndarray:
    """The uint8 ``(SIZE, SIZE, 3)`` image of ``objs`` on the background."""
    img = np.empty((SIZE, SIZE, 3), dtype=np.uint8)
    img[:] = BACKGROUND
    for o in objs:
        window = img[o.y0 : o.y0 + o.size, o.x0 : o.x0 + o.size]
        window[shape_mask(o.shape, o.size)] = PALETTE[o.color]
    return img


class GenEvalMini:
    """The GenEval-mini task (see the module docstring); scored by the ``geneval`` reward."""

    name = "geneval-mini"
    height = SIZE
    width = SIZE
    channels = 3
    reward = "geneval"

    def prompts(self, split: str) -> list[str]:
        """The fixed 'train' or 'val' prompts (disjoint; val holds every category)."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        train, val = _splits()
        return list(train if split == "train" else val)

    def sample_prompt(self, rng: np.random.Generator) -> str:
        """A uniformly random training prompt."""
        train, _ = _splits()
        return train[int(rng.integers(len(train)))]

    def render(self, prompt: str, rng: np.random.Generator) -> np.ndarray:
        """A uint8 ``(32, 32, 3)`` image with exactly the objects ``prompt`` names.

        Sizes and positions are random; objects without a color in the prompt get a random
        palette color each; a position relation holds with ``POSITION_MIN_OFFSET`` px to spare.
        """
        return draw(place(parse(prompt), rng))
