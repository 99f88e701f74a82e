"""OCR in scenes: prompts asking a pretrained text-to-image model for quoted text in a scene.

Prompts in the style of Flow-GRPO's OCR prompt set, e.g. ``A vintage poster on a brick wall with
the words "OPEN LATE" in bold letters``: one of ``TEMPLATES`` (signs, posters, t-shirts, neon,
book covers, mugs, chalkboards, street signs, storefronts, labels...) around a text of one to
three words of ``WORDS`` (at most ``MAX_CHARS`` characters), in capitals or title case. The
``ocr-model`` reward (spotlight.rewards.ocr_model) reads the image with GOT-OCR 2.0 and scores
it against the quoted text.

The splits are drawn once from ``SPLIT_SEED``: the validation texts are the first ``NUM_VAL``
distinct texts of a seeded stream, and the training prompts are the next ``NUM_TRAIN`` distinct
prompts of that stream whose text is no validation text. Texts are compared as the reward
compares them (lowercased, without spaces), so no validation target is ever trained on, in any
template. There is no ground-truth renderer: the task is for pretrained models (Qwen-Image).
"""

from __future__ import annotations

import functools

import numpy as np

from spotlight.tasks.text import normalize

VERSION = 1
"""Version of the prompt set; bump it with any change to the lists, seed or sizes below."""
SPLIT_SEED = 20261201
"""Fixes the splits: changing it changes every prompt (bump ``VERSION`` then)."""
NUM_TRAIN = 20_000
NUM_VAL = 1_024
MAX_CHARS = 20
"""Longest text, spaces included."""
WORD_COUNT_P = (0.15, 0.55, 0.30)
"""Chances that a text has one, two or three words."""
UPPER_P = 0.7
"""Chance that a text is in capitals (else title case); the reward ignores case."""

TEMPLATES = (
    'A vintage poster on a brick wall with the words "{}" in bold letters',
    'A neon sign glowing in a dark alley that reads "{}"',
    'A white t-shirt on a hanger printed with "{}"',
    'A hardcover book on a wooden table, its cover titled "{}"',
    'A ceramic coffee mug on a kitchen counter with "{}" written on it',
    'A chalkboard outside a cafe with "{}" written in white chalk',
    'A green street sign on a pole at an intersection that says "{}"',
    'A storefront with a large sign above the door reading "{}"',
    'A glass jar on a pantry shelf with a handwritten label that says "{}"',
    'A wooden signpost in a misty forest pointing to "{}"',
    'A birthday cake decorated with icing that spells "{}"',
    'A billboard over a highway at sunset advertising "{}"',
    'A movie poster with the title "{}" in large letters',
    'A protest sign held up in a crowd reading "{}"',
    'A cardboard box in a warehouse stamped with "{}" on its side',
    'A laptop lid covered in stickers, the largest one saying "{}"',
    'A colorful graffiti mural on a concrete wall spelling "{}"',
    'A bottle of wine with an elegant label that reads "{}"',
    'A doormat in front of a blue door with the words "{}"',
    'A banner hanging across a city street that says "{}"',
    'A handwritten note on yellow paper that says "{}"',
    'A baseball cap embroidered with "{}" on the front',
    'A food truck at a street fair with "{}" painted on its side',
    'A vintage typewriter with a sheet of paper showing "{}"',
    'A computer monitor on a desk displaying the text "{}"',
    'A cereal box on a supermarket shelf branded "{}"',
    'A sandy beach with "{}" written in the sand',
    'A bronze plaque on a stone building engraved with "{}"',
    'A hot air balloon in a clear sky with "{}" printed on it',
    'A glossy magazine cover with the headline "{}"',
    'A wooden sign at a farm stand that says "{}"',
    'A soccer jersey hanging in a locker room with "{}" across the back',
    'A greeting card standing on a table that reads "{}"',
    'A subway station wall with a tiled sign that reads "{}"',
    'An empty road with the word "{}" painted in white letters',
    'A canvas tote bag with "{}" printed in black letters',
    'A frosty window with "{}" drawn in the frost',
    'A pizza box on a table with the logo "{}"',
    'A lit marquee above a theater entrance announcing "{}"',
    'A rubber stamp print on an envelope that says "{}"',
)
"""Scenes, each with one ``"{}"`` slot for the text (and no other double quotes)."""

_WORD_TEXT = """
able above acid actor after again agent alarm album alive alpha amber angel apple april arch
arena arrow atlas audio autumn award baby bacon badge baker banana band bank barn basic beach
bean bear beauty bell berry best bike bird black blade blank blaze bloom blue board boat bold
bonus book boost boss brain brave bread brick bridge bright brown brush cabin cactus cafe cake
call calm camp candy canyon capital captain card cargo carrot castle cat cedar center chain
chair champion chance cherry chess chief chill city class clean clear clock cloud club coast
cocoa coffee cold comet cookie cool copper coral corner cotton country cozy craft crane cream
crown crystal cup daily dance dark dawn deal deep delta desert design diamond dinner dog door
dragon dream drive drum eagle early earth east echo edge eight electric elite ember empire
energy escape event exit express fair falcon family farm fast feast fiber field fire first fish
five flash flat flower fly focus forest forever fork fossil fox free fresh friday friend frog
frost fruit fuel future galaxy game garden gate gentle giant gift ginger glass global glow gold
golden good grace grand grape grass gravity great green grill group grow guide happy harbor
harvest hawk heart heat hello hero hidden high hill historic home honey hope horizon horse hot
hotel house hunter ice idea island ivory jazz jelly jewel joy juice jump jungle just keep key
kind king kitchen kite lake lamp land laser late lemon level library light lime lion little
live local lodge lost lotus love lucky lunar lunch magic main maple market marble meadow metro
midnight mighty milk mint mirror modern moment monday money moon morning motor mountain museum
music native nature navy neon new next night noble noodle north nova oak ocean olive omega
open orange orbit organic owl pacific palace palm panda paper paradise park party pasta peace
peach pearl pepper piano pilot pine pink pixel pizza planet plaza plum polar pond pop premium
prime pure purple quest quick quiet rabbit radio rain rainbow rapid raven ready rebel red relax
river road robot rock rocket rose royal ruby rush safe sage sail salt sand saturn school sea
secret seed seven shadow shark shine shop silent silver simple sky sleep slow smile smooth snow
soda solar soul sound south space spark spice spirit spring square star steel stone storm
story street strong studio sugar summer sun sunday super sweet swift table taco tango taxi tea
tiger time toast today tokyo tomato tower town toy track trail train travel treasure tree
tribe tropical true tulip turbo twin union unity urban valley vanilla velvet venus victory
village vintage violet vision voice voyage wagon walk warm water wave welcome west whale wild
willow wind window winter wise wolf wonder wood world yellow young zebra zero zone
"""
WORDS = tuple(_WORD_TEXT.split())
"""The vocabulary of the texts: common English words, letters only (shown in capitals or title
case)."""


@functools.cache
def _splits() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The (train, val) prompt tuples (see the module docstring)."""
    rng = np.random.default_rng(SPLIT_SEED)
    val: list[str] = []
    val_keys: set[str] = set()
    train: list[str] = []
    seen: set[str] = set()
    while len(train) < NUM_TRAIN:
        for template, text in _stream(rng, (NUM_TRAIN + NUM_VAL) // 2):
            key = normalize(text)
            if len(val) < NUM_VAL:
                if key not in val_keys:
                    val_keys.add(key)
                    val.append(template.format(text))
                continue
            prompt = template.format(text)
            if key not in val_keys and prompt not in seen:
                seen.add(prompt)
                train.append(prompt)
                if len(train) == NUM_TRAIN:
                    break
    return tuple(train), tuple(val)


def _stream(rng: np.random.Generator, size: int) -> list[tuple[str, str]]:
    """Up to ``size`` random (template, text) pairs; texts longer than ``MAX_CHARS`` are
    dropped. Drawn in bulk (a few numpy calls): the splits take about 0.1 s."""
    counts = rng.choice(len(WORD_COUNT_P), size=size, p=WORD_COUNT_P) + 1
    picks = rng.integers(0, len(WORDS), size=(size, len(WORD_COUNT_P)))
    upper = rng.random(size) < UPPER_P
    templates = rng.integers(0, len(TEMPLATES), size=size)
    out = []
    for count, row, caps, template in zip(
        counts.tolist(), picks.tolist(), upper.tolist(), templates.tolist(), strict=True
    ):
        words = [WORDS[i] for i in row[:count]]
        text = " ".join(w.upper() if caps else w.capitalize() for w in words)
        if len(text) <= MAX_CHARS:
            out.append((TEMPLATES[template], text))
    return out


class OcrScenes:
    """The OCR prompt set for pretrained models (see the module docstring).

    ``height`` and ``width`` are nominal: the recipes set the sampled size (512 or 1280).
    """

    name = "ocr"
    height = 512
    width = 512
    channels = 3
    reward = "ocr-model"

    def prompts(self, split: str) -> list[str]:
        """The fixed 'train' (``NUM_TRAIN``) or 'val' (``NUM_VAL``) prompts.

        Raises:
            ValueError: ``split`` is neither 'train' nor 'val'.
        """
        if split not in ("train", "val"):
            raise ValueError(f"split must be 'train' or 'val', got {split!r}")
        train, val = _splits()
        return list(train if split == "train" else val)

    def sample_prompt(self, rng: np.random.Generator) -> str:
        """A uniformly random training prompt (never one with a validation text)."""
        train, _ = _splits()
        return train[int(rng.integers(len(train)))]

    def render(self, prompt: str, rng: np.random.Generator) -> np.ndarray:
        """Not available: there is no ground-truth renderer of scenes.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(
            f"task {self.name!r} is a prompt set for pretrained models (e.g. Qwen-Image): it has "
            "no ground-truth renderer to pretrain a tiny model on; use 'ocr-mini' for that"
        )
