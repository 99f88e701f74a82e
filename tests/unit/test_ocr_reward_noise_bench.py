"""benchmarks/ocr_reward_noise.py names the shipped base model by its path in the repository."""

import json
import runpy
import shutil
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ocr_reward_noise.py"


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="apt-get install tesseract-ocr")
def test_the_default_checkpoint_is_written_relative_to_the_repository(monkeypatch, tmp_path):
    argv = [str(SCRIPT), "--prompts", "1", "--seeds", "2", "--out", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", argv)
    main = runpy.run_path(str(SCRIPT))["main"]
    main.__globals__["SETTINGS"] = [{"psm": 7}]  # one Tesseract setting: the reward's
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        main()
    finally:
        torch.set_num_threads(threads)
    doc = json.loads((tmp_path / "ocr_reward_noise.json").read_text())
    assert doc["checkpoint"] == "spotlight/assets/ocr-mini.safetensors"
    assert "--checkpoint spotlight/assets/ocr-mini.safetensors " in doc["command"]
    assert [row["setting"] for row in doc["settings"]] == [{"psm": 7}]
