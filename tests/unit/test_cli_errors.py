"""Bad inputs are refused early, in one line that names the problem; a closed pipe is quiet."""

import json
import subprocess
import sys

from spotlight.cli import main
from spotlight.tasks import base_checkpoint


def test_eval_names_a_file_that_is_not_a_checkpoint(tmp_path, capsys):
    bad = tmp_path / "notes.safetensors"
    bad.write_text("hello")
    args = ["eval", "--task", "ocr-mini", "--out", str(tmp_path / "e"), "--checkpoint"]
    assert main([*args, str(bad)]) == 2
    err = capsys.readouterr().err
    assert "is not a safetensors checkpoint" in err and "Traceback" not in err
    assert main([*args, str(tmp_path / "missing.safetensors")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_eval_names_a_checkpoint_of_the_other_task(tmp_path, capsys):
    ocr = base_checkpoint("ocr-mini")
    args = ["eval", "--task", "geneval-mini", "--checkpoint", ocr, "--out", str(tmp_path)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "32x64x1 images (an ocr-mini model); task geneval-mini scores 32x32x3" in err
    assert not (tmp_path / "eval.json").exists()


def test_a_corrupted_run_is_refused_before_ray_starts(tmp_path, capsys):
    import ray

    out = tmp_path / "run"
    base = ["train", "--recipe", "tiny-smoke", "--set", "num_iterations=1", "--no-wandb"]
    assert main([*base, "--runner", "local", "--out", str(out)]) == 0
    (out / "checkpoint/policy.safetensors").write_bytes(b"garbage")
    assert main(["train", "--resume", str(out), "--runner", "ray"]) == 2
    assert "does not match its checksum" in capsys.readouterr().err
    assert not ray.is_initialized()
    assert json.loads((out / "config.json").read_text())["num_iterations"] == 1


def test_a_resume_goes_on_with_the_runner_that_wrote_the_checkpoint(tmp_path):
    import ray

    from spotlight.training.run_folder import checkpoint_runner

    out = tmp_path / "run"
    base = ["train", "--recipe", "tiny-smoke", "--set", "num_iterations=1", "--no-wandb"]
    assert main([*base, "--runner", "local", "--out", str(out)]) == 0
    assert checkpoint_runner(out) == "local"
    # no --runner: the local run goes on locally (on Ray, this unit test would fail)
    assert main(["train", "--resume", str(out), "--iterations", "2", "--no-wandb"]) == 0
    assert not ray.is_initialized()
    assert json.loads((out / "summary.json").read_text())["num_iterations"] == 2
    # a state written before the runner was recorded: the Ray job's holds its ledger
    state = out / "checkpoint" / "state.json"
    doc = json.loads(state.read_text())
    del doc["runner"]
    state.write_text(json.dumps(doc))
    assert checkpoint_runner(out) == "local"
    state.write_text(json.dumps({**doc, "ledger": {}}))
    assert checkpoint_runner(out) == "ray"
    assert checkpoint_runner(tmp_path / "nothing") is None


def test_a_closed_pipe_ends_quietly():
    script = (
        "import argparse, spotlight.cli as c\n"
        "p = argparse.ArgumentParser()\n"
        "p.set_defaults(func=lambda a: [print('x' * 80) for _ in range(100000)] and 0)\n"
        "c.build_parser = lambda: p\n"
        "raise SystemExit(c.main([]))\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    proc.stdout.read(100)
    proc.stdout.close()  # like `| head`
    err = proc.stderr.read().decode()
    assert proc.wait() == 141  # stderr is closed: it has exited (no timeout: that would sleep)
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_spotlight_train_without_flags_asks_for_the_dataclass_defaults():
    from spotlight.cli import build_parser, ray_options_from_args
    from spotlight.job.options import RayOptions

    args = build_parser().parse_args(["train"])
    assert ray_options_from_args(args) == RayOptions()
    assert ray_options_from_args(build_parser().parse_args(["train", "--no-wandb"])) == (
        RayOptions(wandb=False)
    )


def test_an_out_folder_that_is_a_file_is_one_line(tmp_path, capsys):
    taken = tmp_path / "report"
    taken.write_text("not a folder")
    args = ["simulate", "--scenario", "small", "--systems", "spotlight", "--out", str(taken)]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("spotlight: error:") and str(taken) in err and "Traceback" not in err


def test_ray_options_round_trip_through_json_and_name_what_a_resume_changes():
    import dataclasses
    import json

    from spotlight.job.options import RayOptions

    first = RayOptions(notice_sources=("aws",), commit_every=4)
    saved = json.loads(json.dumps(first.to_dict()))
    assert first.changes_from(saved) == []  # tuples and the nested price table survive JSON
    later = dataclasses.replace(first, commit_every=2, spill="never")
    assert later.changes_from(saved) == ["commit_every: 4 -> 2", "spill: 'after_wait' -> 'never'"]
    # an option the saved file lacks (a run started before it existed) is not reported
    del saved["spill"]
    assert later.changes_from(saved) == ["commit_every: 4 -> 2"]


def test_a_failed_bench_run_is_one_line_and_exit_code_1(tmp_path, monkeypatch, capsys):
    from spotlight.bench_jobs import RunFailed
    from spotlight.cli import bench

    def fail(_args):
        raise RunFailed("bench run off-seed3 failed (exit code 1); its log: runs/off-seed3")

    monkeypatch.setattr(bench, "_run", fail)
    assert main(["bench", "exploration", "--recipe", "tiny-smoke", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["spotlight: bench run off-seed3 failed (exit code 1); its log: runs/off-seed3"]


def test_a_ray_run_that_lost_its_cluster_is_one_line_and_exit_code_1(tmp_path, monkeypatch, capsys):
    """What was lost, what the run folder keeps and the command that goes on, as an interrupt
    says them."""
    import json

    from spotlight.cli import train
    from spotlight.job.run_watch import ClusterLost

    def lost(*_args):
        raise ClusterLost("the cluster lost a node the job needs, and it has no autoscaler")

    monkeypatch.setattr(train, "_run", lost)
    out = tmp_path / "r"
    argv = ["train", "--recipe", "tiny-smoke", "--no-wandb", "--out", str(out)]
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (
        "spotlight: error: the cluster lost a node the job needs, and it has no autoscaler;"
        f" the run stopped before the first iteration's checkpoint; nothing to resume in {out};"
        f" start again: spotlight train --recipe tiny-smoke --no-wandb --out {out}"
    )
    (out / "checkpoint").mkdir(parents=True)
    (out / "checkpoint" / "state.json").write_text(json.dumps({"iterations_done": 3}))
    assert main(argv) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        f"; the run stopped; kept {out / 'checkpoint'} after iteration 3;"
        f" resume: spotlight train --resume {out} --no-wandb"
    )
