"""The whole job under faults: a run replaying a real spot trace must give the same
per-iteration results as a run without faults (the request queue's restart mid-run, with five
other kinds of fault, is test_chaos.py's). It runs the pipelined schedule
(``schedule="pipelined"``): each iteration's rollout is in the queue while the trainer trains,
so faults strike items that wait across an update; the SP replicas run the sync one.

The run without faults is the local runner's: with one torch thread on both sides a fault-free
Ray run of these configurations is the local run bit for bit (rows and weights; the Ray-vs-local
tests of test_job.py compare the same way), so a faulted Ray run that equals it equals the
fault-free Ray run too, without a second Ray run to wait for."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time

import pytest
import torch

from ray_tests.helpers import metrics_rows, ray_options, smoke
from spotlight.config import SamplerConfig

pytestmark = pytest.mark.slow


def _cfg(schedule: str = "sync"):
    # Items of about half a second, four per iteration: nodes go while items are in flight.
    return smoke(
        iterations=3,
        sampler=SamplerConfig(num_steps=24, eta=0.7, batch_size=4),
        num_prompts_per_iteration=4,
        schedule=schedule,
    )


def _same_learning(a, b):
    ra, rb = metrics_rows(a), metrics_rows(b)
    assert [r["train_reward_mean"] for r in ra] == [r["train_reward_mean"] for r in rb]
    assert [r.get("val_reward") for r in ra] == [r.get("val_reward") for r in rb]
    assert [r["loss/policy_loss"] for r in ra] == [r["loss/policy_loss"] for r in rb]
    # the final weights, bit for bit: every trained trajectory was identical (tensors, not the
    # file's sha256: safetensors writes its metadata in a per-process order)
    from safetensors.torch import load_file

    wa, wb = (load_file(o / "checkpoint" / "policy.safetensors") for o in (a, b))
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def _local_run(tmp_path_factory, schedule: str):
    """The configuration's run without faults: the local runner, one torch thread (the
    replicas' and the trainer's count in these tests)."""
    from spotlight.training.run_local import run_local

    out = tmp_path_factory.mktemp(f"local-{schedule}") / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_local(_cfg(schedule), out)
    finally:
        torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory):
    return _local_run(tmp_path_factory, "sync")


@pytest.fixture(scope="module")
def plain_pipelined(tmp_path_factory):
    return _local_run(tmp_path_factory, "pipelined")


def test_a_run_replaying_a_spot_trace_matches_a_run_without_preemptions(plain_pipelined, tmp_path):
    from spotlight.job.run import run_ray

    out = tmp_path / "trace"
    opts = ray_options(
        spot_trace="p3-trace.csv",  # Oobleck's AWS p3 trace, 600x faster
        trace_time_scale=600.0,
        trace_notice_s=2.0,
        trace_hard_share=0.5,
        lease_s=5.0,
        commit_every=4,
        spill="after_wait",
        spill_wait_s=3.0,
    )
    summary = run_ray(_cfg("pipelined"), out, opts=opts)
    print({k: v for k, v in summary.items() if not isinstance(v, dict)})
    assert summary["preemptions"] >= 1
    assert summary["items_lost"] == 0
    _same_learning(out, plain_pipelined)


def _strike_mid_run(out, strike) -> tuple[threading.Thread, threading.Event]:
    """A thread that, once the run in ``out`` has finished its first iteration, calls
    ``strike(actors)`` every 0.2 s until it returns True (the fault was injected)."""
    import ray

    done = threading.Event()

    def loop():
        from spotlight.actors.handles import get_actors

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not done.is_set():
            time.sleep(0.2)
            # no Ray call before the run's own ray.init: it would start a Ray of its own
            if not ray.is_initialized() or not (out / "metrics.jsonl").exists():
                continue
            try:
                if strike(get_actors()):
                    done.set()
            except Exception:  # Ray or the actors not up yet
                continue

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread, done


def test_sampler_replicas_with_ulysses_sp_train_like_single_worker_replicas(plain_run, tmp_path):
    """A replica with SP 2 loses one of its two worker processes mid-run: the survivor carries
    on (re-formed, no new process, no weights reload), a replacement process joins with its
    weights before the next item, and the run trains as before. (A replica's SP group and
    single worker side by side on one item, and a worker lost while a group forms:
    tests/dist_tests/test_sp.py and test_elastic.py.)"""
    import psutil
    import ray

    from spotlight.job.run import run_ray

    out = tmp_path / "sp"
    workers = 2
    seen: dict[str, int] = {}

    def sp_workers(replica_pid: int) -> list[psutil.Process]:
        return [
            c
            for c in psutil.Process(replica_pid).children()
            if "spawn_main" in " ".join(c.cmdline())
        ]

    def kill_one_sp_worker(actors) -> bool:
        if "killed" in seen:  # once only, even if a call failed after the kill
            return True
        for lease in ray.get(actors.queue.leased.remote()):
            replica_pid = int(lease["worker_id"].rsplit(":", 1)[1])
            procs = sp_workers(replica_pid)
            if len(procs) == workers:
                procs[1].kill()
                seen["killed"] = procs[1].pid
                deadline, pids = time.monotonic() + 60, set()
                while time.monotonic() < deadline:  # the replica replaces it
                    with contextlib.suppress(psutil.NoSuchProcess):
                        pids = {w.pid for w in sp_workers(replica_pid) if w.status() != "zombie"}
                    if len(pids) == workers and seen["killed"] not in pids:
                        seen["replaced_by"] = (pids - {p.pid for p in procs}).pop()
                        break
                    time.sleep(0.1)
                return True
        return False

    killer, killed = _strike_mid_run(out, kill_one_sp_worker)
    run_ray(_cfg(), out, opts=ray_options(num_samplers=1, sp_degree=2, sp_workers=workers))
    killer.join(timeout=5)
    assert killed.is_set()
    assert seen.get("replaced_by") not in (None, seen["killed"])
    deadline = time.monotonic() + 20  # the replacement went with its replica: nothing leaked
    while psutil.pid_exists(seen["replaced_by"]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(seen["replaced_by"])
    ra, rb = metrics_rows(out), metrics_rows(plain_run)
    assert ra[0]["sp_degree_max"] == 2
    assert ra[-1]["sp_degree_max"] == 2  # whole again after the replacement joined
    # SP reorders float sums: equal within tolerance, not bit for bit
    for a, b in zip(ra, rb, strict=True):
        assert a["train_reward_mean"] == pytest.approx(b["train_reward_mean"], abs=2e-3)
        assert a.get("val_reward", 0) == pytest.approx(b.get("val_reward", 0), abs=2e-3)


def test_bad_preemption_options_fail_before_ray_starts(tmp_path):
    from spotlight.job.run import run_ray

    with pytest.raises(FileNotFoundError, match="shipped traces"):
        run_ray(_cfg(), tmp_path / "a", opts=ray_options(spot_trace="nope.json"))
    with pytest.raises(ValueError, match="unknown spill mode"):
        run_ray(_cfg(), tmp_path / "b", opts=ray_options(spill="sometimes"))
    with pytest.raises(ValueError, match="unknown notice source"):
        run_ray(_cfg(), tmp_path / "c", opts=ray_options(notice_sources=("azure",)))
    assert dataclasses.asdict(ray_options())["commit_every"] == 4
