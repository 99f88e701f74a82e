"""The GenEval reward for real images: Mask2Former instances, CLIP colours, GenEval's rules.

GenEval (Ghosh et al. 2023; djghosh13/geneval, ``evaluation/evaluate_images.py``) detects
COCO objects with Mask2Former (Swin-S, COCO instance segmentation), classifies the colour of
the objects a colour clause asks about with CLIP ViT-L/14 zero-shot on the object's crop with
the background masked out, and applies its rules (spotlight.rewards.geneval_rules). Here both
models are Hugging Face checkpoints read from one local folder::

    <folder>/mask2former/   facebook/mask2former-swin-small-coco-instance
    <folder>/clip/          openai/clip-vit-large-patch14

Nothing is downloaded at run time (``find_geneval_folders`` says how to fetch them). The
detector runs through ``Mask2FormerForUniversalSegmentation`` and its image processor's
``post_process_instance_segmentation``: per instance a label (COCO's name mapped to GenEval's
object name, ``COCO_TO_GENEVAL``), a score (class probability times mean mask probability, as
GenEval's mmdetection model), a binary mask and the mask's box. Colour follows GenEval: the
image is composited over ``CROP_BACKGROUND`` outside the mask, cropped to the box, and given the
colour of ``COLORS`` whose text embedding, averaged over ``COLOR_TEMPLATES``, is nearest.

Differences from GenEval's mmdetection pipeline: the Hugging Face post-processing (run on the
CPU) resamples masks through 384x384 and keeps scores >= its threshold (the rules then apply
GenEval's strict ``>``); non-square images are padded to a square with the processor's mean
colour (that post-processing ignores padding); CLIP's crop is its central square, as CLIP's
resize and centre crop (GenEval's open_clip transform) would keep.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from spotlight.rewards import geneval_rules as rules
from spotlight.rewards.geneval_rules import (
    COLORS,
    COUNTING_THRESHOLD,
    THRESHOLD,
    Detection,
    Spec,
)
from spotlight.rewards.simple import check_images
from spotlight.tasks.geneval import OBJECT_NAMES, parse

if TYPE_CHECKING:
    import torch

DEFAULT_GENEVAL_PATH = "/shared/models/geneval"
"""Where ``GenEvalModelReward()`` looks when neither ``path`` nor $SPOTLIGHT_GENEVAL_MODELS is
given."""
MASK2FORMER_REPO = "facebook/mask2former-swin-small-coco-instance"
"""GenEval's detector (mmdetection's mask2former_swin-s-p4-w7-224_lsj_8x2_50e_coco) on the hub."""
CLIP_REPO = "openai/clip-vit-large-patch14"
"""GenEval's colour classifier (open_clip ViT-L-14, ``pretrained="openai"``) on the hub."""
COCO_TO_GENEVAL = {
    "mouse": "computer mouse",
    "remote": "tv remote",
    "keyboard": "computer keyboard",
    # other spellings found in COCO label maps
    "motorbike": "motorcycle",
    "aeroplane": "airplane",
    "sofa": "couch",
    "pottedplant": "potted plant",
    "diningtable": "dining table",
    "tvmonitor": "tv",
    "doughnut": "donut",
    "hair dryer": "hair drier",
}
"""COCO class name -> GenEval object name where they differ (the first three: COCO's names in
the Hugging Face checkpoint vs GenEval's object_names.txt); other names are the same."""
COLOR_TEMPLATES = (
    "a photo of a {color} {name}",
    "a photo of a {color}-colored {name}",
    "a photo of a {color} object",
)
"""GenEval's zero-shot colour prompts (``color_classification``)."""
CROP_BACKGROUND = (153, 153, 153)
"""GenEval's ``bgcolor`` "#999": the colour outside an object's mask in its colour crop."""

_WEIGHTS = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json")
_PARTS = {
    "mask2former": (
        MASK2FORMER_REPO,
        {
            "config.json": ("config.json",),
            "weights (model.safetensors)": _WEIGHTS,
            "preprocessor_config.json": ("preprocessor_config.json",),
        },
    ),
    "clip": (
        CLIP_REPO,
        {
            "config.json": ("config.json",),
            "weights (model.safetensors)": _WEIGHTS,
            "preprocessor_config.json": ("preprocessor_config.json",),
            "tokenizer (tokenizer.json or vocab.json + merges.txt)": (
                "tokenizer.json",
                "vocab.json",
            ),
        },
    ),
}


def geneval_folder(path: str | Path | None = None) -> Path:
    """``path``, else $SPOTLIGHT_GENEVAL_MODELS, else ``DEFAULT_GENEVAL_PATH``."""
    if path is None:
        path = os.environ.get("SPOTLIGHT_GENEVAL_MODELS") or DEFAULT_GENEVAL_PATH
    return Path(path).expanduser()


def _how_to_get(folder: Path) -> str:
    fetch = "; ".join(
        f"`hf download {repo} --local-dir {folder / part}`" for part, (repo, _) in _PARTS.items()
    )
    return (
        f"GenEvalModelReward loads local Hugging Face folders (nothing is downloaded at run time):"
        f" on a machine with internet run {fetch}, copy {folder} to the cluster's shared storage,"
        " and pass it with --reward-model (or set $SPOTLIGHT_GENEVAL_MODELS)."
    )


def find_geneval_folders(path: str | Path | None = None) -> tuple[Path, Path]:
    """The ``(mask2former, clip)`` subfolders of the GenEval model folder ``path``.

    Args:
        path: the folder holding ``mask2former/`` and ``clip/``; default
            $SPOTLIGHT_GENEVAL_MODELS, else ``DEFAULT_GENEVAL_PATH``.

    Raises:
        FileNotFoundError: the folder, a subfolder or a file of one is missing (naming it, and
            how to get the models).
    """
    folder = geneval_folder(path)
    problems = []
    for part, (repo, needed) in _PARTS.items():
        sub = folder / part
        if not sub.is_dir():
            problems.append(f"{part}/ ({repo}) does not exist")
            continue
        missing = [w for w, names in needed.items() if not any((sub / n).is_file() for n in names)]
        if missing:
            problems.append(f"{part}/ ({repo}) lacks {', '.join(missing)}")
    if problems:
        where = "does not exist" if not folder.is_dir() else "is incomplete: " + "; ".join(problems)
        raise FileNotFoundError(
            f"GenEval model folder {str(folder)!r} {where}. {_how_to_get(folder)}"
        )
    return folder / "mask2former", folder / "clip"


def geneval_label(coco_name: str) -> str | None:
    """The GenEval object name of a detector class name, or None for a class GenEval lacks."""
    key = " ".join(coco_name.lower().replace("_", " ").replace("-", " ").split())
    key = COCO_TO_GENEVAL.get(key, key)
    return key if key in OBJECT_NAMES else None


def geneval_labels(id2label: dict, where: str) -> list[str | None]:
    """Class id -> GenEval object name (None: not a GenEval class) for a detector's labels.

    Raises:
        ValueError: some of GenEval's 80 classes have no label (not a COCO detector).
    """
    ids = {int(k): str(v) for k, v in id2label.items()}
    labels = [geneval_label(ids[i]) if i in ids else None for i in range(max(ids, default=-1) + 1)]
    lacking = sorted(set(OBJECT_NAMES) - set(labels))
    if lacking:
        raise ValueError(
            f"{where}: id2label has no class for GenEval's {', '.join(lacking[:6])}"
            f"{' ...' if len(lacking) > 6 else ''} ({len(lacking)} of 80): GenEval needs a COCO"
            f" instance-segmentation model such as {MASK2FORMER_REPO}"
        )
    return labels


def preflight_geneval_models(path: str | Path | None = None) -> None:
    """Fail now, cheaply (no model is loaded), if ``GenEvalModelReward(path)`` cannot load.

    Raises:
        FileNotFoundError: as ``find_geneval_folders``.
        ValueError: the detector's labels are not COCO's.
    """
    detector, _ = find_geneval_folders(path)
    config = json.loads((detector / "config.json").read_text())
    geneval_labels(config.get("id2label", {}), str(detector / "config.json"))


class GenEvalModelReward:
    """GenEval partial score of real images: the fraction of the prompt's clauses that hold.

    Prompts are GenEval's (spotlight.tasks.geneval grammar). Per image: Mask2Former instances
    (``detect``), kept by GenEval's thresholds, colours by CLIP for the objects a colour clause
    names, then GenEval's clauses (spotlight.rewards.geneval_rules); ``score`` also says whether
    the image is correct by GenEval (every clause holds).

    Args:
        path: the folder holding ``mask2former/`` and ``clip/`` (module docstring); default
            $SPOTLIGHT_GENEVAL_MODELS, else ``DEFAULT_GENEVAL_PATH``.
        device: where the models run; default "cuda" when available, else "cpu".
        dtype: the models' weights' dtype (a torch dtype); default float32.
        batch_size: images per detector pass (and crops per CLIP pass).
        threshold, counting_threshold: GenEval's detection thresholds (``geneval_rules``).

    Raises:
        FileNotFoundError: the folder or a part of it is missing (says how to get it).
        ValueError: ``batch_size < 1``, or the detector's labels are not COCO's.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        device: str | None = None,
        dtype: torch.dtype | None = None,
        batch_size: int = 8,
        threshold: float = THRESHOLD,
        counting_threshold: float = COUNTING_THRESHOLD,
    ):
        import torch
        from transformers import (
            AutoImageProcessor,
            CLIPModel,
            CLIPTokenizer,
            Mask2FormerForUniversalSegmentation,
        )

        if batch_size < 1:
            raise ValueError(f"GenEvalModelReward: batch_size must be >= 1, got {batch_size}")
        detector, clip = find_geneval_folders(path)
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = dtype or torch.float32
        self.batch_size = batch_size
        self.threshold, self.counting_threshold = threshold, counting_threshold
        model = Mask2FormerForUniversalSegmentation.from_pretrained(
            detector, local_files_only=True, dtype=self.dtype
        )
        self.detector = model.to(self.device).eval().requires_grad_(False)
        self.detector_processor = AutoImageProcessor.from_pretrained(
            detector, local_files_only=True
        )
        self.labels = geneval_labels(model.config.id2label, str(detector / "config.json"))
        clip_model = CLIPModel.from_pretrained(clip, local_files_only=True, dtype=self.dtype)
        self.clip = clip_model.to(self.device).eval().requires_grad_(False)
        self.clip_processor = AutoImageProcessor.from_pretrained(clip, local_files_only=True)
        self.tokenizer = CLIPTokenizer.from_pretrained(clip, local_files_only=True)
        self._color_text: dict[str, torch.Tensor] = {}  # class -> (colours, dim) text embeddings

    def __call__(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        """Partial scores, float32 ``(N,)`` in [0, 1], for uint8 ``(N, H, W, 1|3)`` images.

        Raises:
            ValueError: bad images, or a prompt outside GenEval's grammar (naming it).
        """
        return np.array([p for _, p in self._scores(images, prompts)], dtype=np.float32)

    def score(self, image: np.ndarray, prompt: str) -> tuple[bool, float]:
        """(correct, partial) for one uint8 ``(H, W, 1|3)`` image: correct when every clause
        holds (GenEval's verdict), partial the reward.

        Raises:
            ValueError: a bad image or prompt.
        """
        if not isinstance(image, np.ndarray) or image.ndim != 3:
            shape = getattr(image, "shape", type(image).__name__)
            raise ValueError(f"GenEvalModelReward.score: image must be (H, W, 1|3), got {shape}")
        return self._scores(image[None], [prompt])[0]

    def _scores(self, images: np.ndarray, prompts: list[str]) -> list[tuple[bool, float]]:
        check_images(images, prompts, "GenEvalModelReward")
        specs = _parse_all(prompts)
        found = self.detect(images, prompts)
        return [
            rules.score(
                spec,
                dets,
                threshold=self.threshold,
                counting_threshold=self.counting_threshold,
            )
            for spec, dets in zip(specs, found, strict=True)
        ]

    def detect(self, images: np.ndarray, prompts: list[str] | None = None) -> list[list[Detection]]:
        """The GenEval-class instances in each uint8 ``(N, H, W, 1|3)`` image, most confident
        first: all scoring at least the lower threshold (the rules filter further).

        With ``prompts``, the top N detections (after GenEval's filter) of each class that a
        prompt's colour clause names get their CLIP colour; otherwise ``color`` is None.

        Raises:
            ValueError: bad images, or a prompt outside GenEval's grammar.
        """
        check_images(images, prompts if prompts is not None else [""] * len(images), "detect")
        specs = _parse_all(prompts) if prompts is not None else None
        rgb = np.repeat(images, 3, axis=-1) if images.shape[-1] == 1 else images
        found: list[list[tuple[Detection, np.ndarray]]] = []
        for start in range(0, len(rgb), self.batch_size):
            found += self._segment(rgb[start : start + self.batch_size])
        if specs is not None:
            self._color(rgb, specs, found)
        return [[d for d, _ in image_found] for image_found in found]

    def _segment(self, batch: np.ndarray) -> list[list[tuple[Detection, np.ndarray]]]:
        import torch

        h, w = batch.shape[1:3]
        side = max(h, w)
        if h != w:  # pad to a square: the post-processing maps masks onto the padded frame
            mean = np.asarray(self.detector_processor.image_mean) * 255
            square = np.empty((len(batch), side, side, 3), np.uint8)
            square[:] = np.round(mean).astype(np.uint8)
            square[:, :h, :w] = batch
            batch = square
        inputs = self.detector_processor(images=list(batch), return_tensors="pt")
        pixels = inputs["pixel_values"].to(self.device, self.dtype)
        mask = inputs.get("pixel_mask")
        with torch.no_grad():
            out = self.detector(
                pixel_values=pixels, pixel_mask=None if mask is None else mask.to(self.device)
            )
        # On the CPU in float32: the post-processing writes a CPU map through the masks, which
        # fails for masks on a GPU, and reads scores with .item() per query anyway.
        logits = SimpleNamespace(
            class_queries_logits=out.class_queries_logits.float().cpu(),
            masks_queries_logits=out.masks_queries_logits.float().cpu(),
        )
        results = self.detector_processor.post_process_instance_segmentation(
            logits,
            threshold=min(self.threshold, self.counting_threshold),
            target_sizes=[(side, side)] * len(batch),
            return_binary_maps=True,
        )
        found = []
        for result in results:
            dets = []
            if result["segments_info"]:
                maps = result["segmentation"].bool()[:, :h, :w].numpy()
                for seg, m in zip(result["segments_info"], maps, strict=True):
                    label = self.labels[seg["label_id"]]
                    rows, cols = np.flatnonzero(m.any(axis=1)), np.flatnonzero(m.any(axis=0))
                    if label is None or not len(rows):
                        continue
                    box = (int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1)
                    dets.append((Detection(label, float(seg["score"]), box, area=int(m.sum())), m))
            found.append(sorted(dets, key=lambda dm: -dm[0].score))
        return found

    def _color(
        self,
        images: np.ndarray,
        specs: list[Spec],
        found: list[list[tuple[Detection, np.ndarray]]],
    ) -> None:
        """Fill in, in place, the colour of the detections the specs' colour clauses look at."""
        todo: list[tuple[int, int]] = []  # (image, index in found[image])
        for i, spec in enumerate(specs):
            kept = rules.keep_confident(
                [d for d, _ in found[i]],
                spec.category,
                threshold=self.threshold,
                counting_threshold=self.counting_threshold,
            )
            for req in spec.objects:
                if req.color is not None:
                    ranked = [d for d in kept if d.label == req.name][: req.count]
                    todo += [
                        (i, j) for j, (d, _) in enumerate(found[i]) if any(d is t for t in ranked)
                    ]
        if not todo:
            return
        crops = [_object_crop(images[i], *found[i][j]) for i, j in todo]
        names = [found[i][j][0].label for i, j in todo]
        colors = self.classify_colors(crops, names)
        for (i, j), color in zip(todo, colors, strict=True):
            d, m = found[i][j]
            found[i][j] = (Detection(d.label, d.score, d.box, color, d.area), m)

    def classify_colors(self, crops: list[np.ndarray], names: list[str]) -> list[str]:
        """The GenEval colour of each uint8 ``(h, w, 3)`` object crop of class ``names[k]``:
        CLIP zero-shot over ``COLORS`` with ``COLOR_TEMPLATES``."""
        import torch

        out: list[str] = []
        with torch.no_grad():
            for start in range(0, len(crops), self.batch_size):
                chunk = [_center_square(c) for c in crops[start : start + self.batch_size]]
                pixels = self.clip_processor(images=chunk, return_tensors="pt")["pixel_values"]
                feats = _pooled(
                    self.clip.get_image_features(pixel_values=pixels.to(self.device, self.dtype))
                )
                feats = torch.nn.functional.normalize(feats.float(), dim=-1)
                for k, f in enumerate(feats):
                    text = self._color_classifier(names[start + k])
                    out.append(COLORS[int((text @ f).argmax())])
        return out

    def _color_classifier(self, name: str) -> torch.Tensor:
        """``(colours, dim)``: per colour, the normalized mean of its normalized template
        embeddings (clip_benchmark's zero-shot classifier, as GenEval builds it)."""
        import torch

        if name not in self._color_text:
            texts = [t.format(color=c, name=name) for c in COLORS for t in COLOR_TEMPLATES]
            max_len = self.clip.config.text_config.max_position_embeddings
            tokens = self.tokenizer(
                texts, padding=True, truncation=True, max_length=max_len, return_tensors="pt"
            ).to(self.device)
            emb = _pooled(
                self.clip.get_text_features(
                    input_ids=tokens["input_ids"], attention_mask=tokens["attention_mask"]
                )
            )
            emb = torch.nn.functional.normalize(emb.float(), dim=-1)
            emb = emb.reshape(len(COLORS), len(COLOR_TEMPLATES), -1).mean(dim=1)
            self._color_text[name] = torch.nn.functional.normalize(emb, dim=-1)
        return self._color_text[name]


def _parse_all(prompts: list[str]) -> list[Spec]:
    specs = []
    for p in prompts:
        try:
            specs.append(parse(p))
        except ValueError as e:
            raise ValueError(f"GenEvalModelReward: {e}") from None
    return specs


def _object_crop(image: np.ndarray, det: Detection, mask: np.ndarray) -> np.ndarray:
    """GenEval's colour crop: ``image`` over ``CROP_BACKGROUND`` outside ``mask``, cut to the
    detection's box."""
    x0, y0, x1, y1 = (int(v) for v in det.box)
    window = image[y0:y1, x0:x1]
    return np.where(mask[y0:y1, x0:x1, None], window, np.uint8(CROP_BACKGROUND)).astype(np.uint8)


def _center_square(crop: np.ndarray) -> np.ndarray:
    """The central square of ``crop`` (side: its shorter side): all that CLIP's resize and
    centre crop keep, taken first so a thin crop does not grow huge."""
    h, w = crop.shape[:2]
    side = min(h, w)
    y, x = (h - side) // 2, (w - side) // 2
    return np.ascontiguousarray(crop[y : y + side, x : x + side])


def _pooled(out: object) -> torch.Tensor:
    """The projected embedding: transformers 5 wraps it in an output's ``pooler_output``."""
    import torch

    return out if isinstance(out, torch.Tensor) else out.pooler_output
