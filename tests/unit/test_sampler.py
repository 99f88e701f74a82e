"""Seeds determine trajectories: determinism, batch invariance, stop/serialize/resume."""

import subprocess
import sys
import textwrap

import pytest
import torch

from spotlight.config import SamplerConfig
from spotlight.flow.sampler import Trajectory, advance, sample, start_trajectory

from .conftest import REAL_SLEEP

CFG = SamplerConfig(num_steps=6, eta=0.7, shift=2.0, batch_size=4)


def same(a: Trajectory, b: Trajectory) -> bool:
    return (
        torch.equal(a.latents, b.latents)
        and a.log_probs == b.log_probs
        and all(torch.equal(x, y) for x, y in zip(a.xs, b.xs, strict=True))
    )


def test_same_prompt_and_seed_give_identical_trajectories(small_policy):
    prompts, seeds = ["a cat", "a dog", "a cat"], [3, 3, 4]
    a = sample(small_policy, prompts, seeds, CFG)
    b = sample(small_policy, prompts, seeds, CFG)
    assert all(same(x, y) for x, y in zip(a, b, strict=True))
    assert all(tr.done and len(tr.xs) == 7 and len(tr.log_probs) == 6 for tr in a)
    assert not torch.equal(a[0].latents, a[2].latents)  # another seed, another image
    assert not torch.equal(a[0].latents, a[1].latents)  # another prompt, another image


def test_a_sample_does_not_depend_on_its_batch(small_policy):
    alone = sample(small_policy, ["a red square"], [11], CFG)[0]
    crowd = sample(
        small_policy, ["x", "yy", "a red square", "zzz", "w", "v"], [1, 2, 11, 4, 5, 6], CFG
    )
    assert same(alone, crowd[2])


def test_classifier_free_guidance_is_deterministic_and_matters(small_policy):
    cfg = SamplerConfig(num_steps=4, guidance_scale=3.0, batch_size=2)
    a = sample(small_policy, ["a star"], [5], cfg)[0]
    b = sample(small_policy, ["a star"], [5], cfg)[0]
    plain = sample(small_policy, ["a star"], [5], SamplerConfig(num_steps=4, batch_size=2))[0]
    assert same(a, b)
    assert not torch.equal(a.latents, plain.latents)


def test_serialization_round_trip_keeps_everything(small_policy):
    tr = start_trajectory("a sign", 9, small_policy.latent_shape, CFG, weights_version=3)
    advance(small_policy, [tr], num_steps=2)
    back = Trajectory.from_bytes(tr.to_bytes())
    assert (back.prompt, back.seed, back.weights_version, back.step, back.sampler) == (
        "a sign",
        9,
        3,
        2,
        CFG,
    )
    assert same(tr, back) and torch.equal(tr.generator_state, back.generator_state)


def test_stop_after_k_and_resume_in_another_process(small_policy, tmp_path, monkeypatch):
    """Interrupted at step k, serialized, finished by a fresh Python: bit-identical."""
    monkeypatch.setattr("time.sleep", REAL_SLEEP)  # subprocess.run(timeout=) polls with sleep
    full = sample(small_policy, ["a blue circle", "a sign"], [21, 22], CFG)
    part = [
        start_trajectory(p, s, small_policy.latent_shape, CFG, 0)
        for p, s in (("a blue circle", 21), ("a sign", 22))
    ]
    advance(small_policy, part, num_steps=3)
    assert [tr.step for tr in part] == [3, 3]
    ckpt = tmp_path / "policy.safetensors"
    small_policy.save(ckpt)
    for i, tr in enumerate(part):
        (tmp_path / f"state{i}.bin").write_bytes(tr.to_bytes())
    script = textwrap.dedent(f"""
        from pathlib import Path
        from spotlight.policies.tiny import TinyPolicy
        from spotlight.flow.sampler import Trajectory, advance
        d = Path({str(tmp_path)!r})
        policy = TinyPolicy.load(d / "policy.safetensors")
        # resumed in a different batch: one at a time
        for i in range(2):
            tr = Trajectory.from_bytes((d / f"state{{i}}.bin").read_bytes())
            advance(policy, [tr])
            (d / f"done{{i}}.bin").write_bytes(tr.to_bytes())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)
    for i in range(2):
        resumed = Trajectory.from_bytes((tmp_path / f"done{i}.bin").read_bytes())
        assert same(resumed, full[i])


def test_bad_inputs_are_named(small_policy):
    with pytest.raises(ValueError, match="seed"):
        start_trajectory("a", -1, small_policy.latent_shape, CFG)
    with pytest.raises(ValueError, match="num_steps"):
        start_trajectory("a", 1, small_policy.latent_shape, SamplerConfig(num_steps=1))
    with pytest.raises(ValueError, match="2 prompts but 1 seeds"):
        sample(small_policy, ["a", "b"], [1], CFG)
    with pytest.raises(ValueError, match="empty"):
        sample(small_policy, [""], [1], CFG)
