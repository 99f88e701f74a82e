"""LoRA training of the tiny policy (peft) beside full fine-tuning."""

import dataclasses

import pytest
import torch

from spotlight.config import GRPOConfig, PolicyConfig, SamplerConfig
from spotlight.flow.grpo import group_advantages
from spotlight.flow.sampler import sample
from spotlight.flow.update import grpo_update
from spotlight.flow.weights import WeightsHeader, checksum, policy_bytes, unpack_state
from spotlight.policies import make_policy
from spotlight.policies.base import LORA_TARGETS
from spotlight.policies.tiny import TinyLoRA, TinyPolicy

from .conftest import SMALL
from .test_sampler import same

LORA = {"lora_rank": 4, "lora_alpha": 8.0}
OPTIONS = {**dataclasses.asdict(SMALL), **LORA}
CFG = SamplerConfig(num_steps=4, eta=0.7, batch_size=4)


@pytest.fixture
def lora_policy() -> TinyPolicy:
    return make_policy(PolicyConfig(name="tiny", init_seed=7, options=OPTIONS))


def _velocity(policy, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, *policy.latent_shape, generator=gen)
    with torch.no_grad():
        return policy.velocity(x, torch.tensor([0.3, 0.9]), policy.encode_prompts(["a", "b"]))


def _train_step(policy, lr=1e-2):
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=lr)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, *policy.latent_shape, generator=gen)
    v = policy.velocity(x, torch.tensor([0.3, 0.9]), policy.encode_prompts(["a", "b"]))
    v.square().mean().backward()
    opt.step()
    return opt


def test_only_the_targeted_lora_weights_are_trainable(lora_policy, small_policy):
    assert lora_policy.lora == TinyLoRA(rank=4, alpha=8.0, targets=LORA_TARGETS)
    trainable = {n for n, p in lora_policy.named_parameters() if p.requires_grad}
    assert {id(p) for p in lora_policy.trainable_parameters()} == {
        id(p) for p in lora_policy.parameters() if p.requires_grad
    }
    modules = {n.rsplit(".lora_", 1)[0].removeprefix("transformer.") for n in trainable}
    blocks = range(SMALL.num_layers)
    want = {f"transformer_blocks.{b}.attn.{t}" for b in blocks for t in LORA_TARGETS}
    for text_only in ("add_q_proj", "to_add_out"):  # last block: would get no gradient
        want.discard(f"transformer_blocks.{SMALL.num_layers - 1}.attn.{text_only}")
    assert modules == want
    assert all(".lora_A." in n or ".lora_B." in n for n in trainable) and len(trainable) == 28
    assert sum(p.numel() for p in lora_policy.trainable_parameters()) < 0.05 * sum(
        p.numel() for p in lora_policy.parameters()
    )
    assert all(p.requires_grad for p in small_policy.parameters())  # full fine-tuning: all
    only_q = make_policy(
        PolicyConfig(options={**OPTIONS, "lora_targets": ["to_q", "img_mlp.net.2"]})
    )
    names = {n.rsplit(".lora_", 1)[0] for n, p in only_q.named_parameters() if p.requires_grad}
    assert sorted(n.removeprefix("transformer.transformer_blocks.") for n in names) == sorted(
        [f"{b}.attn.to_q" for b in blocks] + [f"{b}.img_mlp.net.2" for b in blocks]
    )


def test_at_init_the_velocity_is_the_base_velocity(lora_policy, small_policy):
    assert torch.equal(_velocity(lora_policy), _velocity(small_policy))
    ref = lora_policy.frozen_reference()
    assert ref.lora is None and not ref.trainable_parameters()
    assert torch.equal(_velocity(ref), _velocity(small_policy))


def test_one_optimizer_step_moves_only_the_adapters(lora_policy, small_policy):
    base = {k: v.clone() for k, v in lora_policy.base_state_dict().items()}
    before = _velocity(lora_policy)
    _train_step(lora_policy)
    lora_b = [p for n, p in lora_policy.named_parameters() if ".lora_B." in n]
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in lora_b)
    assert all(p.grad is None for p in lora_policy.parameters() if not p.requires_grad)
    assert not torch.equal(_velocity(lora_policy), before)
    after = lora_policy.base_state_dict()
    assert after.keys() == small_policy.state_dict().keys()
    assert all(torch.equal(v, after[k]) for k, v in base.items())
    # the KL reference is the base model, also after training
    assert torch.equal(_velocity(lora_policy.frozen_reference()), _velocity(small_policy))


def test_lora_weights_round_trip_and_sample_bit_identically(lora_policy, tmp_path):
    _train_step(lora_policy)
    want = sample(lora_policy, ["a cat", "a dog"], [1, 2], CFG)
    path = tmp_path / "lora.safetensors"
    lora_policy.save(path)
    loaded = TinyPolicy.load(path)  # what `spotlight eval --checkpoint` does
    assert loaded.lora == lora_policy.lora and loaded.config == SMALL
    got = sample(loaded, ["a cat", "a dog"], [1, 2], CFG)
    assert all(same(a, b) for a, b in zip(want, got, strict=True))
    # the weight broadcast: bytes of the state, loaded by a fresh policy of the same config
    data = policy_bytes(lora_policy)
    state = unpack_state(data, WeightsHeader(1, checksum(data), len(data), 1))
    for assign in (False, True):  # a sampler replica / an SP worker (elastic._build_policy)
        fresh = make_policy(PolicyConfig(name="tiny", init_seed=3, options=OPTIONS))
        fresh.load_state_dict({k: v.clone() for k, v in state.items()}, assign=assign)
        got = sample(fresh, ["a cat", "a dog"], [1, 2], CFG)
        assert all(same(a, b) for a, b in zip(want, got, strict=True))
    (tmp_path / "broadcast.safetensors").write_bytes(data)  # the bytes are a checkpoint too
    assert TinyPolicy.load(tmp_path / "broadcast.safetensors").lora == lora_policy.lora


def test_lora_on_top_of_a_base_checkpoint(small_policy, tmp_path):
    path = tmp_path / "base.safetensors"
    small_policy.save(path)
    cfg = PolicyConfig(name="tiny", checkpoint=str(path), options=LORA)
    torch.manual_seed(1)
    policy = make_policy(cfg)
    assert policy.lora is not None and torch.equal(_velocity(policy), _velocity(small_policy))
    torch.manual_seed(2)  # the adapters' init is seeded, not global: every process builds these
    again = make_policy(cfg)
    assert all(torch.equal(v, again.state_dict()[k]) for k, v in policy.state_dict().items())
    with pytest.raises(ValueError, match="expected"):  # architecture options are still checked
        make_policy(dataclasses.replace(cfg, options={**LORA, "num_layers": 3}))
    with pytest.raises(ValueError, match="does not fit the tiny LoRA"):
        policy.load_state_dict(small_policy.state_dict())  # a base state into a LoRA policy
    lora_path = tmp_path / "lora.safetensors"
    policy.save(lora_path)
    with pytest.raises(ValueError, match="holds LoRA adapters"):
        make_policy(PolicyConfig(checkpoint=str(lora_path), options={"lora_rank": 2}))


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"lora_rank": -1}, "LoRA rank must be an int >= 1"),
        ({"lora_rank": 2.5}, "LoRA rank must be an int >= 1"),
        ({"lora_alpha": 4.0}, r"\['lora_alpha'\] need lora_rank >= 1"),
        ({"lora_rank": 2, "lora_alpha": 0}, "LoRA alpha must be a number > 0"),
        ({"lora_rank": 2, "lora_targets": []}, "non-empty list of module names"),
        ({"lora_rank": 2, "lora_targets": ["to_q", "attn"]}, r"\['attn'\] match no linear"),
        ({"lora_dropout": 0.1}, "bad tiny policy options"),
    ],
)
def test_bad_lora_options_are_named(options, match):
    with pytest.raises(ValueError, match=match):
        make_policy(PolicyConfig(options={**dataclasses.asdict(SMALL), **options}))


def test_a_grpo_update_trains_the_adapters(lora_policy):
    prompts = ["a cat"] * 4 + ["a dog"] * 4
    trajs = sample(lora_policy, prompts, list(range(8)), dataclasses.replace(CFG, batch_size=8))
    adv = group_advantages(torch.linspace(0, 1, 8).view(2, 4))
    base = {k: v.clone() for k, v in lora_policy.base_state_dict().items()}
    lora = {k: v.clone() for k, v in lora_policy.state_dict().items() if ".lora_" in k}
    ref = lora_policy.frozen_reference()
    opt = torch.optim.AdamW(lora_policy.trainable_parameters(), lr=1e-3)
    cfg = GRPOConfig(group_size=4, train_batch_size=8, timestep_fraction=1.0, kl_beta=0.1)
    stats = grpo_update(lora_policy, opt, trajs, adv, cfg, seed=0, ref_policy=ref)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4) and stats["kl"] == 0.0
    after = lora_policy.state_dict()
    assert any(not torch.equal(v, after[k]) for k, v in lora.items())
    assert all(torch.equal(v, lora_policy.base_state_dict()[k]) for k, v in base.items())
