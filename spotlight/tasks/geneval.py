"""GenEval: the compositional prompt set of Ghosh et al. 2023 for pretrained text-to-image models.

The grammar is GenEval's (djghosh13/geneval, ``prompts/create_prompts.py``): its six
categories over its 80 object names (COCO's classes, three renamed), its ten colours, counts
two to four and four relations, in its templates:

- single_object: "a photo of a bench"
- two_object: "a photo of a bench and a sports ball"
- counting: "a photo of two cats" (2-4, as GenEval's ``max_count=4``)
- colors: "a photo of a pink car" (no colour for "person", as in GenEval)
- position: "a photo of a dog right of a teddy bear"
- color_attr: "a photo of a purple wine glass and a black apple" (two classes, two colours)

"a" becomes "an" before a vowel, as in GenEval. Plurals are English ("benches", "knives",
"sheep", "people"); GenEval's own file spells them by appending "s"/"es" ("benchs",
"knifes"), and ``parse`` reads those spellings too, so GenEval's 553 prompts parse. The prompt
lists are generated from the grammar with a fixed seed (GenEval's metadata file is not used);
the reward is ``geneval-model`` (spotlight.rewards.geneval_model). There is no renderer: this
is a prompt set for pretrained models.
"""

from __future__ import annotations

import functools

import numpy as np

from spotlight.tasks.geneval_spec import (
    CATEGORIES,
    COLORS,
    INVERSE,
    RELATIONS,
    Requirement,
    Spec,
)

VERSION = 1
"""Bump when the prompt lists change (grammar, seed, sizes)."""
SPLIT_SEED = 20261215
"""Fixes both prompt lists: changing it changes them (bump ``VERSION`` then)."""
OBJECT_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "computer mouse",
    "tv remote", "computer keyboard", "cell phone", "microwave", "oven", "toaster", "sink",
    "refrigerator", "book", "clock", "vase", "scissors", "teddy bear", "hair drier",
    "toothbrush",
)  # fmt: skip
"""GenEval's 80 object names (``prompts/object_names.txt``), in its order: COCO's classes with
"mouse", "remote" and "keyboard" as "computer mouse", "tv remote", "computer keyboard"."""
UNCOLORED = ("person",)
"""Classes that GenEval's colour prompts never name."""
COUNT_WORDS = {2: "two", 3: "three", 4: "four"}
"""GenEval's counts (``rng.integers(2, 4, endpoint=True)``) and their words."""
_IRREGULAR = {
    "person": "people",
    "sheep": "sheep",
    "skis": "skis",
    "scissors": "scissors",
    "broccoli": "broccoli",
    "knife": "knives",
    "computer mouse": "computer mice",
}


def _regular_plural(name: str) -> str:
    return name + "es" if name.endswith(("s", "sh", "ch", "x", "z")) else name + "s"


PLURALS = {name: _IRREGULAR.get(name) or _regular_plural(name) for name in OBJECT_NAMES}
"""Object name -> its English plural (the counting prompts' spelling)."""
GENEVAL_PLURALS = {n: n + ("es" if n.endswith("s") else "s") for n in OBJECT_NAMES}
"""Object name -> GenEval's spelling of its plural (``make_plural``), read by ``parse``."""
GENEVAL_COUNTS = {
    "single_object": 80,
    "two_object": 99,
    "counting": 80,
    "colors": 94,
    "position": 100,
    "color_attr": 100,
}
"""Prompts per category in GenEval's 553-prompt evaluation set; ``sample_prompt`` draws
categories in these proportions."""
VAL_COUNTS = {k: (n + 1) // 2 for k, n in GENEVAL_COUNTS.items()}
"""Validation prompts per category: half of GenEval's (40/50/40/47/50/50, 277 in all), so the
split keeps GenEval's proportions while half the single-object prompts stay for training."""
COLOR_ATTR_TRAIN = 20_000
"""Training color_attr prompts drawn from the 554,580 (the other categories are complete)."""
PREFIX = "a photo of "
_SINGULAR = {p: n for table in (GENEVAL_PLURALS, PLURALS) for n, p in table.items()}


def article(phrase: str) -> str:
    """``phrase`` with GenEval's article: "an" before a vowel letter, else "a"."""
    return f"an {phrase}" if phrase[0] in "aeiou" else f"a {phrase}"


def _phrase(req: Requirement) -> str:
    return article(f"{req.color} {req.name}" if req.color else req.name)


def format_prompt(spec: Spec) -> str:
    """The canonical prompt text of ``spec`` (``parse(format_prompt(s)) == s``).

    Raises:
        ValueError: ``spec`` is not one of the grammar's (see ``parse``).
    """
    try:
        text = _format(spec)
    except (AttributeError, IndexError, KeyError, TypeError):
        text = "?"
    if text == "?" or parse_or_none(text) != spec:
        raise ValueError(f"GenEval: {spec} is not a spec of the grammar (it reads as {text!r})")
    return text


def _format(spec: Spec) -> str:
    objs = spec.objects
    if spec.category == "counting":
        return f"{PREFIX}{COUNT_WORDS[objs[0].count]} {PLURALS[objs[0].name]}"
    if spec.category == "position" and objs[0].position is not None:
        return f"{PREFIX}{_phrase(objs[0])} {objs[0].position[0]} {_phrase(objs[1])}"
    return PREFIX + " and ".join(_phrase(o) for o in objs)


def _bad(prompt: object, why: str) -> ValueError:
    return ValueError(
        f"GenEval prompt {prompt!r} is outside the grammar: {why}. Expected one of "
        "'a photo of a/an <object>', 'a photo of a/an <object> and a/an <object>', "
        "'a photo of <two|three|four> <objects>', 'a photo of a/an <color> <object>', "
        "'a photo of a/an <object> <left of|right of|above|below> a/an <object>', "
        "'a photo of a/an <color> <object> and a/an <color> <object>', with GenEval's 80 object "
        f"names (spotlight.tasks.geneval.OBJECT_NAMES) and colors {'/'.join(COLORS)}"
    )


def _parse_object(prompt: str, phrase: str) -> Requirement:
    art, _, rest = phrase.partition(" ")
    if art not in ("a", "an") or not rest:
        raise _bad(prompt, f"{phrase!r} is not 'a/an <object>' or 'a/an <color> <object>'")
    color, _, name = rest.partition(" ")
    if rest in OBJECT_NAMES:
        req = Requirement(rest)
    elif color in COLORS and name in OBJECT_NAMES:
        req = Requirement(name, color=color)
    else:
        raise _bad(prompt, f"unknown object {rest!r}")
    if article(rest) != phrase:
        raise _bad(prompt, f"{phrase!r} takes {article(rest).split(' ')[0]!r}")
    return req


def _parse_body(prompt: str, body: str) -> Spec:
    first, _, rest = body.partition(" ")
    counts = {w: n for n, w in COUNT_WORDS.items()}
    if first in counts:
        if rest not in _SINGULAR:
            raise _bad(prompt, f"{rest!r} is not the plural of an object name")
        return Spec("counting", (Requirement(_SINGULAR[rest], count=counts[first]),))
    for rel in RELATIONS:
        if f" {rel} " in body:
            a, b = (_parse_object(prompt, p) for p in body.split(f" {rel} ", 1))
            if a.color or b.color:
                raise _bad(prompt, "position prompts name no colors")
            return Spec("position", (Requirement(a.name, position=(rel, 1)), b))
    objects = tuple(_parse_object(prompt, p) for p in body.split(" and "))
    if len(objects) > 2:
        raise _bad(prompt, "at most two objects")
    colored = sum(o.color is not None for o in objects)
    if colored not in (0, len(objects)):
        raise _bad(prompt, "either every object has a color or none does")
    if len(objects) == 1:
        return Spec("colors" if colored else "single_object", objects)
    return Spec("color_attr" if colored else "two_object", objects)


def parse(prompt: str) -> Spec:
    """The spec of a GenEval prompt (this grammar's, or GenEval's own spelling of plurals).

    Raises:
        ValueError: naming the prompt and the expected forms, when it is outside the grammar
            (including two objects of one class, color attribution with one color, or a
            colored person, which GenEval never asks for).
    """
    if not isinstance(prompt, str) or not prompt.startswith(PREFIX):
        raise _bad(prompt, f"it must start with {PREFIX!r}")
    spec = _parse_body(prompt, prompt[len(PREFIX) :])
    if len(spec.objects) == 2:
        a, b = spec.objects
        if a.name == b.name:
            raise _bad(prompt, "the two objects must be different classes")
        if a.color is not None and a.color == b.color:
            raise _bad(prompt, "color attribution needs two different colors")
    if any(o.color is not None and o.name in UNCOLORED for o in spec.objects):
        raise _bad(prompt, f"GenEval gives no color to {'/'.join(UNCOLORED)}")
    return spec


def parse_or_none(prompt: str) -> Spec | None:
    """``parse(prompt)``, or None for a prompt outside the grammar."""
    try:
        return parse(prompt)
    except ValueError:
        return None


def meaning(spec: Spec) -> tuple:
    """A hashable key, equal for prompts that ask for the same scene.

    "a cat and a dog" means "a dog and a cat" (also with colours); "a cat left of a dog" means
    "a dog right of a cat".
    """
    objs = spec.objects
    if spec.category == "position" and objs[0].position is not None:
        rel = objs[0].position[0]
        a, b = objs[0].name, objs[1].name
        return ("position", *min((a, rel, b), (b, INVERSE[rel], a)))
    if len(objs) == 2:
        return (spec.category, frozenset((o.name, o.color) for o in objs))
    return (spec.category, objs)


def _pair_text(a: str, b: str, ca: str | None = None, cb: str | None = None) -> str:
    return f"{PREFIX}{article(f'{ca} {a}' if ca else a)} and {article(f'{cb} {b}' if cb else b)}"


def _split_list(prompts: list[str], n_val: int, rng: np.random.Generator) -> tuple[list, list]:
    order = rng.permutation(len(prompts))
    return [prompts[i] for i in order[n_val:]], [prompts[i] for i in order[:n_val]]


def _split_pairs(category: str, n_val: int, rng: np.random.Generator) -> tuple[list, list]:
    """two_object / position: val meanings drawn, training = every other ordered prompt.

    A meaning is an unordered pair of classes ``i < j`` (with, for position, the relation of
    ``i`` to ``j``); each val meaning gets one of its two wordings at random.
    """
    names = OBJECT_NAMES
    rels = (None,) if category == "two_object" else RELATIONS
    keys = [(i, j, r) for i in range(len(names)) for j in range(i + 1, len(names)) for r in rels]
    picked = [keys[int(k)] for k in rng.choice(len(keys), n_val, replace=False)]
    held = set(picked)

    def text(i: int, j: int, rel: str | None) -> str:
        a, b = names[i], names[j]
        return _pair_text(a, b) if rel is None else f"{PREFIX}{article(a)} {rel} {article(b)}"

    def key(i: int, j: int, rel: str | None) -> tuple:
        return (i, j, rel) if i < j else (j, i, rel and INVERSE[rel])

    val = []
    for i, j, rel in picked:
        flip = rng.random() < 0.5
        val.append(text(j, i, rel and INVERSE[rel]) if flip else text(i, j, rel))
    train = [
        text(i, j, rel)
        for i in range(len(names))
        for j in range(len(names))
        for rel in rels
        if i != j and key(i, j, rel) not in held
    ]
    return train, val


def _split_color_attr(n_val: int, rng: np.random.Generator) -> tuple[list, list]:
    """color_attr: ``n_val`` val meanings drawn first, then ``COLOR_ATTR_TRAIN`` distinct
    prompts of other meanings (a meaning: the unordered pair of (class, colour))."""
    names = [n for n in OBJECT_NAMES if n not in UNCOLORED]
    n = 4 * (n_val + COLOR_ATTR_TRAIN)  # ~0.2% of draws repeat an earlier one
    a, b = rng.integers(len(names), size=n), rng.integers(len(names) - 1, size=n)
    ca, cb = rng.integers(len(COLORS), size=n), rng.integers(len(COLORS) - 1, size=n)
    b, cb = b + (b >= a), cb + (cb >= ca)  # b != a, cb != ca
    val: list[str] = []
    held: set[tuple] = set()
    train: dict[tuple, None] = {}
    for draw in zip(a.tolist(), ca.tolist(), b.tolist(), cb.tolist(), strict=True):
        key = min(draw, draw[2:] + draw[:2])
        if key in held:
            continue
        if len(val) < n_val:
            held.add(key)
            val.append(draw)
        elif len(train) < COLOR_ATTR_TRAIN:
            train[draw] = None
        else:
            break

    def text(i: int, ci: int, j: int, cj: int) -> str:
        return _pair_text(names[i], names[j], COLORS[ci], COLORS[cj])

    return [text(*d) for d in train], [text(*d) for d in val]


@functools.lru_cache(maxsize=1)
def _splits() -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Category -> (train prompts, val prompts), each category from its own seeded stream."""
    out = {}
    colorable = [n for n in OBJECT_NAMES if n not in UNCOLORED]
    for index, cat in enumerate(CATEGORIES):
        rng = np.random.default_rng([SPLIT_SEED, index])
        n_val = VAL_COUNTS[cat]
        if cat == "single_object":
            train, val = _split_list([PREFIX + article(n) for n in OBJECT_NAMES], n_val, rng)
        elif cat == "counting":
            prompts = [
                f"{PREFIX}{w} {PLURALS[n]}" for n in OBJECT_NAMES for w in COUNT_WORDS.values()
            ]
            train, val = _split_list(prompts, n_val, rng)
        elif cat == "colors":
            prompts = [PREFIX + article(f"{c} {n}") for n in colorable for c in COLORS]
            train, val = _split_list(prompts, n_val, rng)
        elif cat == "color_attr":
            train, val = _split_color_attr(n_val, rng)
        else:
            train, val = _split_pairs(cat, n_val, rng)
        out[cat] = (tuple(train), tuple(val))
    return out


class GenEvalTask:
    """The GenEval prompt set (module docstring), scored by the ``geneval-model`` reward.

    The splits are disjoint by meaning (``meaning``: no scene is asked for in both, in either
    wording); validation has ``VAL_COUNTS`` prompts per category (GenEval's proportions), and
    training holds every other prompt of the grammar but for color_attr, of which it holds
    ``COLOR_ATTR_TRAIN``. ``height`` and ``width`` are nominal (GenEval's images are 512 px).
    """

    name = "geneval"
    height = 512
    width = 512
    channels = 3
    reward = "geneval-model"

    def prompts(self, split: str) -> list[str]:
        """The fixed 'train' or 'val' prompts, by category in GenEval's order."""
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        column = 0 if split == "train" else 1
        return [p for cat in CATEGORIES for p in _splits()[cat][column]]

    def sample_prompt(self, rng: np.random.Generator) -> str:
        """A training prompt: a category in ``GENEVAL_COUNTS`` proportions, then a uniform
        prompt of it."""
        weights = np.array([GENEVAL_COUNTS[c] for c in CATEGORIES], dtype=np.float64)
        category = CATEGORIES[int(rng.choice(len(CATEGORIES), p=weights / weights.sum()))]
        train = _splits()[category][0]
        return train[int(rng.integers(len(train)))]

    def render(self, prompt: str, rng: np.random.Generator) -> np.ndarray:
        """Not available: GenEval is a prompt set for pretrained models.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            "GenEval is a prompt set for pretrained models: it has no ground-truth renderer "
            "(use the geneval-mini task for a tiny model trained on rendered images)"
        )
