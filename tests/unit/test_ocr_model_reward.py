"""OcrModelReward on a tiny random GOT-OCR 2.0 saved offline and loaded through from_pretrained."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_hf.got_ocr import save_tiny_ocr_model

from spotlight.rewards import build_reward, preflight_reward
from spotlight.rewards.ocr import ocr_score, quoted_target
from spotlight.rewards.ocr_model import (
    DEFAULT_OCR_PATH,
    OcrModelReward,
    find_ocr_folder,
    image_tokens,
    ocr_model_path,
    preflight_ocr_model,
)

NEW_TOKENS = 6
"""Tokens read per image in these tests (greedy decoding costs one forward per token)."""
PROMPTS = [
    'A neon sign that reads "OPEN LATE"',
    'A mug with "Coffee" written on it',
    "A poster with the words “HELLO WORLD”",
    'A storefront sign reading "SALE"',
    'A t-shirt printed with "Blue Moon"',
]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: tiny matrices gain nothing from more, and a busy machine's cores
    are contended (the figure is the same on an idle one)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def ocr_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_ocr_model(tmp_path_factory.mktemp("tiny-got-ocr") / "model")


@pytest.fixture(scope="module")
def reward(ocr_folder: Path) -> OcrModelReward:
    return OcrModelReward(ocr_folder, batch_size=3, max_new_tokens=NEW_TOKENS)


def batch(n: int, channels: int = 3, seed: int = 0, side: int = 48) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, side, side, channels), dtype=np.uint8)


def test_loads_the_folder_as_a_real_one(reward: OcrModelReward) -> None:
    assert reward.device == torch.device("cpu") and reward.dtype == torch.float32
    assert reward.model.dtype == torch.float32 and not reward.model.training
    assert not any(p.requires_grad for p in reward.model.parameters())
    assert type(reward.model).__name__ == "GotOcr2ForConditionalGeneration"
    assert type(reward.processor).__name__ == "GotOcr2Processor"
    assert reward.num_image_tokens == 16  # 64 px / 4 px patches = 16 -> 8 -> 4: 4 x 4


def test_image_tokens_of_the_real_vision_tower() -> None:
    from transformers import GotOcr2VisionConfig

    assert image_tokens(GotOcr2VisionConfig()) == 256  # 1024 px / 16 px patches


@pytest.mark.parametrize("channels", [1, 3])
def test_shape_dtype_range(reward: OcrModelReward, channels: int) -> None:
    out = reward(batch(5, channels), PROMPTS)
    assert out.shape == (5,) and out.dtype == np.float32
    assert np.all((out >= 0) & (out <= 1))


def test_recognise_reads_text_that_depends_on_the_image(reward: OcrModelReward) -> None:
    texts = reward.recognise(batch(5, side=64))
    assert len(texts) == 5 and all(isinstance(t, str) for t in texts)
    assert len(set(texts)) > 1  # the random model reads different images differently
    assert reward.recognise(batch(0)) == []
    assert reward(batch(0), []).shape == (0,)


def test_deterministic_and_batch_size_invariant(ocr_folder: Path) -> None:
    images = batch(5, seed=1, side=64)
    one = OcrModelReward(ocr_folder, batch_size=1, max_new_tokens=NEW_TOKENS)
    three = OcrModelReward(ocr_folder, batch_size=3, max_new_tokens=NEW_TOKENS)
    texts = one.recognise(images)
    assert texts == three.recognise(images) == one.recognise(images)
    np.testing.assert_array_equal(one(images, PROMPTS), three(images, PROMPTS))


def test_max_new_tokens_bounds_what_is_read(ocr_folder: Path) -> None:
    images = batch(3, seed=2, side=64)
    short = OcrModelReward(ocr_folder, max_new_tokens=1).recognise(images)
    longer = OcrModelReward(ocr_folder, max_new_tokens=NEW_TOKENS).recognise(images)
    assert sum(map(len, short)) < sum(map(len, longer))


def test_score_is_flow_grpo_ocr_score_of_what_is_read(
    reward: OcrModelReward, monkeypatch: pytest.MonkeyPatch
) -> None:
    read = ["open late", "COFFE", "", "big SALE today", "Blue Noon"]
    monkeypatch.setattr(reward, "recognise", lambda images: list(read))
    out = reward(batch(5), PROMPTS)
    np.testing.assert_allclose(out, [1.0, 5 / 6, 0.0, 1.0, 7 / 8], rtol=1e-6)
    expected = [ocr_score(r, quoted_target(p)) for r, p in zip(read, PROMPTS, strict=True)]
    np.testing.assert_array_equal(out, np.float32(expected))


def test_prompt_without_quotes_raises(reward: OcrModelReward) -> None:
    with pytest.raises(ValueError, match="between double quotes"):
        reward(batch(2), ['a sign "OK"', "a sign with no quoted text"])


@pytest.mark.parametrize(
    ("images", "count", "match"),
    [
        (batch(2).astype(np.float32), 2, "uint8"),
        (batch(2).tolist(), 2, "uint8"),
        (batch(2)[0], 2, r"\(N, H, W, 1\|3\)"),
        (batch(2, channels=4), 2, r"\(N, H, W, 1\|3\)"),
        (batch(2), 3, "2 images but 3 prompts"),
    ],
)
def test_bad_images_raise(reward: OcrModelReward, images, count: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        reward(images, PROMPTS[:count])


def test_recognise_checks_images(reward: OcrModelReward) -> None:
    with pytest.raises(ValueError, match="uint8"):
        reward.recognise(batch(2).astype(np.int16))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 0}, "batch_size"),
        ({"batch_size": 2.0}, "batch_size"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"dtype": "int8"}, "dtype"),
        ({"dtype": "bfloat17"}, "dtype"),
    ],
)
def test_bad_arguments_raise(ocr_folder: Path, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        OcrModelReward(ocr_folder, **kwargs)


def test_dtype_by_name(ocr_folder: Path) -> None:
    reward = OcrModelReward(ocr_folder, device="cpu", dtype="bfloat16", max_new_tokens=2)
    assert reward.model.dtype == torch.bfloat16
    out = reward(batch(2), PROMPTS[:2])
    assert out.shape == (2,) and out.dtype == np.float32


def test_missing_folder_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        OcrModelReward(tmp_path / "nowhere")
    message = str(err.value)
    assert "does not exist" in message and "--reward-model" in message
    assert "hf download stepfun-ai/GOT-OCR-2.0-hf" in message
    assert "$SPOTLIGHT_OCR_MODEL" in message


@pytest.mark.parametrize(
    ("remove", "part"),
    [
        ("config.json", "config.json"),
        ("model.safetensors", "weights"),
        ("processor_config.json", "processor config"),
        ("tokenizer.json", "tokenizer"),
    ],
)
def test_missing_part_is_named(ocr_folder: Path, tmp_path: Path, remove: str, part: str) -> None:
    folder = shutil.copytree(ocr_folder, tmp_path / "model")
    (folder / remove).unlink()
    for check in (find_ocr_folder, preflight_ocr_model):
        with pytest.raises(FileNotFoundError, match=part) as err:
            check(folder)
        assert "--reward-model" in str(err.value) and f"lacks {part}" in str(err.value)


def test_preprocessor_config_is_accepted(ocr_folder: Path, tmp_path: Path) -> None:
    """Folders saved by transformers 4 (as on the Hub) hold preprocessor_config.json."""
    folder = shutil.copytree(ocr_folder, tmp_path / "model")
    (folder / "processor_config.json").rename(folder / "preprocessor_config.json")
    assert find_ocr_folder(folder) == folder


def test_another_model_folder_is_refused(ocr_folder: Path, tmp_path: Path) -> None:
    folder = shutil.copytree(ocr_folder, tmp_path / "model")
    (folder / "config.json").write_text('{"model_type": "clip"}')
    with pytest.raises(ValueError, match=r"'clip' model, not GOT-OCR 2\.0"):
        preflight_ocr_model(folder)


def test_path_from_the_environment(
    ocr_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPOTLIGHT_OCR_MODEL", raising=False)
    assert ocr_model_path() == DEFAULT_OCR_PATH
    assert ocr_model_path(tmp_path) == tmp_path
    monkeypatch.setenv("SPOTLIGHT_OCR_MODEL", str(ocr_folder))
    assert ocr_model_path() == str(ocr_folder)
    preflight_ocr_model()
    preflight_reward("ocr-model")
    monkeypatch.setenv("SPOTLIGHT_OCR_MODEL", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="SPOTLIGHT_OCR_MODEL"):
        preflight_reward("ocr-model")


def test_built_by_name(ocr_folder: Path) -> None:
    reward = build_reward("ocr-model", str(ocr_folder))
    assert isinstance(reward, OcrModelReward)
    assert reward.batch_size == 16 and reward.max_new_tokens == 32
