"""The OCR prompt set for pretrained models: deterministic, disjoint splits of quoted texts."""

from __future__ import annotations

import numpy as np
import pytest

from spotlight.rewards import REWARDS
from spotlight.rewards.ocr import quoted_target
from spotlight.tasks import get_task
from spotlight.tasks import ocr_scenes as scenes
from spotlight.tasks.ocr_scenes import OcrScenes
from spotlight.tasks.text import normalize


def split_prompt(prompt: str) -> tuple[str, str]:
    """The (template, text) that ``prompt`` was made of; fails when it matches no template."""
    for template in scenes.TEMPLATES:
        before, after = template.split("{}")
        if prompt.startswith(before) and prompt.endswith(after) and len(prompt) > len(template):
            return template, prompt[len(before) : len(prompt) - len(after)]
    raise AssertionError(f"{prompt!r} matches no template")


def test_task_attributes() -> None:
    task = get_task("ocr")
    assert isinstance(task, OcrScenes)
    assert (task.name, task.reward, task.channels) == ("ocr", "ocr-model", 3)
    assert (task.height, task.width) == (512, 512)
    assert task.reward in REWARDS
    assert scenes.VERSION == 1


def test_sizes_and_unique_prompts() -> None:
    train, val = OcrScenes().prompts("train"), OcrScenes().prompts("val")
    assert len(train) == len(set(train)) == scenes.NUM_TRAIN
    assert len(val) == len(set(val)) == scenes.NUM_VAL
    assert not set(train) & set(val)


def test_deterministic_even_when_regenerated() -> None:
    first = OcrScenes().prompts("train"), OcrScenes().prompts("val")
    scenes._splits.cache_clear()
    again = OcrScenes().prompts("train"), OcrScenes().prompts("val")
    assert first == again
    # pinned: a change of the lists, the seed or the sampling must bump VERSION
    assert first[0][0] == 'A wooden signpost in a misty forest pointing to "Morning Grill"'
    assert first[1][0] == 'A glossy magazine cover with the headline "Open Heat"'


def test_prompts_returns_a_copy() -> None:
    task = OcrScenes()
    task.prompts("val").clear()
    assert len(task.prompts("val")) == scenes.NUM_VAL


def test_validation_texts_disjoint_from_training_texts() -> None:
    train = {quoted_target(p) for p in OcrScenes().prompts("train")}
    val = {quoted_target(p) for p in OcrScenes().prompts("val")}
    assert len(val) == scenes.NUM_VAL  # distinct texts, not only distinct prompts
    assert not train & val
    assert len(train) > 10_000  # texts repeat across templates, but not much


@pytest.mark.parametrize("split", ["train", "val"])
def test_every_prompt_round_trips_to_its_text(split: str) -> None:
    vocabulary = set(scenes.WORDS)
    counts = {1: 0, 2: 0, 3: 0}
    templates = set()
    for prompt in OcrScenes().prompts(split):
        template, text = split_prompt(prompt)
        words = text.split(" ")
        assert quoted_target(prompt) == normalize(text) == "".join(words).lower()
        assert 1 <= len(words) <= 3 and len(text) <= scenes.MAX_CHARS
        assert all(w.lower() in vocabulary for w in words)
        assert text.isupper() or text == text.title()
        counts[len(words)] += 1
        templates.add(template)
    assert all(counts.values())  # one, two and three words all occur
    assert templates == set(scenes.TEMPLATES)


def test_lists_are_well_formed() -> None:
    assert 30 <= len(scenes.TEMPLATES) <= 40
    assert len(set(scenes.TEMPLATES)) == len(scenes.TEMPLATES)
    assert all(t.count('"{}"') == 1 and t.count('"') == 2 for t in scenes.TEMPLATES)
    assert 300 <= len(scenes.WORDS) <= 500 and len(set(scenes.WORDS)) == len(scenes.WORDS)
    assert all(w.isascii() and w.isalpha() and w.islower() for w in scenes.WORDS)


def test_sample_prompt_draws_training_prompts_only() -> None:
    task = OcrScenes()
    train, val = set(task.prompts("train")), set(task.prompts("val"))
    rng = np.random.default_rng(0)
    draws = [task.sample_prompt(rng) for _ in range(500)]
    assert all(p in train and p not in val for p in draws)
    assert len(set(draws)) > 450  # uniform over 20,000
    assert task.sample_prompt(np.random.default_rng(0)) == draws[0]  # the rng decides


def test_render_is_not_available() -> None:
    with pytest.raises(NotImplementedError, match="pretrained"):
        OcrScenes().render(OcrScenes().prompts("val")[0], np.random.default_rng(0))


def test_bad_split_raises() -> None:
    with pytest.raises(ValueError, match="'train' or 'val'"):
        OcrScenes().prompts("test")
