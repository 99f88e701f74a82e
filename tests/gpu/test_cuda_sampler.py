"""The reproducibility contract on a CUDA GPU (skipped without one).

cuBLAS, like the CPU kernels, picks its algorithm by shape: these tests check that the
fixed-shape forward keeps a sample's bits independent of its batch on the GPU too.
"""

import pytest
import torch

from spotlight.config import GRPOConfig, SamplerConfig
from spotlight.flow.grpo import group_advantages
from spotlight.flow.sampler import Trajectory, advance, sample, start_trajectory
from spotlight.flow.update import grpo_update
from spotlight.policies.tiny import TinyConfig, TinyPolicy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

CFG = SamplerConfig(num_steps=6, eta=0.7, shift=2.0, batch_size=8)


@pytest.fixture(scope="module")
def policy():
    return TinyPolicy(TinyConfig(), seed=3).to("cuda")


def same(a: Trajectory, b: Trajectory) -> bool:
    return torch.equal(a.latents, b.latents) and a.log_probs == b.log_probs


def test_same_seed_same_bits_and_batch_independence(policy):
    prompts = [f'a sign that says "{w}"' for w in ("ABC", "XYZ", "QRS", "ABC")]
    a = sample(policy, prompts, [1, 2, 3, 4], CFG)
    b = sample(policy, prompts, [1, 2, 3, 4], CFG)
    assert all(same(x, y) for x, y in zip(a, b, strict=True))
    alone = sample(policy, [prompts[2]], [3], CFG)[0]
    assert same(alone, a[2])


def test_stop_serialize_resume_on_gpu(policy):
    full = sample(policy, ["a cat"], [9], CFG)[0]
    part = start_trajectory("a cat", 9, policy.latent_shape, CFG)
    advance(policy, [part], num_steps=2)
    resumed = Trajectory.from_bytes(part.to_bytes())
    advance(policy, [resumed])
    assert same(resumed, full)


def test_on_policy_ratio_is_one_on_gpu(policy):
    prompts = ["a cat"] * 4 + ["a dog"] * 4
    trajs = sample(policy, prompts, list(range(8)), CFG)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-6)
    cfg = GRPOConfig(group_size=4, train_batch_size=8, timestep_fraction=1.0)
    adv = group_advantages(torch.linspace(0, 1, 8).view(2, 4))
    stats = grpo_update(policy, opt, trajs, adv, cfg, seed=0)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-4)
