"""Pretraining: the data stream is a function of the seed; runs are reproducible and load back."""

import dataclasses

import torch
from safetensors import safe_open

from spotlight.policies.tiny import TinyPolicy
from spotlight.tasks import get_task
from spotlight.training.pretrain import PretrainConfig, RenderedPrompts, pretrain, task_model_config


def test_rendered_stream_depends_on_seed_and_index_only():
    task = get_task("ocr-mini")
    a, b = RenderedPrompts(task, 5, 10), RenderedPrompts(task, 5, 10)
    assert a[3][0] == b[3][0] and torch.equal(a[3][1], b[3][1])
    assert a[3][0] != a[4][0]
    _, x = a[7]
    assert x.shape == (1, 32, 64) and float(x.min()) >= -1.0 and float(x.max()) <= 1.0
    val = set(task.prompts("val"))
    assert not any(a[i][0] in val for i in range(10))


def test_pretraining_is_reproducible_and_writes_loadable_checkpoints(tmp_path):
    cfg = PretrainConfig(
        task="ocr-mini",
        num_samples=32,
        batch_size=16,
        num_workers=0,
        warmup_steps=1,
        checkpoint_at=(16,),
    )
    paths = pretrain(cfg, tmp_path / "a", save_dtype=torch.float16)
    assert [p.name for p in paths] == ["ocr-mini-16.safetensors", "ocr-mini-32.safetensors"]
    again = pretrain(
        dataclasses.replace(cfg, checkpoint_at=()), tmp_path / "b", save_dtype=torch.float16
    )
    with safe_open(str(paths[-1]), "pt") as f:
        meta = f.metadata()
        assert meta["task"] == "ocr-mini" and meta["pretrain_samples"] == "32"
    one, two = TinyPolicy.load(paths[-1]), TinyPolicy.load(again[-1])
    assert one.config == task_model_config(get_task("ocr-mini"))
    assert all(torch.equal(v, two.state_dict()[k]) for k, v in one.state_dict().items())
    assert next(one.parameters()).dtype == torch.float32  # float16 on disk, float32 in memory
    fresh = TinyPolicy(one.config, seed=0)
    assert any(not torch.equal(v, fresh.state_dict()[k]) for k, v in one.state_dict().items())
