"""A tiny random GenEval model folder: Mask2Former (tiny Swin backbone) and CLIP, saved offline.

``save_tiny_geneval_models(folder)`` writes what ``GenEvalModelReward(folder)`` loads:
``mask2former/`` (a ``Mask2FormerForUniversalSegmentation`` with COCO's 80 class names, so the
COCO -> GenEval name mapping runs, and its image processor at 64 px) and ``clip/`` (a tiny
CLIP with a byte-level BPE tokenizer written here). The weights are random; the detector's
heads are scaled so that instances score 0.2-0.6 and vary with the image (the unscaled random
head gives every instance ~0.01, under every threshold). About a second to build.
"""

from __future__ import annotations

from pathlib import Path

from tiny_hf.clip import save_tiny_clip

COCO_NAMES = (
    "person", "bicycle", "car", "motorcycle", "airplane", "bus", "train", "truck", "boat",
    "traffic light", "fire hydrant", "stop sign", "parking meter", "bench", "bird", "cat", "dog",
    "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe", "backpack", "umbrella",
    "handbag", "tie", "suitcase", "frisbee", "skis", "snowboard", "sports ball", "kite",
    "baseball bat", "baseball glove", "skateboard", "surfboard", "tennis racket", "bottle",
    "wine glass", "cup", "fork", "knife", "spoon", "bowl", "banana", "apple", "sandwich",
    "orange", "broccoli", "carrot", "hot dog", "pizza", "donut", "cake", "chair", "couch",
    "potted plant", "bed", "dining table", "toilet", "tv", "laptop", "mouse", "remote",
    "keyboard", "cell phone", "microwave", "oven", "toaster", "sink", "refrigerator", "book",
    "clock", "vase", "scissors", "teddy bear", "hair drier", "toothbrush",
)  # fmt: skip
"""COCO's 80 instance classes as the Hugging Face COCO checkpoints name them."""
IMAGE_SIZE = 64
"""The detector processor's resize target (shortest and longest edge)."""


def _save_mask2former(folder: Path) -> None:
    import torch
    import transformers

    backbone = transformers.SwinConfig(
        image_size=IMAGE_SIZE,
        patch_size=4,
        embed_dim=16,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 2, 2],
        window_size=4,
        drop_path_rate=0.0,
        out_features=["stage1", "stage2", "stage3", "stage4"],
    )
    config = transformers.Mask2FormerConfig(
        backbone_config=backbone,
        feature_size=32,
        mask_feature_size=32,
        hidden_dim=32,
        encoder_feedforward_dim=64,
        encoder_layers=1,
        decoder_layers=2,
        num_attention_heads=2,
        dim_feedforward=64,
        num_queries=10,
        id2label=dict(enumerate(COCO_NAMES)),
        label2id={n: i for i, n in enumerate(COCO_NAMES)},
    )
    torch.manual_seed(0)
    model = transformers.Mask2FormerForUniversalSegmentation(config).eval()
    with torch.no_grad():  # confident classes, masks with shape: scores 0.2-0.6
        model.class_predictor.weight.normal_(0.0, 1.5)
        model.class_predictor.bias.zero_()
        head = model.model.transformer_module.decoder.mask_predictor.mask_embedder
        head.get_submodule("2.0").weight.mul_(30.0)
    model.save_pretrained(folder)
    size = {"shortest_edge": IMAGE_SIZE, "longest_edge": IMAGE_SIZE}
    processor = transformers.Mask2FormerImageProcessorPil(size=size)
    processor.save_pretrained(folder)


def _save_clip(folder: Path) -> None:
    save_tiny_clip(folder, merge=("r", "e"))


def save_tiny_geneval_models(folder: Path) -> Path:
    """Write ``mask2former/`` and ``clip/`` under ``folder``; returns ``folder``."""
    folder = Path(folder)
    for name, save in (("mask2former", _save_mask2former), ("clip", _save_clip)):
        (folder / name).mkdir(parents=True, exist_ok=True)
        save(folder / name)
    return folder
