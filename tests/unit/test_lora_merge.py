"""Sampling with the LoRA merged into the bf16 base weights (``--merge-lora``): it agrees with the
unmerged sampler within bf16 rounding, every version is merged into the clean base, and
Flow-GRPO refuses it."""

from __future__ import annotations

import pytest
import torch
from tiny_hf.qwen_image import save_tiny_qwen_image

from spotlight.config import SamplerConfig
from spotlight.flow.sampler import sample
from spotlight.job.options import RayOptions, check_merge_lora
from spotlight.policies.lora_merge import MergedLoRA
from spotlight.policies.qwen_image import QwenImagePolicy
from spotlight.policies.tiny import TinyLoRA, TinyPolicy

from .conftest import SMALL

SIZE, MAX_LEN = 64, 24
PROMPTS, SEEDS = ["a cat", "a red cat on a mat", "a mat"], [3, 4, 5]
SAMPLER = SamplerConfig(num_steps=3, batch_size=3, guidance_scale=2.0)
BF16_TOLERANCE = 0.05
"""Largest |merged - unmerged| allowed in the final latents (unit scale): a few bf16 roundings
(2^-8 relative) of the weights, carried through 3 steps with CFG."""


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> list[QwenImagePolicy]:
    """Three policies of one tiny random Qwen-Image (bf16 base, LoRA rank 4)."""
    folder = save_tiny_qwen_image(tmp_path_factory.mktemp("qwen_image"))
    return [
        QwenImagePolicy.from_pretrained(
            folder, lora_rank=4, lora_alpha=8, height=SIZE, width=SIZE, max_sequence_length=MAX_LEN
        )
        for _ in range(3)
    ]


def _version(policy, seed: int) -> dict[str, torch.Tensor]:
    """A trained-looking version: every adapter weight random (B too, so the LoRA acts)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) * 0.2 for k, v in policy.state_dict().items()}


def _latents(policy) -> torch.Tensor:
    return torch.stack([tr.latents for tr in sample(policy, PROMPTS, SEEDS, SAMPLER)])


def test_merged_samples_agree_with_unmerged_within_bf16_and_versions_merge_from_clean(
    policies,
) -> None:
    unmerged, twice, once = policies
    assert twice.transformer.dtype == torch.bfloat16
    first, second = _version(unmerged, 1), _version(unmerged, 2)
    unmerged.load_state_dict(first)
    loader = MergedLoRA(twice)
    loader.load(first)
    ref = _latents(unmerged)
    gap = (ref - _latents(twice)).abs().max().item()
    print(f"max |merged - unmerged| of the final latents: {gap:.3g}")
    assert 0 < gap < BF16_TOLERANCE  # rounded, not the same computation
    unmerged.load_state_dict(second)
    assert (ref - _latents(unmerged)).abs().max().item() > 10 * gap  # versions differ more
    loader.load(second)  # a newer version: merged into the clean base, not into the first
    merged_once = MergedLoRA(once)
    merged_once.load(second)
    for (name, a), b in zip(loader.layers.items(), merged_once.layers.values(), strict=True):
        assert torch.equal(a.base_layer.weight, b.base_layer.weight), name
    assert torch.equal(_latents(twice), _latents(once))


def test_a_tiny_lora_policy_merges_too_and_full_fine_tuning_loads_plainly() -> None:
    lora = TinyPolicy(SMALL, seed=0, lora=TinyLoRA(rank=2))
    state = {k: v + 0.05 if ".lora_B" in k else v for k, v in lora.state_dict().items()}
    unmerged = TinyPolicy(SMALL, seed=0, lora=TinyLoRA(rank=2))
    unmerged.load_state_dict(state)
    merger = MergedLoRA(lora)
    merger.load(state)
    merger.load(state)  # the state carries the base weights: still one merge
    prompts, seeds, cfg = ["a b"], [1], SamplerConfig(num_steps=2, batch_size=1)
    ref = sample(unmerged, prompts, seeds, cfg)[0].latents
    assert (sample(lora, prompts, seeds, cfg)[0].latents - ref).abs().max() < 1e-4
    full = TinyPolicy(SMALL, seed=0)
    plain = MergedLoRA(full)
    assert not plain.active
    plain.load({k: v * 0 for k, v in full.state_dict().items()})
    assert all(float(v.abs().sum()) == 0 for v in full.state_dict().values())


@pytest.mark.parametrize(("loss", "ok"), [("flow_grpo", False), ("nft", True), ("awm", True)])
def test_flow_grpo_refuses_merged_sampling(loss: str, ok: bool) -> None:
    check_merge_lora(RayOptions(), loss)  # off: every loss
    if ok:
        check_merge_lora(RayOptions(merge_lora=True), loss)
    else:
        with pytest.raises(ValueError, match=r"--merge-lora: grpo\.loss 'flow_grpo' needs"):
            check_merge_lora(RayOptions(merge_lora=True), loss)


def test_random_weights_policy_is_the_same_in_every_process_and_checks_its_size() -> None:
    from spotlight.config import PolicyConfig
    from spotlight.policies import make_policy

    options = {"random_weights": "tiny", "height": SIZE, "width": SIZE, "lora_rank": 2}
    a, b = (make_policy(PolicyConfig(name="qwen-image", options=options)) for _ in range(2))
    assert a.latent_shape == (16, SIZE // 8, SIZE // 8) and a.transformer.dtype == torch.float32
    for (name, x), y in zip(a.named_parameters(), b.parameters(), strict=True):
        assert torch.equal(x, y), name
    with pytest.raises(ValueError, match="random_weights must be one of"):
        make_policy(PolicyConfig(name="qwen-image", options={**options, "random_weights": "xl"}))
