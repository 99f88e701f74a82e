"""A byte-level text encoder with learned embeddings: needs no tokenizer files and no download."""

from __future__ import annotations

import torch
from torch import nn

PAD_ID = 0
BOS_ID = 1
BYTE_OFFSET = 2
VOCAB_SIZE = BYTE_OFFSET + 256


def tokenize(prompts: list[str], max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """UTF-8 bytes after a BOS token, right-padded to ``max_len``: ``(ids, mask)``, each (B, L).

    Raises:
        ValueError: a prompt is empty (or only whitespace) or longer than ``max_len - 1`` bytes.
    """
    ids = torch.full((len(prompts), max_len), PAD_ID, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if not isinstance(prompt, str) or not prompt.strip():
            raise ValueError(f"prompt {row} is empty: every prompt needs some text")
        data = prompt.encode("utf-8")
        if len(data) > max_len - 1:
            raise ValueError(
                f"prompt {row} is {len(data)} bytes; the text encoder takes at most {max_len - 1}"
                f" (max_text_len={max_len}): {prompt[:40]!r}..."
            )
        ids[row, 0] = BOS_ID
        ids[row, 1 : 1 + len(data)] = torch.tensor(list(data), dtype=torch.long) + BYTE_OFFSET
    return ids, ids != PAD_ID


class ByteTextEncoder(nn.Module):
    """Token embedding + learned position embedding; the DiT's joint attention does the rest."""

    def __init__(self, dim: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.tok = nn.Embedding(VOCAB_SIZE, dim)
        self.pos = nn.Embedding(max_len, dim)
        nn.init.normal_(self.tok.weight, std=1.0)
        nn.init.normal_(self.pos.weight, std=0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.tok(ids) + self.pos(positions)[None]

    def null_ids(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The unconditional prompt: BOS alone (never an all-masked row, which would give NaNs)."""
        ids = torch.full((batch_size, self.max_len), PAD_ID, dtype=torch.long)
        ids[:, 0] = BOS_ID
        return ids, ids != PAD_ID
