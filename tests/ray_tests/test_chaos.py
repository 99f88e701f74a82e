"""The chaos bench's short version: faults of six kinds at random moments of one pipelined
run with spot exploration, which must end bit for bit where the run without faults ends.

It runs ``benchmarks/chaos.py`` as the bench runs (a local cluster with spot nodes, the driver
as a process of its own, a seeded schedule); the run without faults is the local runner's
(bit-equal to a fault-free Ray run with one torch thread: test_job.py). The request queue's
restart mid-run is one of the faults (the queue-restart test this replaces asserted the same:
a restart counted, nothing lost, the same learning)."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BENCH = runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "chaos.py"))
KINDS = ["queue", "broadcast", "bandit", "sampler_kill", "reward", "trainer"]
SETS = [
    "sampler.num_steps=24",  # items of about half a second, four per iteration
    "sampler.eta=0.7",
    "sampler.batch_size=4",
    "num_prompts_per_iteration=4",
    "val_every=1000",
    "schedule=pipelined",
    "exploration.mode=spot",
    "exploration.budget_seeds=8",
]


def test_six_kinds_of_faults_in_one_run_lose_nothing_and_change_nothing(tmp_path):
    args = ["--recipe", "tiny-smoke", "--iterations", "8", "--faults", "6", "--min-each", "1"]
    args += ["--kinds", *KINDS, "--seed", "1", "--out", str(tmp_path)]
    report = BENCH["main"]([*args, *(a for kv in SETS for a in ("--set", kv))])
    assert report["driver_exit_code"] == 0
    assert set(report["kinds"]) == set(KINDS)
    for kind, k in report["kinds"].items():
        assert k["injected"] == k["recovered"] == 1, kind
    assert report["items_lost"] == 0 and report["items_trained_twice"] == 0
    assert report["iterations_missing"] == []
    assert report["equal_to_fault_free"], report["differences"]
    run = tmp_path / "chaos-runs" / "chaos"
    last = json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["queue_restarts"] >= 1 and last["items_lost"] == 0
