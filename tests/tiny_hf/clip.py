"""A tiny random CLIP in Hugging Face format, with a byte-level BPE written here (no download)."""

from __future__ import annotations

import json
from pathlib import Path


def byte_level_alphabet() -> list[str]:
    """The printable stand-ins that byte-level BPE (GPT-2, CLIP) uses for the 256 bytes."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1)]
    printable += range(ord("\u00ae"), ord("\u00ff") + 1)
    spare = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(spare)) for b in range(256)]


def write_clip_tokenizer(folder: Path, merge: tuple[str, str] = ("a", "b")) -> int:
    """A tiny CLIP BPE (vocab.json, merges.txt) in ``folder``: every byte, alone and
    word-final, one ``merge``, and the two special tokens. Returns the vocab size."""
    alphabet = byte_level_alphabet()
    pair = "".join(merge)
    tokens = [*alphabet, *(c + "</w>" for c in alphabet), pair, pair + "</w>"]
    tokens += ["<|startoftext|>", "<|endoftext|>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    a, b = merge
    (folder / "merges.txt").write_text(f"#version: 0.2\n{a} {b}\n{a} {b}</w>\n")
    return len(tokens)


def save_tiny_clip(folder: Path, merge: tuple[str, str] = ("a", "b")) -> Path:
    """A CLIP of 2 layers of width 32 (32 x 32 images, patches of 8) and its tokenizer and image
    processor, saved to ``folder`` (made if missing); returns it."""
    import torch
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab_size = write_clip_tokenizer(folder, merge)
    small = {"hidden_size": 32, "intermediate_size": 37, "num_hidden_layers": 2}
    small |= {"num_attention_heads": 2}
    config = transformers.CLIPConfig(
        text_config={
            **small,
            "vocab_size": vocab_size,
            "max_position_embeddings": 32,
            "bos_token_id": vocab_size - 2,
            "eos_token_id": vocab_size - 1,
            "pad_token_id": vocab_size - 1,
        },
        vision_config={**small, "image_size": 32, "patch_size": 8},
        projection_dim=16,
    )
    torch.manual_seed(0)
    transformers.CLIPModel(config).save_pretrained(folder)
    transformers.CLIPImageProcessorPil(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}
    ).save_pretrained(folder)
    return folder
