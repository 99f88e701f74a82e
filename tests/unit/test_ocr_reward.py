"""OcrReward: the Flow-GRPO formula by hand, then real Tesseract on clean 32x64 renders."""

from __future__ import annotations

import importlib.util
import pickle
import random
import shutil
import string
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from spotlight.rewards import build_reward
from spotlight.rewards.ocr import (
    OcrReward,
    binarize,
    levenshtein,
    ocr_score,
    parse_tsv,
    prepare,
    quoted_target,
    render_text,
)

HAS_TESSERACT = shutil.which("tesseract") is not None
HAS_TESSEROCR = importlib.util.find_spec("tesserocr") is not None
needs_tesseract = pytest.mark.skipif(not HAS_TESSERACT, reason="apt-get install tesseract-ocr")
needs_tesserocr = pytest.mark.skipif(
    not (HAS_TESSERACT and HAS_TESSEROCR), reason="needs tesserocr and tesseract-ocr's data"
)


@pytest.mark.parametrize(
    ("a", "b", "distance"),
    [
        ("", "", 0),
        ("abc", "", 3),
        ("", "abc", 3),
        ("abc", "abc", 0),
        ("abc", "abd", 1),
        ("abc", "acb", 2),
        ("kitten", "sitting", 3),
        ("flaw", "lawn", 2),
        ("gumbo", "gambol", 2),
        ("qxf", "xqxfy", 2),
        ("intention", "execution", 5),
    ],
)
def test_levenshtein_by_hand(a: str, b: str, distance: int) -> None:
    assert levenshtein(a, b) == distance == levenshtein(b, a)


@pytest.mark.parametrize(
    ("recognised", "target", "score"),
    [
        ("QXF", "qxf", 1.0),
        ("q x\tF\n", "QXF", 1.0),  # lowercase, whitespace removed on both sides
        ("sign: QXF!", "QXF", 1.0),  # the target is a substring
        ("QX", "QXF", 2 / 3),
        ("QAF", "QXF", 2 / 3),
        ("XF", "QXF", 2 / 3),
        ("ABCDEFG", "QXF", 0.0),  # distance 7 is capped at len(target)
        ("", "QXF", 0.0),
        ("   ", "QXF", 0.0),
    ],
)
def test_ocr_score_formula(recognised: str, target: str, score: float) -> None:
    assert ocr_score(recognised, target) == pytest.approx(score)


def test_quoted_target() -> None:
    assert quoted_target('a sign that says "Q X F"') == "qxf"
    assert quoted_target('"AB" then "CD"') == "ab"  # the first quoted text, as in Flow-GRPO
    assert quoted_target("a sign that says “Hi There”") == "hithere"
    for bad in ["a sign with no quotes", 'a sign that says ""', 'says "  "', 'says "QXF']:
        with pytest.raises(ValueError, match="no text between double quotes") as e:
            quoted_target(bad)
        assert repr(bad) in str(e.value)


def test_prepare_makes_dark_text_on_light_upscaled_and_padded() -> None:
    dark = render_text("AB", ink=255, paper=10)  # light text on dark
    image = prepare(dark, scale=4, resample="bicubic", border=8)
    assert image.mode == "L" and image.size == (64 * 4 + 64, 32 * 4 + 64)
    pixels = np.asarray(image)
    assert pixels[0, 0] == 245 and np.median(pixels) == 245  # inverted; border = background
    rgb = prepare(np.repeat(render_text("AB"), 3, axis=-1), scale=1, resample="nearest", border=0)
    np.testing.assert_array_equal(np.asarray(rgb), render_text("AB")[..., 0])


def test_parse_tsv_groups_words_by_page_and_drops_unconfident_ones() -> None:
    head = "level\tpage_num\tblock_num\tpar_num\tline_num\tword_num\tl\tt\tw\th\tconf\ttext"
    rows = [
        "1\t1\t0\t0\t0\t0\t0\t0\t9\t9\t-1\t",
        "5\t1\t1\t1\t1\t1\t0\t0\t9\t9\t91.5\tQX",
        "5\t1\t1\t1\t1\t2\t0\t0\t9\t9\t88.0\tF",
        "5\t2\t1\t1\t1\t1\t0\t0\t9\t9\t0.000000\ta",  # a blank page's guess
        "5\t3\t1\t1\t1\t1\t0\t0\t9\t9\t75.0\tZZ",
    ]
    assert parse_tsv("\n".join([head, *rows]), 4, 0.0) == ["QX F", "", "ZZ", ""]
    with pytest.raises(RuntimeError, match="page 3 of a 2-image list"):
        parse_tsv("\n".join([head, *rows]), 2, 0.0)


def words(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(string.ascii_uppercase) for _ in range(3)) for _ in range(n)]


def signs(ws: list[str]) -> list[str]:
    return [f'a sign that says "{w}"' for w in ws]


@pytest.fixture(scope="module")
def reward() -> Iterator[OcrReward]:
    if not HAS_TESSERACT:
        pytest.skip("apt-get install tesseract-ocr")
    with OcrReward(workers=2) as reward:
        yield reward


@needs_tesseract
def test_clean_renders_score_near_one_noise_and_wrong_words_near_zero(reward: OcrReward) -> None:
    ws = words(32, seed=0)
    clean = np.stack([render_text(w) for w in ws])
    assert clean.shape == (32, 32, 64, 1)
    out = reward(clean, signs(ws))
    assert out.shape == (32,) and out.dtype == np.float32
    assert np.all((out >= 0) & (out <= 1))
    assert out.mean() >= 0.9, reward.read(clean)
    noise = np.random.default_rng(0).integers(0, 256, clean.shape, dtype=np.uint8)
    assert reward(noise, signs(ws)).mean() <= 0.2
    assert reward(np.roll(clean, 1, axis=0), signs(ws)).mean() <= 0.2  # another word's sign
    assert reward(np.full_like(clean, 255), signs(ws)).max() == 0.0  # blank: nothing read


@needs_tesseract
def test_rgb_and_light_on_dark_read_too(reward: OcrReward) -> None:
    ws = words(16, seed=1)
    rgb = np.stack([np.repeat(render_text(w, ink=230, paper=30), 3, axis=-1) for w in ws])
    assert rgb.shape == (16, 32, 64, 3)
    assert reward(rgb, signs(ws)).mean() >= 0.9


@needs_tesseract
def test_parallel_reads_keep_order_and_match_serial(reward: OcrReward) -> None:
    ws = words(7, seed=2)
    images = np.stack([render_text(w) for w in ws])
    with OcrReward(workers=1) as serial:
        assert serial.read(images) == reward.read(images)
    with OcrReward(workers=5) as parallel:
        assert parallel.read(images) == reward.read(images)
    assert reward(images[:0], []).shape == (0,)
    clone = pickle.loads(pickle.dumps(reward))  # picklable for Ray: rebuilt from its arguments
    np.testing.assert_array_equal(clone(images, signs(ws)), reward(images, signs(ws)))
    clone.close()


@needs_tesserocr
def test_cli_backend_agrees_with_tesserocr() -> None:
    ws = words(8, seed=3)
    images = np.stack([render_text(w) for w in ws])
    with OcrReward(backend="cli", workers=2) as cli, OcrReward(backend="tesserocr") as lib:
        assert cli.backend == "cli" and lib.backend == "tesserocr"
        np.testing.assert_array_equal(cli(images, signs(ws)), lib(images, signs(ws)))
        assert cli(images, signs(ws)).mean() >= 0.9


@needs_tesseract
def test_uppercase_whitelist_is_an_option(reward: OcrReward) -> None:
    ws = words(8, seed=4)
    images = np.stack([render_text(w) for w in ws])
    with OcrReward(whitelist=string.ascii_uppercase, workers=1) as upper:
        assert all(set(t) <= set(string.ascii_uppercase + " ") for t in upper.read(images))
        assert upper(images, signs(ws)).mean() >= 0.9


@needs_tesseract
def test_bad_inputs_name_the_problem(reward: OcrReward) -> None:
    images = np.stack([render_text("ABC")] * 2)
    with pytest.raises(ValueError, match="uint8"):
        reward(images.astype(np.float32), signs(["ABC", "ABC"]))
    with pytest.raises(ValueError, match=r"\(N, H, W, 1\|3\)"):
        reward(images[..., 0], signs(["ABC", "ABC"]))
    with pytest.raises(ValueError, match="2 images but 1 prompts"):
        reward(images, signs(["ABC"]))
    with pytest.raises(ValueError, match="'a plain sign'"):
        reward(images, ['a sign that says "ABC"', "a plain sign"])
    for bad in [{"backend": "paddle"}, {"resample": "box"}, {"scale": 0}, {"workers": 0}]:
        with pytest.raises(ValueError, match=next(iter(bad))):
            OcrReward(**bad)


def test_missing_tesseract_binary_says_to_install_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "bin" / "tesseract")
    with pytest.raises(FileNotFoundError, match="apt-get install tesseract-ocr") as e:
        OcrReward(backend="cli", tesseract_cmd=missing)
    assert missing in str(e.value)


@needs_tesserocr
def test_missing_language_data_says_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="apt-get install tesseract-ocr") as e:
        OcrReward(backend="tesserocr", tessdata=str(tmp_path))
    assert "eng.traineddata" in str(e.value) and str(tmp_path) in str(e.value)


def fake_tesseract(tmp_path: Path, body: str) -> str:
    script = tmp_path / "tesseract"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_cli_failures_and_hangs_raise_with_tesseract_s_message(tmp_path: Path) -> None:
    images = np.stack([render_text("ABC")] * 2)
    broken = fake_tesseract(tmp_path, 'echo "Error opening data file eng.traineddata" >&2; exit 1')
    with pytest.raises(RuntimeError, match=r"failed on 2 images.*eng\.traineddata"):
        OcrReward(backend="cli", tesseract_cmd=broken, workers=1).read(images)
    (tmp_path / "hung").mkdir()
    hung = fake_tesseract(tmp_path / "hung", "exec sleep 30")
    with pytest.raises(RuntimeError, match=r"killed after 0\.2 s"):
        OcrReward(backend="cli", tesseract_cmd=hung, workers=1, timeout_s=0.2).read(images)


def test_without_tesserocr_auto_uses_the_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    hide = lambda name, *a: None if name == "tesserocr" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", hide)
    with pytest.raises(ImportError, match=r"pip install tesserocr==2\.13\.0"):
        OcrReward(backend="tesserocr")
    if HAS_TESSERACT:
        with OcrReward(workers=1) as reward:
            assert reward.backend == "cli"
            assert reward(render_text("HEN")[None], ['"HEN"']).tolist() == [1.0]


def test_binarize_keeps_scores_at_or_above_the_threshold() -> None:
    scores = np.array([0.0, 1 / 3, 2 / 3, 1.0])
    assert binarize(scores, 1.0).tolist() == [0.0, 0.0, 0.0, 1.0]
    assert binarize(scores, 2 / 3).tolist() == [0.0, 0.0, 1.0, 1.0]
    assert binarize(np.array([1 - 1 / 3]), 2 / 3).tolist() == [1.0]  # 0.666...6 reaches 2/3
    with pytest.raises(ValueError, match="threshold"):
        OcrReward(threshold=0.0)


@needs_tesseract
def test_binary_rewards_are_the_graded_score_thresholded(reward: OcrReward) -> None:
    ws = words(12, seed=5)
    clean = np.stack([render_text(w) for w in ws])
    # half the signs show a word with one letter changed: graded 2/3 where read well
    other = [w[:2] + ("A" if w[2] != "A" else "B") for w in ws]
    images = np.concatenate([clean, np.stack([render_text(w) for w in other])])
    prompts = signs(ws) * 2
    graded = reward(images, prompts)
    exact, two = build_reward("ocr-exact"), build_reward("ocr-2of3")
    one = build_reward("ocr-1of3")
    try:
        np.testing.assert_array_equal(exact(images, prompts), binarize(graded, 1.0))
        np.testing.assert_array_equal(two(images, prompts), binarize(graded, 2 / 3))
        np.testing.assert_array_equal(one(images, prompts), binarize(graded, 1 / 3))
        assert one(images, prompts).sum() >= two(images, prompts).sum()
        assert exact(images, prompts)[12:].max() == 0.0  # a wrong letter is never exact
        assert two(images, prompts)[12:].mean() >= 0.75  # ...but mostly two of three
        assert pickle.loads(pickle.dumps(exact)).threshold == 1.0
    finally:
        exact.close()
        two.close()
        one.close()
