"""``--set KEY=VALUE`` overrides of a typed config: dotted keys reach nested configs, values are
parsed as the field's type, and what cannot be set is refused in one line naming the key.

Works on any frozen dataclass (``spotlight.config.Config`` and its sections); no Ray, no torch.
"""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any


def _shown(text: str) -> str:
    """``text`` as typed, or its repr where it would not print on one line."""
    return text if text.isprintable() else repr(text)


def apply_overrides(cfg: Any, items: list[str]) -> Any:
    """``cfg`` with ``KEY=VALUE`` overrides applied: dotted keys reach nested configs
    (``grpo.learning_rate=3e-5``, ``exploration.mode=spot``). Values are parsed as the field's
    type (``none`` for an optional field; JSON for a dict). Unknown keys and values that do not
    parse are refused, naming the keys that exist."""
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(
                f"--set {_shown(item)}: expected KEY=VALUE, e.g. grpo.learning_rate=3e-5"
            )
        cfg = _override(cfg, key.split("."), value, _shown(key))
    return cfg


def _override(obj: Any, path: list[str], value: str, key: str) -> Any:
    names = {f.name for f in dataclasses.fields(obj)}
    if path[0] not in names:
        raise ValueError(
            f"--set {key}: {type(obj).__name__} has no field {path[0]!r}; "
            f"its fields: {', '.join(sorted(names))}"
        )
    current = getattr(obj, path[0])
    if len(path) > 1:
        if not dataclasses.is_dataclass(current):
            raise ValueError(f"--set {key}: {path[0]!r} is not a nested config")
        new = _override(current, path[1:], value, key)
    else:
        if dataclasses.is_dataclass(current):
            raise ValueError(f"--set {key}: {path[0]!r} is a section; set one of its fields")
        hint = typing.get_type_hints(type(obj))[path[0]]
        new = _parse_value(hint, value, key)
    return dataclasses.replace(obj, **{path[0]: new})


def _parse_value(hint: Any, value: str, key: str) -> Any:
    args = typing.get_args(hint)
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        if value.lower() in ("none", "null"):
            return None
        hint = next(a for a in args if a is not type(None))
    try:
        if hint is bool:
            if value.lower() not in ("true", "false", "1", "0"):
                raise ValueError(value)
            return value.lower() in ("true", "1")
        if hint is float:
            number = float(value)
            if not math.isfinite(number):  # nan passes every `x <= 0` check
                raise ValueError(value)
            return number
        if hint in (int, str):
            return hint(value)
        if typing.get_origin(hint) is dict or hint is dict:
            parsed = json.loads(value)
            if not isinstance(parsed, dict):
                raise ValueError(value)
            return parsed
    except ValueError:
        name = "finite float" if hint is float else getattr(hint, "__name__", str(hint))
        raise ValueError(f"--set {key}={_shown(value)}: not a valid {name}") from None
    raise ValueError(f"--set {key}: fields of type {hint} cannot be set from the command line")
