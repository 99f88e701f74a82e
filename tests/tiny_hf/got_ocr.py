"""A tiny random GOT-OCR 2.0 folder, laid out like stepfun-ai/GOT-OCR-2.0-hf, built offline.

The model is ``GotOcr2ForConditionalGeneration`` of a tiny config (a 2-layer SAM-style vision
encoder on 64x64 images, a 2-layer Qwen2 decoder); the tokenizer is a byte-level BPE trained here
on a few words plus GOT's special tokens (tokenizer.json); the processor is ``GotOcr2Processor``
with the PIL image processor (torchvision is not needed). ``OcrModelReward(folder)`` loads the
folder exactly as it loads the real one. Unlike the real model's, the input and output embeddings
are not tied: a random decoder with tied embeddings repeats its last input token forever.
"""

from __future__ import annotations

from pathlib import Path

IMAGE_SIZE = 64
"""Side of the square the processor resizes every image to."""
PATCH = 4
"""Vision patch side: a 16x16 grid, 4x4 = 16 image tokens after the projector's two stride-2
convolutions (the real model: 1024 / 16 = 64, 256 tokens)."""
WEIGHT_STD = 0.2
"""Standard deviation of the random weight matrices (biases and norms keep their init)."""
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>", "<imgpad>")
CORPUS = (
    "system You should follow the instructions carefully and explain your answers in detail. "
    "user OCR: assistant OPEN LATE COFFEE HELLO WORLD SALE the quick brown fox jumps 0123456789"
)


def _tokenizer():
    """GOT's tokenizer kind (tokenizer.json, byte-level BPE) with a vocabulary of ~300 tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator([CORPUS], trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=list(SPECIALS[1:]),
    )


def save_tiny_ocr_model(folder: Path, seed: int = 0) -> Path:
    """Write a tiny random GOT-OCR 2.0 model + processor to ``folder``; return ``folder``.

    Args:
        folder: where to save (config.json, model.safetensors, processor_config.json,
            tokenizer.json, ...); created if missing.
        seed: seeds the random weights.
    """
    import torch
    from transformers import (
        GotOcr2Config,
        GotOcr2ForConditionalGeneration,
        GotOcr2ImageProcessorPil,
        GotOcr2Processor,
    )

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer()
    pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
    config = GotOcr2Config(
        vision_config={
            "hidden_size": 16,
            "output_channels": 8,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "image_size": IMAGE_SIZE,
            "patch_size": PATCH,
            "window_size": 4,
            "global_attn_indexes": [1],
            "mlp_dim": 32,
        },
        text_config={
            "model_type": "qwen2",
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "max_position_embeddings": 256,
            "tie_word_embeddings": False,
            "bos_token_id": pad,
            "eos_token_id": eos,
            "pad_token_id": pad,
        },
        image_token_index=tokenizer.convert_tokens_to_ids("<imgpad>"),
        image_seq_length=(IMAGE_SIZE // PATCH // 4) ** 2,
        tie_word_embeddings=False,
    )
    model = GotOcr2ForConditionalGeneration(config).eval()
    # The default init gives the vision tower weights of std 1e-10, so every image would read
    # the same: redraw every matrix so that what the model "reads" depends on the image.
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim > 1:
                param.copy_(torch.randn(param.shape, generator=generator) * WEIGHT_STD)
    model.save_pretrained(folder)
    image_processor = GotOcr2ImageProcessorPil(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    GotOcr2Processor(image_processor=image_processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder
