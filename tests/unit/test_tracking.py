"""W&B as users expect it: config, metrics, captioned samples and summary; an offline folder."""

from __future__ import annotations

import sys
import types

import numpy as np

from spotlight.recipes import get_recipe
from spotlight.tracking import Tracker, has_wandb_key, wandb_key


class FakeRun:
    def __init__(self):
        self.logged: list[tuple[dict, int]] = []
        self.summary: dict = {}
        self.finished = False

    def log(self, row, step):
        self.logged.append((row, step))

    def finish(self):
        self.finished = True


def _fake_wandb(monkeypatch):
    calls: dict = {}
    fake = types.ModuleType("wandb")

    def init(**kwargs):
        calls["init"] = kwargs
        calls["run"] = FakeRun()
        return calls["run"]

    class Image:
        def __init__(self, data, caption):
            self.data, self.caption = data, caption

    fake.init, fake.Image = init, Image
    fake.Settings = lambda **kw: kw
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", "/nonexistent/netrc")  # no `wandb login` either
    return calls


def test_the_run_logs_its_config_metrics_captioned_samples_and_summary(monkeypatch, tmp_path):
    calls = _fake_wandb(monkeypatch)
    cfg = get_recipe("tiny-smoke")
    t = Tracker(cfg, tmp_path / "run", enabled=True)
    init = calls["init"]
    assert init["mode"] == "offline"  # no API key: an offline folder to `wandb sync` later
    assert init["dir"] == str(tmp_path / "run") and init["config"] == cfg.to_dict()
    t.log({"iteration": 4, "reward_mean": 0.5, "replicas": {"spot": 2}, "stopped": "x"})
    images = np.zeros((2, 8, 8, 1), dtype=np.uint8)
    t.log_images(images, ["a red circle", "a blue square"], [3, 7], step=5)
    t.finish(
        {
            "final_val_reward": 0.7,
            "cost_usd": 1.5,
            "preemptions": 2,
            "stopped": "target",
            "prices": {"a": 1},
        }
    )
    run = calls["run"]
    assert run.logged[0] == ({"train/iteration": 4, "train/reward_mean": 0.5}, 5)  # numbers
    samples, step = run.logged[1]
    assert step == 5
    assert [s.caption for s in samples["samples"]] == [
        "a red circle (seed 3)",
        "a blue square (seed 7)",
    ]
    assert samples["samples"][0].data.shape == (8, 8)
    assert run.summary == {
        "final_val_reward": 0.7,
        "cost_usd": 1.5,
        "preemptions": 2,
        "stopped": "target",
    }
    assert run.finished


def test_an_api_key_logs_online_and_disabled_or_no_wandb_logs_nothing(monkeypatch, tmp_path):
    calls = _fake_wandb(monkeypatch)
    monkeypatch.setenv("WANDB_API_KEY", "k")
    Tracker(get_recipe("tiny-smoke"), tmp_path / "a")
    assert calls["init"]["mode"] == "online"
    calls.clear()
    monkeypatch.setenv("WANDB_MODE", "disabled")
    t = Tracker(get_recipe("tiny-smoke"), tmp_path / "b")
    assert not t.enabled and "init" not in calls
    t.log({"iteration": 0, "reward_mean": 1.0})  # a no-op, not an error
    t.finish({})
    monkeypatch.delenv("WANDB_MODE")
    assert not Tracker(get_recipe("tiny-smoke"), tmp_path / "c", enabled=False).enabled
    assert "init" not in calls


def test_real_wandb_writes_an_offline_run_folder_with_the_sample_images(monkeypatch, tmp_path):
    from .conftest import REAL_SLEEP

    monkeypatch.setattr("time.sleep", REAL_SLEEP)  # wandb waits on its service process
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    t = Tracker(get_recipe("tiny-smoke"), out)
    t.log({"iteration": 0, "reward_mean": 0.5})
    rng = np.random.default_rng(0)
    t.log_images(rng.integers(0, 255, (2, 8, 8, 1), dtype=np.uint8), ["a", "b"], [0, 1], step=1)
    t.finish({"final_val_reward": 0.5})
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("run-*.wandb"))  # what `wandb sync` uploads
    assert len(list((run_dir / "files" / "media" / "images").glob("*.png"))) == 2


def test_a_wandb_login_netrc_entry_counts_as_a_key(monkeypatch, tmp_path):
    calls = _fake_wandb(monkeypatch)
    assert not has_wandb_key()
    rc = tmp_path / "netrc"
    rc.write_text("machine github.com login x password y\n")
    monkeypatch.setenv("NETRC", str(rc))
    assert not has_wandb_key()  # another machine's entry is not a W&B key
    rc.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    rc.chmod(0o600)
    assert has_wandb_key()
    Tracker(get_recipe("tiny-smoke"), tmp_path / "a")
    assert calls["init"]["mode"] == "online"


def test_metrics_are_grouped_by_what_they_measure():
    assert wandb_key("train_reward_mean") == "train/train_reward_mean"
    assert wandb_key("zero_std_groups") == "train/zero_std_groups"
    assert wandb_key("val_reward") == "val/val_reward"
    assert wandb_key("cost_usd") == "cost/cost_usd"
    assert wandb_key("busy_gpu_s_spot") == "cost/busy_gpu_s_spot"
    assert wandb_key("util_on_demand") == "cost/util_on_demand"
    assert wandb_key("seeds_explored") == "explore/seeds_explored"
    assert wandb_key("explored_selected_group_std") == "explore/explored_selected_group_std"
    assert wandb_key("rank_spearman_stale_fresh") == "explore/rank_spearman_stale_fresh"
    assert wandb_key("preemptions") == "faults/preemptions"
    assert wandb_key("items_lost") == "faults/items_lost"
    assert wandb_key("sample_s") == "time/sample_s"
    assert wandb_key("weights_load_s_max") == "time/weights_load_s_max"
    assert wandb_key("loss/policy_loss") == "loss/policy_loss"


def test_an_offline_run_has_no_page_and_asking_for_it_prints_nothing(monkeypatch, tmp_path, capfd):
    from .conftest import REAL_SLEEP

    monkeypatch.setattr("time.sleep", REAL_SLEEP)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_SILENT", raising=False)
    t = Tracker(get_recipe("tiny-smoke"), tmp_path / "run")
    capfd.readouterr()
    assert t.url is None
    t.finish({"final_val_reward": 0.5})
    seen = capfd.readouterr()
    assert "URL not available" not in seen.out + seen.err  # W&B's warning on the driver's terminal
