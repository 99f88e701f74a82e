"""Pretraining: the data stream is a function of the seed; runs are reproducible and load back."""

import dataclasses
import io
import signal
import sys

import pytest
import torch
from safetensors import safe_open

from spotlight.policies.tiny import TinyPolicy
from spotlight.tasks import get_task
from spotlight.training.pretrain import (
    STATE_FILE,
    PretrainConfig,
    RenderedPrompts,
    _Trainee,
    cpu_has_bfloat16,
    pretrain,
    task_model_config,
    warm_start_from,
)


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


def _tiny_run(**kw) -> PretrainConfig:
    base = dict(task="geneval-mini", num_samples=48, batch_size=8, num_workers=0, warmup_steps=1)
    return PretrainConfig(**{**base, **kw})


def _weights(path) -> dict[str, torch.Tensor]:
    return TinyPolicy.load(path).state_dict()


def _equal(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_in_stages_equals_one_run_bit_for_bit(tmp_path):
    whole = pretrain(_tiny_run(), tmp_path / "whole")
    staged = tmp_path / "staged"
    first = pretrain(_tiny_run(stage_samples=16), staged)
    assert first == []  # no checkpoint yet: the stage ended at 16 of 48 samples
    state = torch.load(staged / STATE_FILE, weights_only=True)
    assert state["step"] == 2
    assert pretrain(_tiny_run(stage_samples=16), staged) == []
    last = pretrain(_tiny_run(stage_samples=16), staged)
    assert [p.name for p in last] == ["geneval-mini-48.safetensors"]
    assert _equal(_weights(last[0]), _weights(whole[0]))
    # a finished run is not trained again: the same command names its checkpoint
    assert pretrain(_tiny_run(), staged) == last


def _losses(text: str) -> dict[str, str]:
    """The logged loss of each window, by its last step."""
    words = [line.split() for line in text.splitlines() if " loss " in line]
    return {w[w.index("step") + 1]: w[w.index("loss") + 1] for w in words}


def test_a_resumed_run_logs_each_windows_mean_loss_as_one_run_does(tmp_path, monkeypatch):
    """A stage ends between two log lines: the next stage's lines average over the steps of
    their own window (a resume at step 3 once divided the later windows' sums by 1)."""
    from spotlight.training import pretrain as module

    monkeypatch.setattr(module, "LOG_EVERY_STEPS", 2)
    whole, staged = io.StringIO(), io.StringIO()
    pretrain(_tiny_run(), tmp_path / "whole", log=whole)
    for _ in range(2):  # 48 samples of 8: stages of 3 steps, log lines every 2
        pretrain(_tiny_run(stage_samples=24), tmp_path / "staged", log=staged)
    one, two = _losses(whole.getvalue()), _losses(staged.getvalue())
    assert list(one) == ["2/6", "4/6", "6/6"]
    assert list(two) == ["2/6", "3/6", "4/6", "6/6"]  # 3/6: the first stage's last step
    assert one["2/6"] == two["2/6"] and one["6/6"] == two["6/6"]


def test_a_signal_during_a_step_keeps_that_step_and_the_rerun_equals_one_run(tmp_path, monkeypatch):
    from spotlight import interrupts
    from spotlight.training import pretrain as module

    whole = pretrain(_tiny_run(), tmp_path / "whole")
    calls, real = [], module._flow_loss

    def loss_then_signal(*args):
        calls.append(1)
        if len(calls) == 3:  # inside the third step: SIGINT arrives while it computes
            signal.raise_signal(signal.SIGINT)
        return real(*args)

    monkeypatch.setattr(module, "_flow_loss", loss_then_signal)
    with pytest.raises(interrupts.Interrupted) as stopped, interrupts.handled():
        pretrain(_tiny_run(), tmp_path / "run")
    assert "kept at 24 of 48 samples" in stopped.value.line  # the third step finished first
    assert torch.load(tmp_path / "run" / STATE_FILE, weights_only=True)["step"] == 3
    monkeypatch.setattr(module, "_flow_loss", real)
    again = pretrain(_tiny_run(), tmp_path / "run")
    assert _equal(_weights(again[-1]), _weights(whole[0]))


def test_a_state_of_other_settings_is_refused_by_name(tmp_path):
    pretrain(_tiny_run(stage_samples=8), tmp_path)
    with pytest.raises(ValueError, match=r"other settings \(learning_rate: 0.001 != 0.002\)"):
        pretrain(_tiny_run(learning_rate=2e-3), tmp_path)
    # settings that do not change the weights may differ
    assert pretrain(_tiny_run(stage_samples=8, num_workers=1), tmp_path) == []


def test_bfloat16_autocast_trains_other_weights_and_resumes_bit_for_bit(tmp_path):
    import json

    whole = pretrain(_tiny_run(precision="bfloat16"), tmp_path / "whole")
    plain = pretrain(_tiny_run(), tmp_path / "plain")
    bf16, fp32 = _weights(whole[0]), _weights(plain[0])
    assert all(v.dtype == torch.float32 and torch.isfinite(v).all() for v in bf16.values())
    assert not _equal(bf16, fp32)  # the products did run in bfloat16
    staged = tmp_path / "staged"
    pretrain(_tiny_run(precision="bfloat16", stage_samples=24), staged)
    last = pretrain(_tiny_run(precision="bfloat16", stage_samples=24), staged)
    assert _equal(_weights(last[0]), bf16)
    with safe_open(str(last[0]), "pt") as f:
        assert json.loads(f.metadata()["pretrain_precision_stages"]) == [[0, "bfloat16"]]
    # a state written before the field existed resumes as the default, float32
    old = tmp_path / "old"
    pretrain(_tiny_run(stage_samples=24), old)
    state = torch.load(old / STATE_FILE, weights_only=True)
    config = json.loads(state["config"])
    del config["precision"]
    torch.save({**state, "config": json.dumps(config)}, old / STATE_FILE)
    assert _equal(_weights(pretrain(_tiny_run(), old)[0]), fp32)
    with pytest.raises(ValueError, match="precision must be one of"):
        _tiny_run(precision="float16").validate()


def test_a_run_may_go_on_in_another_precision_and_records_which_steps_ran_in_which(tmp_path):
    import json

    fp32 = _weights(pretrain(_tiny_run(), tmp_path / "plain")[0])
    bf16 = _weights(pretrain(_tiny_run(precision="bfloat16"), tmp_path / "bf16")[0])
    mixed = tmp_path / "mixed"
    pretrain(_tiny_run(precision="bfloat16", stage_samples=24), mixed)
    log = io.StringIO()
    (path,) = pretrain(_tiny_run(), mixed, log=log)
    assert "resuming at 24 samples" in log.getvalue()
    assert "in float32 (steps 0-2 ran in bfloat16)" in log.getvalue()
    weights = _weights(path)
    assert not _equal(weights, fp32) and not _equal(weights, bf16)  # neither run's weights
    with safe_open(str(path), "pt") as f:
        stages = json.loads(f.metadata()["pretrain_precision_stages"])
    assert stages == [[0, "bfloat16"], [3, "float32"]]
    # a state written before the stages were recorded ran in its config's precision
    old = tmp_path / "old"
    pretrain(_tiny_run(precision="bfloat16", stage_samples=24), old)
    state = torch.load(old / STATE_FILE, weights_only=True)
    del state["precision_stages"]
    torch.save(state, old / STATE_FILE)
    (path,) = pretrain(_tiny_run(), old)
    with safe_open(str(path), "pt") as f:
        stages = json.loads(f.metadata()["pretrain_precision_stages"])
    assert stages == [[0, "bfloat16"], [3, "float32"]]
    assert _equal(_weights(path), weights)


def test_bfloat16_on_a_cpu_without_its_instructions_is_warned_before_work(tmp_path):
    intel = tmp_path / "intel"
    intel.write_text("processor\t: 0\nflags\t\t: fpu avx2 avx512f avx512_bf16 amx_tile\n")
    amd = tmp_path / "amd"
    amd.write_text("processor\t: 0\nflags\t\t: fpu avx avx2\nprocessor\t: 1\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16 i8mm\n")
    assert (cpu_has_bfloat16(str(intel)), cpu_has_bfloat16(str(amd))) == (True, False)
    assert cpu_has_bfloat16(str(arm)) is True
    assert cpu_has_bfloat16(str(tmp_path / "none")) is None
    module = sys.modules[pretrain.__module__]
    for flags, warned in ((False, True), (True, False), (None, False)):
        log = io.StringIO()
        with pytest.MonkeyPatch.context() as m:
            m.setattr(module, "cpu_has_bfloat16", lambda flags=flags: flags)
            pretrain(_tiny_run(precision="bfloat16", num_samples=8), tmp_path / f"{flags}", log=log)
        first = log.getvalue().splitlines()[0]
        assert ("no bfloat16 matrix instructions" in first) is warned
        assert ("--precision float32" in first) is warned


def test_the_architecture_can_differ_from_the_tasks_default(tmp_path):
    (path,) = pretrain(_tiny_run(num_samples=8, arch={"patch": 2, "num_layers": 2}), tmp_path)
    config = TinyPolicy.load(path).config
    assert (config.patch, config.num_layers) == (2, 2)
    assert config == task_model_config(get_task("geneval-mini"), patch=2, num_layers=2)
    with pytest.raises(ValueError, match="unknown architecture field"):
        _tiny_run(arch={"depth": 3}).validate()


def test_a_warm_start_copies_the_tensors_that_fit_another_architecture(tmp_path):
    task = get_task("geneval-mini")
    donor = TinyPolicy(task_model_config(task), seed=3)  # patch 4
    donor.save(tmp_path / "donor.safetensors")
    cfg = _tiny_run(arch={"patch": 2}, warm_start=str(tmp_path / "donor.safetensors"))
    run = _Trainee.start(cfg, task_model_config(task, patch=2), "cpu")
    cold = {k: v.clone() for k, v in run.policy.state_dict().items()}
    said = warm_start_from(run, cfg.warm_start)
    warm, theirs = run.policy.state_dict(), donor.state_dict()
    fits = {k for k in warm if k in theirs and theirs[k].shape == warm[k].shape}
    assert "img_in.weight" not in fits and len(fits) > len(warm) // 2
    assert all(torch.equal(warm[k], theirs[k]) for k in fits)
    assert all(torch.equal(warm[k], cold[k]) for k in set(warm) - fits)  # random init kept
    assert _equal(run.ema.state_dict(), warm)
    assert said.startswith(f"{len(fits)} of {len(warm)} tensors copied") and "img_in.weight" in said
    # a warm run resumes like any other, and differs from a cold one
    whole = pretrain(cfg, tmp_path / "whole")
    staged = [pretrain(dataclasses.replace(cfg, stage_samples=24), tmp_path / "s") for _ in "ab"]
    assert _equal(_weights(staged[-1][-1]), _weights(whole[-1]))
    cold_run = pretrain(dataclasses.replace(cfg, warm_start=None), tmp_path / "cold")
    assert not _equal(_weights(cold_run[-1]), _weights(whole[-1]))
    with pytest.raises(ValueError, match="init and warm_start are exclusive"):
        dataclasses.replace(cfg, init=cfg.warm_start).validate()


def test_the_pretrain_command_reads_arch_pairs_and_refuses_bad_ones(tmp_path, capsys):
    from spotlight.cli import main

    out = tmp_path / "cli"
    args = ["pretrain", "--task", "geneval-mini", "--num-samples", "8", "--batch-size", "8"]
    args += ["--workers", "0", "--out", str(out)]
    assert main([*args, "--arch", "patch=x"]) == 2
    assert "--arch takes FIELD=INTEGER pairs, got 'patch=x'" in capsys.readouterr().err
    assert main([*args, "--arch", "patch=2"]) == 0
    assert TinyPolicy.load(out / "geneval-mini-8.safetensors").config.patch == 2
