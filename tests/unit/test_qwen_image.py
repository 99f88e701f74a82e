"""QwenImagePolicy on tiny random Qwen-Image components, loaded through the real from_pretrained.

Nothing is downloaded: the components are built from tiny configs of the real classes, and the
byte-level BPE tokenizer's vocab.json + merges.txt are trained here on the pipeline's template.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from diffusers import (
    FlowMatchEulerDiscreteScheduler,
    QwenImagePipeline,
)
from tiny_hf.qwen_image import save_tiny_qwen_image

from spotlight.config import PolicyConfig, SamplerConfig
from spotlight.flow.sampler import sample
from spotlight.policies import make_policy
from spotlight.policies.base import TextCond, pack_patches, unpack_patches
from spotlight.policies.qwen_image import QwenImagePolicy

SIZE = 64
"""Image side in pixels: 8x8 latents, 4x4 = 16 image tokens."""
MAX_LEN = 24
"""Text tokens per prompt in these tests."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_qwen_image(tmp_path_factory.mktemp("qwen_image"))


@pytest.fixture(scope="module")
def policy(model_dir: Path) -> QwenImagePolicy:
    return QwenImagePolicy.from_pretrained(
        model_dir, lora_rank=4, height=SIZE, width=SIZE, max_sequence_length=MAX_LEN
    )


def _lora_random(policy: QwenImagePolicy, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) * 0.1 for k, v in policy.state_dict().items()}


def test_loads_bf16_base_with_float32_lora(policy: QwenImagePolicy) -> None:
    assert policy.name == "qwen-image"
    assert policy.latent_shape == (16, SIZE // 8, SIZE // 8)
    assert policy.device == torch.device("cpu")
    assert policy.transformer.dtype == policy.text_encoder.dtype == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in policy.trainable_parameters())


def test_packing_matches_the_pipeline() -> None:
    x = torch.randn(2, 16, 6, 8)
    tokens = QwenImagePipeline._pack_latents(x, 2, 16, 6, 8)
    assert torch.equal(pack_patches(x, 2), tokens)
    unpacked = QwenImagePipeline._unpack_latents(tokens, 6 * 8, 8 * 8, 8)[:, :, 0]
    assert torch.equal(unpack_patches(tokens, 16, 6, 8, 2), unpacked)


def test_velocity_is_float32_and_validates(policy: QwenImagePolicy) -> None:
    x = torch.randn(2, *policy.latent_shape)
    cond = policy.encode_prompts(["a red cat", "a mat"])
    with torch.no_grad():
        v = policy.velocity(x, torch.tensor([0.9, 0.3]), cond)
    assert v.dtype == torch.float32 and v.shape == x.shape and bool(v.isfinite().all())
    with pytest.raises(ValueError, match="latents must have shape"):
        policy.velocity(torch.randn(2, 16, 4, 4), torch.tensor([0.5, 0.5]), cond)
    with pytest.raises(ValueError, match=r"t must lie in \[0, 1\]"):
        policy.velocity(x, torch.tensor([0.5, 2.0]), cond)
    with pytest.raises(ValueError, match="1 prompts for 2 latents"):
        policy.velocity(x, torch.tensor([0.5, 0.5]), cond.index([0]))


def test_only_lora_is_trainable_and_gets_gradients(policy: QwenImagePolicy) -> None:
    lora = policy.trainable_parameters()
    assert {id(p) for p in policy.parameters() if p.requires_grad} == {id(p) for p in lora}
    assert lora and all("lora_" in k for k in policy.state_dict())
    x = torch.randn(2, *policy.latent_shape)
    v = policy.velocity(x, torch.tensor([0.7, 0.2]), policy.encode_prompts(["a cat", "a mat"]))
    v.square().mean().backward()
    try:
        assert all(p.grad is not None for p in lora)  # none is cut off
        assert any(float(p.grad.abs().sum()) > 0 for p in lora)  # lora_B (lora_A's is 0 at B=0)
        assert all(p.grad is None for p in policy.parameters() if not p.requires_grad)
    finally:
        for p in lora:
            p.grad = None


def test_flow_grpo_targets_add_the_mlps_and_every_adapter_learns(model_dir: Path) -> None:
    from spotlight.policies.base import FLOW_GRPO_LORA_TARGETS

    policy = QwenImagePolicy.from_pretrained(
        model_dir,
        lora_rank=4,
        height=SIZE,
        width=SIZE,
        max_sequence_length=MAX_LEN,
        lora_targets=FLOW_GRPO_LORA_TARGETS,
    )
    state = policy.state_dict()
    blocks = len(policy.transformer.transformer_blocks)
    last = f"transformer_blocks.{blocks - 1}."
    # 12 targets x (lora_A, lora_B) per block; not the last block's text-only ones (dead)
    assert len(state) == (blocks * 12 - 4) * 2
    assert any(".img_mlp.net.2." in k for k in state) and any(".txt_mlp.net.0" in k for k in state)
    assert not any(k.startswith(last) and ".txt_mlp." in k for k in state)
    lora = policy.trainable_parameters()
    with torch.no_grad():  # lora_B starts at 0: give every adapter a path to the output
        for name, p in policy.transformer.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1, generator=torch.Generator().manual_seed(len(name)))
    x = torch.randn(2, *policy.latent_shape)
    v = policy.velocity(x, torch.tensor([0.7, 0.2]), policy.encode_prompts(["a cat", "a mat"]))
    v.square().mean().backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in lora)


def test_state_dict_round_trips_and_changes_the_output(policy: QwenImagePolicy) -> None:
    state = policy.state_dict()
    blocks = len(policy.transformer.transformer_blocks)
    # 8 projections x (lora_A, lora_B) per block, but the last block's add_q_proj and
    # to_add_out (dead: they only feed the text stream, discarded after the last block)
    assert len(state) == (blocks * 8 - 2) * 2
    saved = {k: v.clone() for k, v in state.items()}
    x, t = torch.randn(1, *policy.latent_shape), torch.tensor([0.5])
    cond = policy.encode_prompts(["a cat"])
    with torch.no_grad():
        before = policy.velocity(x, t, cond)
        policy.load_state_dict(_lora_random(policy, 1))
        changed = policy.velocity(x, t, cond)
        policy.load_state_dict(saved)
        after = policy.velocity(x, t, cond)
    assert not torch.equal(before, changed)
    assert torch.equal(before, after)
    assert all(torch.equal(policy.state_dict()[k], v) for k, v in saved.items())


def test_frozen_reference_is_the_base_model_without_a_copy(policy: QwenImagePolicy) -> None:
    ref = policy.frozen_reference()  # what ReferenceLoop uses for the KL term
    x, t = torch.randn(1, *policy.latent_shape), torch.tensor([0.5])
    cond = policy.encode_prompts(["a cat"])
    saved = {k: v.clone() for k, v in policy.state_dict().items()}
    with torch.no_grad():
        base = ref.velocity(x, t, cond)
        # Fresh LoRA has B = 0, so the base model is the initial policy.
        assert torch.equal(base, policy.velocity(x, t, cond))
        policy.load_state_dict(_lora_random(policy, 3))
        trained = policy.velocity(x, t, cond)
        assert torch.equal(ref.velocity(x, t, cond), base)  # the reference did not move
        assert torch.equal(policy.velocity(x, t, cond), trained)  # adapters back on after it
        assert not torch.equal(trained, base)
        policy.load_state_dict(saved)


def test_load_state_dict_rejects_other_architectures(policy: QwenImagePolicy) -> None:
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    key = next(k for k in state if "lora_A" in k)
    with pytest.raises(ValueError, match="other shapes"):
        policy.load_state_dict({**state, key: torch.zeros(8, state[key].shape[1])})
    with pytest.raises(ValueError, match="missing"):
        policy.load_state_dict({k: v for k, v in state.items() if k != key})
    with pytest.raises(ValueError, match="unexpected"):
        policy.load_state_dict({**state, "transformer_blocks.0.attn.to_q.weight": state[key]})


def test_encode_prompts_fixed_length_and_batch_independent(policy: QwenImagePolicy) -> None:
    tok = policy.tokenizer
    prefix = policy._template.split("{}")[0]
    assert len(tok(prefix).input_ids) == policy._drop_idx  # the tiny tokenizer is realistic
    cond = policy.encode_prompts(["a cat", "a red cat on a mat"])
    assert cond.embeds.shape == (2, MAX_LEN, 16) and cond.mask.dtype == torch.bool
    # the prompt's tokens + "<|im_end|>\n<|im_start|>assistant\n" (5 tokens), as in the pipeline
    assert cond.mask.sum(1).tolist() == [2 + 5, 6 + 5]
    assert not bool(cond.embeds[~cond.mask].any())
    alone = policy.encode_prompts(["a cat"])
    assert torch.equal(alone.embeds[0], cond.embeds[0]) and torch.equal(alone.mask[0], cond.mask[0])
    null = policy.null_cond(3)
    assert null.embeds.shape == (3, MAX_LEN, 16) and null.mask.sum(1).tolist() == [6] * 3
    assert len(TextCond.cat([cond, null])) == 5
    for bad in ["", "   "]:
        with pytest.raises(ValueError, match="prompt 1 is empty"):
            policy.encode_prompts(["a cat", bad])
    with pytest.warns(UserWarning, match="truncated"):
        long = policy.encode_prompts(["a cat " * 40])
    assert long.embeds.shape == (1, MAX_LEN, 16) and bool(long.mask.all())


def test_matches_the_pipeline_encoding_and_decoding(policy: QwenImagePolicy) -> None:
    pipe = QwenImagePipeline(
        FlowMatchEulerDiscreteScheduler(),
        policy.vae,
        policy.text_encoder,
        policy.tokenizer,
        policy.transformer,
    )
    embeds, _ = pipe.encode_prompt(["a red cat"], device="cpu", max_sequence_length=MAX_LEN)
    cond = policy.encode_prompts(["a red cat"])
    assert torch.equal(cond.embeds[0, : embeds.shape[1]], embeds[0])
    assert int(cond.mask.sum()) == embeds.shape[1]
    z = torch.randn(2, *policy.latent_shape, generator=torch.Generator().manual_seed(0))
    # QwenImagePipeline.__call__'s decode, in the VAE's dtype (bf16) like the pipeline
    latents = pipe._unpack_latents(pack_patches(z, 2), SIZE, SIZE, 8).to(policy.vae.dtype)
    mean = torch.tensor(pipe.vae.config.latents_mean).view(1, 16, 1, 1, 1).to(latents.dtype)
    inv_std = 1.0 / torch.tensor(pipe.vae.config.latents_std).view(1, 16, 1, 1, 1)
    with torch.no_grad():
        image = pipe.vae.decode(latents / inv_std.to(latents.dtype) + mean, return_dict=False)[0]
    expected = pipe.image_processor.postprocess(image[:, :, 0], output_type="np")
    diff = np.abs(policy.decode(z).astype(np.float64) - expected * 255)
    # bf16 rounding moves pixels by a few levels; a wrong un-normalization moves them by ~12 mean
    assert diff.max() < 12 and diff.mean() < 2


def test_decode_gives_uint8_images(policy: QwenImagePolicy) -> None:
    images = policy.decode(torch.randn(3, *policy.latent_shape))
    assert isinstance(images, np.ndarray) and images.dtype == np.uint8
    assert images.shape == (3, SIZE, SIZE, 3)


def test_missing_folder_says_how_to_get_the_weights(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="hf download Qwen/Qwen-Image") as e:
        QwenImagePolicy.from_pretrained(missing)
    assert str(missing) in str(e.value) and "does not exist" in str(e.value)
    with pytest.raises(FileNotFoundError, match=r"lacks model_index\.json"):
        QwenImagePolicy.from_pretrained(tmp_path)


def test_sampling_is_reproducible(policy: QwenImagePolicy) -> None:
    prompts, seeds = ["a cat", "a red cat", "a mat"], [3, 4, 3]
    config = SamplerConfig(num_steps=2, batch_size=2, guidance_scale=2.0)
    first = sample(policy, prompts, seeds, config)
    second = sample(policy, prompts[::-1], seeds[::-1], config)[::-1]
    for a, b in zip(first, second, strict=True):
        assert a.done and len(a.xs) == 3 and len(a.log_probs) == 2
        assert all(torch.equal(x, y) for x, y in zip(a.xs, b.xs, strict=True))
        assert a.log_probs == b.log_probs
    assert not torch.equal(first[0].latents, first[2].latents)  # same seed, other prompt
    assert policy.decode(torch.stack([tr.latents for tr in first])).shape == (3, SIZE, SIZE, 3)


def test_make_policy_options_and_gradient_checkpointing(
    policy: QwenImagePolicy, model_dir: Path
) -> None:
    options = {"lora_rank": 4, "height": SIZE, "width": SIZE, "max_sequence_length": MAX_LEN}
    config = PolicyConfig(
        name="qwen-image",
        checkpoint=str(model_dir),
        options={**options, "dtype": "bfloat16", "gradient_checkpointing": True},
    )
    other = make_policy(config)
    assert isinstance(other, QwenImagePolicy) and other.transformer.gradient_checkpointing
    state = _lora_random(policy, 2)
    grads = []
    for p in (policy, other):
        saved = {k: v.clone() for k, v in p.state_dict().items()}
        p.load_state_dict(state)
        x = torch.randn(1, *p.latent_shape, generator=torch.Generator().manual_seed(0))
        p.velocity(x, torch.tensor([0.4]), p.encode_prompts(["a cat"])).sum().backward()
        grads.append([q.grad.clone() for q in p.trainable_parameters()])
        for q in p.trainable_parameters():
            q.grad = None
        p.load_state_dict(saved)
    assert all(torch.equal(a, b) for a, b in zip(*grads, strict=True))
    with pytest.raises(ValueError, match="multiples of 16"):
        QwenImagePolicy.from_pretrained(model_dir, height=40, width=SIZE)


def test_lora_init_is_a_function_of_the_seed(model_dir: Path) -> None:
    def build(seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(1000 + seed)  # whatever the global RNG holds
        options = {"lora_rank": 4, "height": SIZE, "width": SIZE, "max_sequence_length": MAX_LEN}
        return QwenImagePolicy.from_pretrained(model_dir, lora_seed=seed, **options).state_dict()

    a, b, c = build(0), build(0), build(1)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
