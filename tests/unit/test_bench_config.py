"""The exploration bench reuses a run folder only for the very config it ran."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotlight.bench import _check_same_config
from spotlight.recipes import get_recipe


def test_a_run_written_before_a_new_config_field_is_still_reused(tmp_path):
    cfg = get_recipe("tiny-smoke")
    old = cfg.to_dict()
    del old["reward_model"]  # written by a version without the field
    (tmp_path / "config.json").write_text(json.dumps(old))
    _check_same_config(tmp_path, cfg)  # the field's default: the same config


def test_a_run_of_another_config_is_refused(tmp_path):
    cfg = get_recipe("tiny-smoke")
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    _check_same_config(tmp_path, cfg)
    other = dataclasses.replace(cfg, seed=cfg.seed + 1)
    with pytest.raises(ValueError, match="another config"):
        _check_same_config(tmp_path, other)
    _check_same_config(tmp_path / "absent", other)  # nothing there yet: fine
