"""``Config.prompt_file``: a run's prompts from a file instead of the task's splits."""

from __future__ import annotations

import dataclasses
import json

import pytest

from spotlight.config import Config
from spotlight.prompts import read_prompt_file
from spotlight.recipes import get_recipe
from spotlight.training.loop import prompt_sets
from spotlight.training.run_folder import preflight_run


def _write(path, doc) -> str:
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_prompt_file_replaces_the_tasks_splits_capped_by_the_pool_sizes(tmp_path):
    train = [f'a sign that says "{w}"' for w in ("CAT", "DOG", "OWL")]
    val = ['a sign that says "EMU"']
    path = _write(tmp_path / "p.json", {"train": train, "val": val, "note": "ignored"})
    cfg = dataclasses.replace(get_recipe("tiny-ocr"), prompt_file=path)
    assert prompt_sets(cfg) == (train, val)
    capped = dataclasses.replace(cfg, num_train_prompts=2)
    assert prompt_sets(capped) == (train[:2], val)
    assert prompt_sets(dataclasses.replace(cfg, prompt_file=None))[0][0] != train[0]
    # it is saved with the run's config and read back
    assert Config.from_dict(cfg.to_dict()).prompt_file == path


@pytest.mark.parametrize(
    "doc, message",
    [
        ({"train": ["a"]}, "'val' must be a non-empty list"),
        ({"train": [], "val": ["b"]}, "'train' must be a non-empty list"),
        ({"train": ["a", 3], "val": ["b"]}, "'train' must be a non-empty list"),
        (["a", "b"], "'train' must be a non-empty list"),
        ({"train": ["a", "b"], "val": ["b"]}, "1 prompt\\(s\\) in train and val: 'b'"),
    ],
)
def test_a_bad_prompt_file_is_refused_before_the_run(tmp_path, doc, message):
    path = _write(tmp_path / "p.json", doc)
    with pytest.raises(ValueError, match=message):
        read_prompt_file(path)
    cfg = dataclasses.replace(get_recipe("tiny-ocr"), prompt_file=path)
    with pytest.raises(ValueError, match=message):
        preflight_run(cfg, tmp_path / "run", resume=False)


def test_a_missing_prompt_file_is_refused_before_the_run(tmp_path):
    cfg = dataclasses.replace(get_recipe("tiny-ocr"), prompt_file=str(tmp_path / "none.json"))
    with pytest.raises(FileNotFoundError, match=r"none\.json: no such file"):
        preflight_run(cfg, tmp_path / "run", resume=False)
