"""What a GenEval prompt asks for, as data: GenEval's colours, categories and relations, and a
prompt's ``Spec`` (its category and the objects it asks for, each a ``Requirement``).

The prompt lists (:mod:`.geneval`, :mod:`.geneval_mini`) are written in these terms and the
scoring rules (``spotlight.rewards.geneval_rules``) read them.
"""

from __future__ import annotations

from dataclasses import dataclass

COLORS = ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white")
"""GenEval's ten colours (``COLORS`` in evaluate_images.py and create_prompts.py)."""
CATEGORIES = ("single_object", "two_object", "counting", "colors", "position", "color_attr")
"""GenEval's six categories (its ``tag``), in GenEval's order."""
RELATIONS = ("left of", "right of", "above", "below")
"""GenEval's four relations; ``a <relation> b`` reads "A is <relation> B"."""
INVERSE = {"left of": "right of", "right of": "left of", "above": "below", "below": "above"}
"""``a <r> b`` says the same as ``b <INVERSE[r]> a``."""


@dataclass(frozen=True)
class Requirement:
    """One object that a prompt asks for (one ``include`` entry of GenEval's metadata).

    Attributes:
        name: The object class (GenEval's object name, or GenEval-mini's shape).
        count: How many (counting prompts); 1 otherwise.
        color: The colour it must have, or None.
        position: ``(relation, target)``: this object is ``relation`` the spec's object number
            ``target``; or None.
    """

    name: str
    count: int = 1
    color: str | None = None
    position: tuple[str, int] | None = None


@dataclass(frozen=True)
class Spec:
    """What a prompt asks for: its GenEval category and the objects, in prompt order."""

    category: str
    objects: tuple[Requirement, ...]
