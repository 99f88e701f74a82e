"""The tiny policy: seeded construction, checkpoints, clear errors."""

import pytest
import torch
from safetensors.torch import save_file

from spotlight.policies.tiny import TinyConfig, TinyPolicy

from .conftest import SMALL


def test_seeded_construction(small_policy):
    again = TinyPolicy(SMALL, seed=7)
    other = TinyPolicy(SMALL, seed=8)
    ours = small_policy.state_dict()
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in ours.items())
    assert any(not torch.equal(v, other.state_dict()[k]) for k, v in ours.items())
    assert type(small_policy.transformer).__name__ == "QwenImageTransformer2DModel"


def test_checkpoint_round_trip(small_policy, tmp_path):
    path = tmp_path / "p.safetensors"
    small_policy.save(path)
    loaded = TinyPolicy.load(path)
    assert loaded.config == SMALL
    x = torch.randn(2, *small_policy.latent_shape)
    t = torch.tensor([0.3, 0.9])
    with torch.no_grad():
        a = small_policy.velocity(x, t, small_policy.encode_prompts(["a", "b"]))
        b = loaded.velocity(x, t, loaded.encode_prompts(["a", "b"]))
    assert torch.equal(a, b)


def test_checkpoint_of_another_architecture_is_refused(small_policy, tmp_path):
    bigger = TinyPolicy(
        TinyConfig(
            height=16,
            width=32,
            num_layers=3,
            num_heads=2,
            head_dim=16,
            text_dim=32,
            max_text_len=32,
        )
    )
    with pytest.raises(ValueError, match="does not fit the tiny architecture"):
        small_policy.load_state_dict(bigger.state_dict())
    path = tmp_path / "big.safetensors"
    bigger.save(path)
    with pytest.raises(ValueError, match="expected"):
        TinyPolicy.load(path, expect=SMALL)
    foreign = tmp_path / "foreign.safetensors"
    save_file({"w": torch.zeros(2)}, str(foreign))
    with pytest.raises(ValueError, match="not a tiny-policy checkpoint"):
        TinyPolicy.load(foreign)


def test_bad_inputs_are_named(small_policy):
    cond = small_policy.encode_prompts(["a", "b"])
    t = torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match=r"latents must have shape \(B, 1, 16, 32\)"):
        small_policy.velocity(torch.zeros(2, 1, 16, 16), t, cond)
    with pytest.raises(ValueError, match=r"t must lie in \[0, 1\]"):
        small_policy.velocity(torch.zeros(2, 1, 16, 32), torch.tensor([0.5, 1.5]), cond)
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        small_policy.encode_prompts(["ok", "  "])
    with pytest.raises(ValueError, match="at most 31"):
        small_policy.encode_prompts(["x" * 40])
    with pytest.raises(ValueError, match="not divisible"):
        TinyConfig(height=18)


def test_decode_is_uint8_images(small_policy):
    imgs = small_policy.decode(torch.tensor([-2.0, 0.0, 2.0]).view(3, 1, 1, 1).expand(3, 1, 16, 32))
    assert imgs.dtype.name == "uint8" and imgs.shape == (3, 16, 32, 1)
    assert imgs[:, 0, 0, 0].tolist() == [0, 128, 255]
