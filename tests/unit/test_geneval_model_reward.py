"""GenEvalModelReward end to end on a tiny random Mask2Former + CLIP saved offline."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from spotlight.rewards import build_reward, preflight_reward
from spotlight.rewards import geneval_rules as rules
from spotlight.rewards.geneval_model import (
    COCO_TO_GENEVAL,
    CROP_BACKGROUND,
    GenEvalModelReward,
    _object_crop,
    find_geneval_folders,
    geneval_folder,
    geneval_label,
    preflight_geneval_models,
)
from spotlight.rewards.geneval_rules import COLORS, Detection
from spotlight.tasks.geneval import OBJECT_NAMES, article, parse

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One thread: the tiny model is latency-bound, and threads fight a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory, one_thread) -> Path:
    from tiny_hf.geneval_models import save_tiny_geneval_models

    return save_tiny_geneval_models(tmp_path_factory.mktemp("geneval-models"))


@pytest.fixture(scope="module")
def reward(folder: Path) -> GenEvalModelReward:
    return GenEvalModelReward(folder, device="cpu", batch_size=2)


def images(n: int, seed: int = 0, h: int = 64, w: int = 64, c: int = 3) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, h, w, c), dtype=np.uint8)


@pytest.fixture(scope="module")
def batch(reward: GenEvalModelReward) -> tuple[np.ndarray, list[str]]:
    """Three images and prompts naming what the tiny detector finds in them, with colours."""
    ims = images(3)
    found = reward.detect(ims)
    assert all(found), "the tiny detector finds something in every image"
    a, b = found[0][0].label, next(d.label for d in found[1] if d.label != found[1][0].label)
    prompts = [
        f"a photo of {article('red ' + a)}" if a != "person" else "a photo of a person",
        f"a photo of {article(found[1][0].label)} left of {article(b)}",
        "a photo of two cats",
    ]
    return ims, prompts


def test_labels_map_coco_names_to_genevals(reward: GenEvalModelReward):
    assert set(reward.labels) == set(OBJECT_NAMES) and len(reward.labels) == 80
    assert reward.labels[64:67] == ["computer mouse", "tv remote", "computer keyboard"]
    assert geneval_label("mouse") == "computer mouse" and geneval_label("potted_plant") == (
        "potted plant"
    )
    assert geneval_label("wall-other-merged") is None
    assert all(v in OBJECT_NAMES for v in COCO_TO_GENEVAL.values())


def test_shapes_range_determinism(reward: GenEvalModelReward, batch):
    ims, prompts = batch
    out = reward(ims, prompts)
    assert out.shape == (3,) and out.dtype == np.float32
    assert np.all((out >= 0) & (out <= 1))
    np.testing.assert_array_equal(out, reward(ims, prompts))
    assert reward(ims[:0], []).shape == (0,)


def test_score_agrees_with_call(reward: GenEvalModelReward, batch):
    ims, prompts = batch
    out = reward(ims, prompts)
    for image, prompt, partial in zip(ims, prompts, out, strict=True):
        correct, p = reward.score(image, prompt)
        assert np.float32(p) == partial and correct == (p == 1.0)


def test_detections_are_ranked_boxed_and_colored_where_asked(reward: GenEvalModelReward, batch):
    ims, prompts = batch
    found = reward.detect(ims, prompts)
    for dets in found:
        assert [d.score for d in dets] == sorted((d.score for d in dets), reverse=True)
        for d in dets:
            assert d.label in OBJECT_NAMES and d.score >= rules.THRESHOLD
            x0, y0, x1, y1 = d.box
            assert 0 <= x0 < x1 <= 64 and 0 <= y0 < y1 <= 64 and 0 < d.area <= (x1 - x0) * (y1 - y0)
    colored = [d for d in found[0] if d.color is not None]
    asked = parse(prompts[0]).objects[0]
    if asked.color is not None:
        assert len(colored) == 1 and colored[0].label == asked.name and colored[0].color in COLORS
        assert colored[0] == max(
            (d for d in found[0] if d.label == asked.name), key=lambda d: d.score
        )
    assert all(d.color is None for d in found[1] + found[2])  # no colour clause
    assert all(d.color is None for dets in reward.detect(ims) for d in dets)  # no prompts


def test_scores_do_not_depend_on_batching(reward: GenEvalModelReward, folder: Path, batch):
    ims, prompts = batch
    one_pass = GenEvalModelReward(folder, device="cpu", batch_size=8)
    np.testing.assert_array_equal(reward(ims, prompts), one_pass(ims, prompts))
    for a, b in zip(reward.detect(ims), one_pass.detect(ims), strict=True):
        assert [(d.label, d.box, d.area) for d in a] == [(d.label, d.box, d.area) for d in b]
        np.testing.assert_allclose([d.score for d in a], [d.score for d in b], atol=1e-5)


def test_grayscale_and_non_square_images(reward: GenEvalModelReward):
    gray = reward(images(2, seed=3, c=1), ["a photo of a cat", "a photo of two dogs"])
    assert gray.shape == (2,) and gray.dtype == np.float32
    wide = images(2, seed=4, h=48, w=80)
    for dets in reward.detect(wide):
        assert all(d.box[2] <= 80 and d.box[3] <= 48 for d in dets)


def test_reward_is_the_rules_partial_score(reward: GenEvalModelReward, monkeypatch):
    synthetic = [
        [
            Detection("dog", 0.8, (300, 100, 450, 300)),
            Detection("teddy bear", 0.7, (50, 120, 250, 320)),
        ],
        [Detection("car", 0.9, (0, 0, 9, 9), "blue"), Detection("car", 0.5, (0, 0, 9, 9), "red")],
        [Detection("clock", s, (0, 0, 5, 5)) for s in (0.95, 0.97, 0.92, 0.5)],
        [Detection("cat", 0.3, (0, 0, 5, 5))],
    ]
    prompts = [
        "a photo of a dog left of a teddy bear",
        "a photo of a red car",
        "a photo of three clocks",
        "a photo of a cat",
    ]
    monkeypatch.setattr(reward, "detect", lambda ims, ps=None: synthetic[: len(ims)])
    want = [rules.score(parse(p), d)[1] for p, d in zip(prompts, synthetic, strict=True)]
    assert want == pytest.approx([2 / 3, 0.5, 1.0, 0.0])
    np.testing.assert_array_equal(reward(images(4), prompts), np.float32(want))
    assert reward.score(images(1)[0], prompts[0]) == (False, pytest.approx(2 / 3))


def test_thresholds_are_parameters(folder: Path, monkeypatch):
    lenient = GenEvalModelReward(folder, device="cpu", threshold=0.1, counting_threshold=0.4)
    found = [[Detection("cat", 0.2, (0, 0, 5, 5)), Detection("cat", 0.45, (9, 9, 15, 15))]]
    monkeypatch.setattr(lenient, "detect", lambda ims, ps=None: found)
    assert lenient(images(1), ["a photo of a cat"])[0] == 1.0
    assert lenient(images(1), ["a photo of two cats"])[0] == 0.5  # 0.2 < counting 0.4


def test_bad_images_and_prompts(reward: GenEvalModelReward, monkeypatch):
    with pytest.raises(ValueError, match="uint8"):
        reward(images(2).astype(np.float32), ["a photo of a cat"] * 2)
    with pytest.raises(ValueError, match=r"\(N, H, W, 1\|3\)"):
        reward(images(2)[..., 0], ["a photo of a cat"] * 2)
    with pytest.raises(ValueError, match="2 images but 1 prompts"):
        reward(images(2), ["a photo of a cat"])
    with pytest.raises(ValueError, match=r"\(H, W, 1\|3\)"):
        reward.score(images(1), "a photo of a cat")

    def refuse(*_a, **_k):
        raise AssertionError("prompts are checked before any detection")

    monkeypatch.setattr(reward, "detect", refuse)
    with pytest.raises(ValueError, match=r"'a photo of a unicorn'.*outside the grammar"):
        reward(images(2), ["a photo of a cat", "a photo of a unicorn"])


def test_object_crop_masks_the_background():
    image = np.full((8, 8, 3), 7, np.uint8)
    mask = np.zeros((8, 8), bool)
    mask[2:4, 3:6] = True
    mask[5, 5] = True
    crop = _object_crop(image, Detection("cat", 0.9, (3, 2, 6, 6)), mask)
    assert crop.shape == (4, 3, 3) and crop.dtype == np.uint8
    assert (crop[:2] == 7).all() and (crop[2, :] == CROP_BACKGROUND).all()
    assert (crop[3, 2] == 7).all() and (crop[3, 0] == CROP_BACKGROUND).all()


def test_colors_are_genevals(reward: GenEvalModelReward):
    crops = [np.full((5, 9, 3), v, np.uint8) for v in (0, 128, 255)]
    got = reward.classify_colors(crops, ["car", "car", "apple"])
    assert len(got) == 3 and set(got) <= set(COLORS)
    assert reward.classify_colors(crops, ["car"] * 3)[:2] == got[:2]


def test_missing_folders_say_how_to_get_the_models(tmp_path: Path, folder: Path):
    with pytest.raises(FileNotFoundError, match="does not exist") as e:
        find_geneval_folders(tmp_path / "nowhere")
    for needed in ("--reward-model", "$SPOTLIGHT_GENEVAL_MODELS", "hf download"):
        assert needed in str(e.value)
    assert "facebook/mask2former-swin-small-coco-instance" in str(e.value)
    assert "openai/clip-vit-large-patch14" in str(e.value)

    partial = tmp_path / "partial"
    shutil.copytree(folder / "mask2former", partial / "mask2former")
    with pytest.raises(
        FileNotFoundError, match=r"clip/ \(openai/clip-vit-large-patch14\) does not"
    ) as e:
        GenEvalModelReward(partial)
    assert "mask2former/ (" not in str(e.value) and "--reward-model" in str(e.value)

    shutil.copytree(folder / "clip", partial / "clip")
    (partial / "mask2former" / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"mask2former/ .* lacks weights"):
        preflight_geneval_models(partial)


def test_preflight_is_cheap_and_checks_labels(tmp_path: Path, folder: Path, monkeypatch):
    assert preflight_geneval_models(folder) is None
    monkeypatch.setenv("SPOTLIGHT_GENEVAL_MODELS", str(folder))
    assert geneval_folder() == folder
    preflight_geneval_models()
    preflight_reward("geneval-model", str(folder))
    other = tmp_path / "other"
    shutil.copytree(folder, other)
    config = json.loads((other / "mask2former" / "config.json").read_text())
    config["id2label"] = {"0": "wall", "1": "cat"}
    (other / "mask2former" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="COCO instance-segmentation model"):
        preflight_geneval_models(other)


def test_built_by_name(folder: Path):
    built = build_reward("geneval-model", str(folder))
    assert isinstance(built, GenEvalModelReward) and built.batch_size == 8
    with pytest.raises(ValueError, match="batch_size"):
        GenEvalModelReward(folder, batch_size=0)
