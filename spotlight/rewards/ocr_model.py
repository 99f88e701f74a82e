"""Flow-GRPO's OCR reward on real images: GOT-OCR 2.0 reads each image, scored by edit distance.

For the Qwen-Image OCR recipes (512x512 and 1280x1280 scenes with quoted text,
spotlight/tasks/ocr_scenes.py). Tesseract (spotlight/rewards/ocr.py) reads clean single-line
renders such as OCR-mini's signs, but not text on a poster, a mug or a storefront in a
photographic scene; this reward reads those with a pretrained OCR model instead, and scores
what it reads with the same formula (``spotlight.rewards.ocr.ocr_score``).

Why GOT-OCR 2.0 (``stepfun-ai/GOT-OCR-2.0-hf``):

- it reads the plain text of a whole scene image: no text detector and no crops, where a line
  recogniser such as TrOCR reads one cropped text line, and Flow-GRPO's PaddleOCR is a
  detection + recognition pipeline on another framework;
- one forward pass of the image and a short greedy decode per batch of images;
- it is in transformers natively (``GotOcr2ForConditionalGeneration``, ``GotOcr2Processor``):
  no ``trust_remote_code``, no extra dependency, loaded with ``local_files_only=True``;
- Apache-2.0 weights, 560M parameters (about 1.2 GB in bfloat16): it fits beside the policy.

Its processor resizes every image to the vision tower's fixed 1024x1024 (512 images are
upscaled, 1280 ones downscaled) and gives it 256 image tokens; the decoder then writes what it
reads, in reading order, until ``<|im_end|>`` or ``max_new_tokens``. Quoted texts are at most
~20 characters, so the default 32 new tokens suffice unless a scene holds much other text: any
text read before the target counts against the score as in Flow-GRPO (unless the target is a
substring of what is read).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PIL import Image

from spotlight.rewards.ocr import ocr_score, quoted_target
from spotlight.rewards.simple import check_images

if TYPE_CHECKING:
    import torch

DEFAULT_OCR_PATH = "/shared/models/GOT-OCR-2.0-hf"
"""Where ``OcrModelReward()`` looks when neither ``path`` nor $SPOTLIGHT_OCR_MODEL is given."""
HUB_ID = "stepfun-ai/GOT-OCR-2.0-hf"
"""The checkpoint to download (on a machine with internet) into the folder."""
ENV_VAR = "SPOTLIGHT_OCR_MODEL"
MODEL_TYPE = "got_ocr2"
"""The ``model_type`` of config.json that this reward loads."""

_PARTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "config.json": (("config.json",),),
    "weights (model.safetensors)": (
        ("model.safetensors",),
        ("model.safetensors.index.json",),
        ("pytorch_model.bin",),
    ),
    "processor config (preprocessor_config.json)": (
        ("preprocessor_config.json",),
        ("processor_config.json",),
    ),
    "tokenizer (tokenizer.json)": (("tokenizer.json",), ("vocab.json", "merges.txt")),
}
"""What a usable folder holds: each part, and the alternative sets of files that provide it."""


def ocr_model_path(path: str | Path | None = None) -> str | Path:
    """``path``, else $SPOTLIGHT_OCR_MODEL, else ``DEFAULT_OCR_PATH``."""
    return path if path is not None else os.environ.get(ENV_VAR, DEFAULT_OCR_PATH)


def find_ocr_folder(path: str | Path) -> Path:
    """The local GOT-OCR 2.0 folder ``path``; raise FileNotFoundError saying how to get it.

    A usable folder holds config.json, the weights, the processor config
    (preprocessor_config.json, or transformers 5's processor_config.json) and the tokenizer
    (tokenizer.json, or vocab.json with merges.txt).

    Raises:
        FileNotFoundError: the folder or a part of it is missing (named, with how to get it).
        ValueError: config.json is not a GOT-OCR 2.0 model's.
    """
    folder = Path(path).expanduser()
    missing = [
        what
        for what, choices in _PARTS.items()
        if not any(all((folder / n).is_file() for n in names) for names in choices)
    ]
    if missing:
        what = "does not exist" if not folder.is_dir() else f"lacks {', '.join(missing)}"
        raise FileNotFoundError(
            f"GOT-OCR folder {str(path)!r} {what}. OcrModelReward loads a local Hugging Face "
            "folder (nothing is downloaded at run time): on a machine with internet run "
            f"`hf download {HUB_ID} --local-dir GOT-OCR-2.0-hf`, copy that folder "
            f"to the cluster's shared storage (e.g. {DEFAULT_OCR_PATH}), and pass it with "
            f"--reward-model (or set ${ENV_VAR})."
        )
    model_type = _model_type(folder / "config.json")
    if model_type != MODEL_TYPE:
        raise ValueError(
            f"{folder / 'config.json'} is a {model_type!r} model, not GOT-OCR 2.0 "
            f"({MODEL_TYPE!r}): pass the folder of {HUB_ID} with --reward-model "
            f"(or set ${ENV_VAR})."
        )
    return folder


def _model_type(config: Path) -> str | None:
    try:
        return json.loads(config.read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None


def preflight_ocr_model(path: str | Path | None = None) -> None:
    """Fail now if the ``ocr-model`` reward could not load its folder: a cheap check of the
    folder (``find_ocr_folder`` on ``ocr_model_path(path)``), no model is loaded.

    Raises:
        FileNotFoundError: the folder or a part of it is missing (says how to get it).
        ValueError: the folder holds another kind of model.
    """
    find_ocr_folder(ocr_model_path(path))


def image_tokens(vision_config: Any) -> int:
    """Image tokens GOT-OCR 2.0 makes of one image: its vision tower's patch grid, halved twice
    by the projector's stride-2 convolutions (1024 / 16 = 64 -> 32 -> 16: 256 tokens)."""
    side = vision_config.image_size // vision_config.patch_size
    for _ in range(2):
        side = (side + 1) // 2
    return side * side


class OcrModelReward:
    """Flow-GRPO's OCR reward with GOT-OCR 2.0 as the reader: does the image show the text
    quoted in its prompt?

    With ``t`` the prompt's text between double quotes and ``r`` what GOT-OCR 2.0 reads in the
    whole image (greedy decoding), both lowercased with all whitespace removed::

        reward = 0                                              if r is empty
               = 1                                              if t is a substring of r
               = 1 - min(Levenshtein(r, t), len(t)) / len(t)    otherwise

    Images are read in batches of ``batch_size``; grayscale images are repeated to RGB.

    Args:
        path: local folder of a GOT-OCR 2.0 checkpoint in Hugging Face format; default
            $SPOTLIGHT_OCR_MODEL, else ``DEFAULT_OCR_PATH``.
        device: where the model runs; default "cuda" when available, else "cpu".
        dtype: the weights' dtype (a ``torch.dtype`` or its name, e.g. "bfloat16"); default
            bfloat16 on CUDA, float32 on CPU.
        batch_size: images per generation call.
        max_new_tokens: most tokens read per image.

    Raises:
        FileNotFoundError: the folder or a part of it is missing (says how to get it).
        ValueError: an invalid argument, or a folder of another kind of model.
    """

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        device: str | None = None,
        dtype: torch.dtype | str | None = None,
        batch_size: int = 16,
        max_new_tokens: int = 32,
    ):
        import torch
        from transformers import AutoProcessor, GotOcr2ForConditionalGeneration

        for name, value in (("batch_size", batch_size), ("max_new_tokens", max_new_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"OcrModelReward: {name} must be an int >= 1, got {value!r}")
        folder = find_ocr_folder(ocr_model_path(path))
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.dtype = _dtype(dtype, self.device)
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.processor = AutoProcessor.from_pretrained(folder, local_files_only=True)
        model = GotOcr2ForConditionalGeneration.from_pretrained(
            folder, local_files_only=True, dtype=self.dtype
        )
        self.model = model.to(self.device).eval().requires_grad_(False)
        tokenizer = self.processor.tokenizer
        tokenizer.padding_side = "left"  # decoder-only batches (all prompts have one length)
        stops = [tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.eos_token_id]
        self._stop = sorted({s for s in stops if s is not None and s != tokenizer.unk_token_id})
        self._pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self._stop[0]
        self.num_image_tokens = image_tokens(self.model.config.vision_config)

    def __call__(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        check_images(images, prompts, "OcrModelReward")
        targets = [quoted_target(p) for p in prompts]  # a prompt without quotes fails first
        texts = self.recognise(images)
        return np.array([ocr_score(r, t) for r, t in zip(texts, targets, strict=True)], np.float32)

    def recognise(self, images: np.ndarray) -> list[str]:
        """What GOT-OCR 2.0 reads in each uint8 ``(H, W, 1|3)`` image of the batch.

        Raises:
            ValueError: ``images`` is not a uint8 ``(N, H, W, 1|3)`` array.
        """
        count = images.shape[0] if isinstance(images, np.ndarray) and images.ndim else 0
        check_images(images, [""] * count, "OcrModelReward")
        texts: list[str] = []
        for start in range(0, count, self.batch_size):
            batch = images[start : start + self.batch_size]
            texts += self._read([_rgb(image) for image in batch])
        return texts

    def _read(self, images: list[Image.Image]) -> list[str]:
        import torch

        inputs = self.processor(
            images, return_tensors="pt", num_image_tokens=self.num_image_tokens
        ).to(self.device)
        with torch.inference_mode():
            out = self.model.generate(
                input_ids=inputs["input_ids"],
                attention_mask=inputs["attention_mask"],
                pixel_values=inputs["pixel_values"].to(self.dtype),
                do_sample=False,
                num_beams=1,
                max_new_tokens=self.max_new_tokens,
                eos_token_id=self._stop,
                pad_token_id=self._pad,
            )
        new = out[:, inputs["input_ids"].shape[1] :]
        return [t.strip() for t in self.processor.batch_decode(new, skip_special_tokens=True)]


def _dtype(dtype: torch.dtype | str | None, device: torch.device) -> torch.dtype:
    """``dtype`` as a ``torch.dtype``; None: bfloat16 on CUDA, float32 elsewhere."""
    import torch

    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    value = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(
            f"OcrModelReward: dtype must be a floating torch.dtype or its name (e.g. "
            f"'bfloat16', 'float32'), got {dtype!r}"
        )
    return value


def _rgb(image: np.ndarray) -> Image.Image:
    """An ``(H, W, 1|3)`` uint8 image as an RGB PIL image."""
    return Image.fromarray(image[..., 0] if image.shape[-1] == 1 else image).convert("RGB")
