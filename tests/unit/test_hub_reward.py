"""ClipScoreReward on a tiny random CLIP saved offline and loaded through from_pretrained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tiny_hf.clip import save_tiny_clip

from spotlight.rewards.hub import ClipScoreReward, find_clip_folder

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_clip(tmp_path_factory.mktemp("tiny-clip"))


@pytest.fixture(scope="module")
def reward(clip_folder: Path) -> ClipScoreReward:
    return ClipScoreReward(clip_folder, batch_size=3)


def batch(n: int, channels: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 32, 64, channels), dtype=np.uint8)


PROMPTS = ['a sign that says "ABC"', "a red cat", 'a sign that says "ABC"', "ab ab", "x"]


@pytest.mark.parametrize("channels", [1, 3])
def test_shape_range_and_determinism(reward: ClipScoreReward, channels: int) -> None:
    images = batch(5, channels)
    out = reward(images, PROMPTS)
    assert out.shape == (5,) and out.dtype == np.float32
    assert np.all((out >= 0) & (out <= 1))
    np.testing.assert_array_equal(out, reward(images, PROMPTS))
    assert len(np.unique(out)) > 1  # images and prompts differ, so do scores


def test_mapping_is_affine_in_the_cosine(reward: ClipScoreReward, clip_folder: Path) -> None:
    images = batch(5, 3, seed=1)
    cos = reward.cosine(images, PROMPTS)
    assert np.all(np.abs(cos) <= 1 + 1e-6)
    np.testing.assert_allclose(reward(images, PROMPTS), (cos + 1) / 2, atol=1e-6)
    tight = ClipScoreReward(clip_folder, low=0.0, high=0.5)
    np.testing.assert_allclose(tight(images, PROMPTS), np.clip(cos / 0.5, 0, 1), atol=1e-6)


def test_scores_do_not_depend_on_batching(reward: ClipScoreReward, clip_folder: Path) -> None:
    images = batch(5, 1, seed=2)
    one_pass = ClipScoreReward(clip_folder, batch_size=64)
    np.testing.assert_allclose(reward(images, PROMPTS), one_pass(images, PROMPTS), atol=1e-5)
    assert reward(images[:0], []).shape == (0,)


def test_offline_tokenizer_is_byte_level_bpe(reward: ClipScoreReward) -> None:
    tok = reward.tokenizer
    pieces = tok.convert_ids_to_tokens(tok('a "ABC"')["input_ids"])
    assert pieces == ["<|startoftext|>", "a</w>", '"</w>', "ab", "c</w>", '"</w>', "<|endoftext|>"]
    assert tok.unk_token_id not in tok("a sign")["input_ids"][1:-1]


def test_checks_images(reward: ClipScoreReward) -> None:
    with pytest.raises(ValueError, match="uint8"):
        reward(batch(2, 3).astype(np.float32), ["a", "b"])
    with pytest.raises(ValueError, match=r"\(N, H, W, 1\|3\)"):
        reward(batch(2, 3)[..., 0], ["a", "b"])
    with pytest.raises(ValueError, match="2 images but 1 prompts"):
        reward(batch(2, 3), ["a"])
    with pytest.raises(ValueError, match="low < high"):
        ClipScoreReward(Path("unused"), low=1.0, high=1.0)


def test_missing_folder_says_how_to_get_the_weights(tmp_path: Path, clip_folder: Path) -> None:
    missing = tmp_path / "no-such-clip"
    with pytest.raises(FileNotFoundError, match="hf download openai/clip") as e:
        ClipScoreReward(missing)
    assert str(missing) in str(e.value) and "does not exist" in str(e.value)
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "config.json").write_text((clip_folder / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match=r"lacks weights.*preprocessor_config\.json"):
        find_clip_folder(partial)


def test_default_path_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPOTLIGHT_CLIP_MODEL", str(tmp_path / "from-env"))
    with pytest.raises(FileNotFoundError, match="from-env"):
        ClipScoreReward()
