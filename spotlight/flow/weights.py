"""Versioned policy weights as checksummed bytes: what the weight broadcast carries.

The trainer packs the trainable state into safetensors bytes and publishes them with their
version and sha256. Every reader verifies the checksum before loading, so a partial or corrupted
transfer raises :class:`WeightsCorrupted` instead of being sampled from (or trained on).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

# torch and safetensors are imported inside the functions that need them: the WeightBroadcast
# actor only checks checksums, and a process without torch is ~0.3 GB smaller.


class WeightsCorrupted(ValueError):
    """The bytes of a weights version do not match their checksum or cannot be parsed."""


@dataclass(frozen=True)
class WeightsHeader:
    """What the broadcast knows about a version without moving the bytes."""

    version: int
    sha256: str
    num_bytes: int
    iteration: int
    """Iterations trained when these weights were made (0 = the starting weights)."""


def pack_state(state: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """Serialize a state dict (tensors moved to the CPU, contiguous), with optional metadata
    (a tiny policy's architecture, so the bytes are also a loadable checkpoint file)."""
    from safetensors.torch import save

    return save({k: v.detach().contiguous().cpu() for k, v in state.items()}, metadata=metadata)


def policy_bytes(policy) -> bytes:
    """A policy's trainable state as bytes, with its checkpoint metadata when it has some."""
    meta = policy.checkpoint_metadata() if hasattr(policy, "checkpoint_metadata") else None
    return pack_state(policy.state_dict(), meta)


def checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def unpack_state(data: bytes, header: WeightsHeader) -> dict[str, torch.Tensor]:
    """Verify ``data`` against ``header`` and deserialize it."""
    if len(data) != header.num_bytes:
        raise WeightsCorrupted(
            f"weights v{header.version}: got {len(data)} bytes, expected {header.num_bytes}"
            " (partial transfer)"
        )
    if checksum(data) != header.sha256:
        raise WeightsCorrupted(f"weights v{header.version}: sha256 mismatch (corrupted transfer)")
    from safetensors.torch import load

    try:
        return load(data)
    except Exception as e:  # safetensors raises its own error types
        raise WeightsCorrupted(f"weights v{header.version}: unreadable ({e})") from None
