"""``spotlight bench regroup``: re-forming SP groups from live workers against a cold restart.

With real processes on this machine (gloo over TCP on localhost), ``repeats`` times:

* **regroup**: four live workers (the tiny OCR-mini policy, Ulysses SP 4); one is killed (its
  GPU preempted); the three survivors are re-formed as 2 + 1 (valid degrees of the 4-head
  model) without new processes: destroy the old communicator, rendezvous, init, one all-reduce
  to prove each new group works, and the policy module re-wrapped around the weights in memory
  with SP of the new degree. Then **replace the lost worker**, as a replica does before its
  next item: a new process that takes the weights from a live peer through shared memory, and
  the group of four formed again (``replace_worker_s``; off the critical path, because the
  survivors sample meanwhile).
* **cold restart**: three new worker processes started at once (Python, torch import), each
  loading the checkpoint from storage (the file's pages dropped from the page cache first, so
  the disk is read), then groups 2 + 1 initialised as above.

And the storage read rate of a ``checkpoint_mb`` file with a cold page cache: the input that
scales the cold restart to Qwen-Image's 41 GB in :func:`restart_cost_s`.

Writes ``DIR/regroup.json``: medians ``regroup_s`` and ``cold_restart_s``, their breakdowns, the
speedup, and the inputs of the cluster-scale cost model (:func:`restart_cost_s`).
"""

from __future__ import annotations

import json
import os
import statistics
import time
from pathlib import Path
from typing import TextIO


def _drop_cache(path: Path) -> bool:
    """Evict ``path`` from the page cache (Linux); True if it worked."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return True
    finally:
        os.close(fd)


def make_checkpoint(path: Path, megabytes: int) -> Path:
    """A safetensors file of ``megabytes`` of float32 weights (64 tensors)."""
    import torch
    from safetensors.torch import save_file

    n = max(1, megabytes * 2**20 // 4 // 64)
    g = torch.Generator().manual_seed(0)
    save_file({f"w{i}": torch.randn(n, generator=g) for i in range(64)}, str(path))
    return path


def run(out: Path, repeats: int = 5, checkpoint_mb: int = 256, log: TextIO | None = None) -> dict:
    import dataclasses

    from safetensors.torch import load_file

    from spotlight.recipes import get_recipe
    from spotlight.sp.elastic import NodeWorkers
    from spotlight.sp.sp_groups import assign, valid_degrees

    out.mkdir(parents=True, exist_ok=True)
    cfg = get_recipe("tiny-ocr")
    policy = dataclasses.asdict(cfg.policy)
    ckpt = Path(cfg.policy.checkpoint)
    big = make_checkpoint(out / "bench-checkpoint.safetensors", checkpoint_mb)
    valid = valid_degrees(4)
    regroups, colds, copies, reads = [], [], [], []
    try:
        for rep in range(repeats):
            # -- regroup: live workers, one lost
            nw = NodeWorkers(4)
            nw.load([0, 1, 2, 3], str(ckpt), policy)
            nw.form([[0, 1, 2, 3]])
            nw.lose(3)
            t0 = time.perf_counter()
            r = nw.form(assign([0, 1, 2], 2, valid))
            wall = time.perf_counter() - t0
            w = r["workers"].values()
            regroups.append(
                {
                    "wall_s": wall,
                    **{k: max(x[k] for x in w) for k in ("destroy_s", "init_s", "check_s")},
                    "policy_s": max(x["policy_s"] for x in w),
                    "groups": [len(g) for g in nw.groups],
                }
            )
            # a replacement joins (what a replica does before its next item): a new process,
            # weights from a peer, not from storage, and the group whole again
            t0 = time.perf_counter()
            joined = nw.join([4], peer=0)
            regrown = nw.form([[0, 1, 2, 4]])
            copies.append(
                {
                    "wall_s": joined["copy_s"],
                    "spawn_s": joined["spawn_s"],
                    "form_s": regrown["wall_s"],
                    "replace_s": time.perf_counter() - t0,
                }
            )
            if nw.checksum(0) != nw.checksum(4):
                raise RuntimeError("the weights copied from the peer differ")
            nw.shutdown()
            # -- cold restart: new processes, checkpoint from storage, new group
            dropped = _drop_cache(ckpt)
            t0 = time.perf_counter()
            cold = NodeWorkers(3)  # three new processes, started together
            t_spawn = time.perf_counter() - t0
            cold.load([0, 1, 2], str(ckpt), policy)
            t_load = time.perf_counter() - t0 - t_spawn
            f = cold.form(assign([0, 1, 2], 2, valid))
            colds.append(
                {
                    "wall_s": time.perf_counter() - t0,
                    "spawn_and_import_s": t_spawn,
                    "load_checkpoint_s": t_load,
                    "init_group_s": f["wall_s"],
                    "page_cache_dropped": dropped,
                }
            )
            cold.shutdown()
            # -- storage read rate (cold page cache)
            _drop_cache(big)
            t1 = time.perf_counter()
            load_file(str(big))
            reads.append(time.perf_counter() - t1)
            if log is not None:
                print(
                    f"[regroup] {rep + 1}/{repeats}: regroup {regroups[-1]['wall_s']:.3f} s,"
                    f" cold restart {colds[-1]['wall_s']:.3f} s (spawn+import"
                    f" {t_spawn:.2f}, load {t_load:.2f}, init {f['wall_s']:.2f}), replace a worker"
                    f" {copies[-1]['replace_s']:.3f} s (peer copy {copies[-1]['wall_s']:.3f} s),"
                    f" {checkpoint_mb} MB read {reads[-1]:.2f} s",
                    file=log,
                    flush=True,
                )
    finally:
        big.unlink(missing_ok=True)
    med = statistics.median
    result = {
        "repeats": repeats,
        "policy": "tiny-ocr (OCR-mini base model, 2.5 M parameters, 4 heads)",
        "workers": 4,
        "backend": "gloo (CPU processes, localhost TCP)",
        "regroup_s": med(r["wall_s"] for r in regroups),
        "cold_restart_s": med(c["wall_s"] for c in colds),
        "regroup_breakdown_s": {
            k: med(r[k] for r in regroups) for k in ("destroy_s", "init_s", "check_s", "policy_s")
        },
        "cold_restart_breakdown_s": {
            k: med(c[k] for c in colds)
            for k in ("spawn_and_import_s", "load_checkpoint_s", "init_group_s")
        },
        "peer_weight_copy_s": med(c["wall_s"] for c in copies),
        "replace_worker_s": med(c["replace_s"] for c in copies),
        "replace_worker_breakdown_s": {
            "spawn_and_import_s": med(c["spawn_s"] for c in copies),
            "peer_weight_copy_s": med(c["wall_s"] for c in copies),
            "form_s": med(c["form_s"] for c in copies),
        },
        "storage_read": {
            "checkpoint_mb": checkpoint_mb,
            "seconds": med(reads),
            "gb_per_s": checkpoint_mb / 1024 / med(reads),
        },
        "runs": {"regroup": regroups, "cold_restart": colds, "peer_copy": copies, "reads": reads},
    }
    result["speedup"] = result["cold_restart_s"] / result["regroup_s"]
    result["sp_throughput"] = sp_throughput(cfg, policy, log=log)
    (out / "regroup.json").write_text(json.dumps(result, indent=1))
    if log is not None:
        print(
            f"[regroup] median regroup {result['regroup_s']:.3f} s vs cold restart"
            f" {result['cold_restart_s']:.3f} s: {result['speedup']:.0f}x -> {out}/regroup.json",
            file=log,
            flush=True,
        )
    return result


def sp_throughput(cfg, policy: dict, degrees=(1, 2, 4), samples: int = 8, log=None) -> list[dict]:
    """Samples/s of one SP group of each degree (tiny-ocr, one item of ``samples``, all steps,
    one thread per worker; the first item warms up and is not counted)."""
    import dataclasses

    from spotlight.sp.elastic import NodeWorkers

    smp = dataclasses.asdict(cfg.sampler)
    prompts = [f'a sign that says "W{i}"' for i in range(samples)]
    rows = []
    for d in degrees:
        nw = NodeWorkers(d)
        try:
            nw.load(list(range(d)), cfg.policy.checkpoint, policy)
            nw.form([list(range(d))])
            nw.sample(list(range(d)), prompts, list(range(samples)), smp)  # warm-up
            t0 = time.perf_counter()
            nw.sample(list(range(d)), prompts, list(range(samples, 2 * samples)), smp)
            sec = time.perf_counter() - t0
        finally:
            nw.shutdown()
        rows.append({"sp_degree": d, "seconds": sec, "samples_per_s": samples / sec})
        if log is not None:
            print(
                f"[regroup] SP {d}: {samples} samples x {cfg.sampler.num_steps} steps in"
                f" {sec:.2f} s ({samples / sec:.1f} samples/s)",
                file=log,
                flush=True,
            )
    return rows


def restart_cost_s(
    model_gb: float,
    storage_gb_per_s: float,
    process_start_s: float,
    group_init_s: float,
) -> float:
    """Cluster-scale cold restart of an SP group: new processes (Python, torch, CUDA context),
    the checkpoint read from storage by each member at ``storage_gb_per_s``, the group's
    communicator."""
    return process_start_s + model_gb / storage_gb_per_s + group_init_s


def regroup_cost_s(
    group_init_s: float, weights_gb: float = 0.0, peer_gb_per_s: float = 1.0
) -> float:
    """Re-forming survivors: a new communicator, plus a peer copy of ``weights_gb`` when a member
    lacks the weights (0 when all survivors hold them)."""
    return group_init_s + (weights_gb / peer_gb_per_s if weights_gb else 0.0)
