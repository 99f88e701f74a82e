"""benchmarks/grpo_signal.py runs end to end on the smoke recipe (both losses, per step)."""

import json
import runpy
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "grpo_signal.py"


def _run(monkeypatch, tmp_path, *args):
    argv = [str(SCRIPT), "--recipe", "tiny-smoke", "--prompts", "2", "--batches", "3"]
    monkeypatch.setattr(sys, "argv", [*argv, "--threads", "1", "--out", str(tmp_path), *args])
    runpy.run_path(str(SCRIPT), run_name="__main__")


def test_per_step_flow_grpo_signal(monkeypatch, tmp_path):
    _run(monkeypatch, tmp_path, "--per-step")
    doc = json.loads((tmp_path / "grpo_signal-tiny-smoke-8-per-step.json").read_text())
    assert doc["loss"] == "flow_grpo" and doc["batch_size"] == 8 and doc["batches"] == 3
    assert [row["step"] for row in doc["per_step"]] == [0, 1, 2, 3]
    for row in doc["per_step"]:
        assert row["grad_norm_mean"] > 0
        assert -1.0 <= row["real"]["cosine_mean"] <= 1.0
    assert "--per-step" in doc["command"]


def test_awm_signal_and_the_per_step_refusal(monkeypatch, tmp_path):
    _run(monkeypatch, tmp_path, "--loss", "awm", "--awm-draws", "2")
    doc = json.loads((tmp_path / "grpo_signal-tiny-smoke-8-awm.json").read_text())
    assert doc["loss"] == "awm" and doc["awm_draws"] == 2 and doc["per_step"] is None
    assert -1.0 <= doc["real"]["cosine_mean"] <= 1.0
    with pytest.raises(SystemExit):
        _run(monkeypatch, tmp_path, "--loss", "awm", "--per-step")


def test_a_checkpoint_inside_the_repository_is_written_relative_to_it(monkeypatch, tmp_path):
    root = SCRIPT.parents[1]
    ckpt = root / "spotlight" / "assets" / "ocr-mini.safetensors"
    _run(
        monkeypatch,
        tmp_path,
        "--set",
        f"policy.checkpoint={ckpt}",
        "--set",
        "policy.options={}",
        "--name",
        "rel",
    )
    doc = json.loads((tmp_path / "rel.json").read_text())
    assert doc["checkpoint"] == "spotlight/assets/ocr-mini.safetensors"
