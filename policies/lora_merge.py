"""Sampling with a policy's LoRA adapters merged into its base weights (``sampler.merge_lora``).

A sampler replica of an update that never reads the sampler's log-probs (DiffusionNFT, AWM)
may sample with ``W = W0 + scale * B @ A`` rounded once into the base weights' dtype (bf16 for
Qwen-Image) instead of running the float32 adapters beside every base layer: one matrix product
per projection instead of three (measured on one H200: the rank-64 adapters made the 512
recipe's sampler 2.0x slower than the bare transformer, docs/benchmarks.md).

Every weights version is merged into the clean base ``W0``, never into the last merge, so
merges do not accumulate rounding: :class:`MergedLoRA` keeps a copy of the base weights of the
adapted layers (on the CPU: 2 bytes a weight in bf16, about 27 GB for the Qwen-Image recipes'
attention and MLP targets) and restores it before each load.
"""

from __future__ import annotations

import torch
from torch import nn

ADAPTER = "default"
"""The adapter's name (peft's default: the policies add one adapter)."""


def lora_layers(transformer: nn.Module) -> dict[str, nn.Module]:
    """The transformer's peft LoRA layers, by module name."""
    from peft.tuners.lora import LoraLayer

    return {n: m for n, m in transformer.named_modules() if isinstance(m, LoraLayer)}


class MergedLoRA:
    """Loads weights versions into a policy for sampling, adapters merged (module docstring).

    After :meth:`load` the policy's adapters are disabled and its base weights hold the merge:
    its velocity is the merged model's. Use the policy for sampling only.
    """

    def __init__(self, policy):
        self.policy = policy
        self.layers = lora_layers(policy.transformer)
        self._clean: dict[str, torch.Tensor] | None = None
        """Base weights of the adapted layers before any merge (CPU copies)."""

    @property
    def active(self) -> bool:
        """Whether the policy has adapters to merge (a fully fine-tuned policy has none)."""
        return bool(self.layers)

    @torch.no_grad()
    def load(self, state: dict[str, torch.Tensor]) -> None:
        """Load ``state`` (a version, as ``policy.state_dict`` gives it) and merge it into the
        clean base weights: ``W = round(W0 + scale * B @ A)`` in the base weights' dtype."""
        if not self.active:
            self.policy.load_state_dict(state)
            return
        if self._clean is None:
            self._clean = {n: _cpu_copy(m.base_layer.weight) for n, m in self.layers.items()}
        else:
            for n, m in self.layers.items():
                m.base_layer.weight.copy_(self._clean[n])
        self.policy.load_state_dict(state)
        for m in self.layers.values():
            base = m.base_layer.weight
            delta = m.get_delta_weight(ADAPTER).to(base.device, torch.float32)
            base.copy_((base.float() + delta).to(base.dtype))
        self.policy.transformer.disable_adapters()


def _cpu_copy(weight: torch.Tensor) -> torch.Tensor:
    return weight.detach().to("cpu", copy=True)
