"""Soak benchmark: the default Ray job run long, with time and memory recorded every iteration.

    python benchmarks/soak.py --iterations 150 --set num_val_prompts=16 --out docs/bench

runs ``spotlight train`` (the ``tiny-ocr`` recipe unless ``--recipe``, with ``--set`` overrides)
on the embedded local Ray, in this process, and after every iteration records: its wall time
(the difference of ``wall_s`` in ``metrics.jsonl``), whether it validated, ``sample_s`` and
``train_s``; the resident memory (RSS) of the driver and of every Ray process by role (``queue``,
``broadcast``, ``bandit``, ``replica_<i>``, ``reward``, ``trainer_<rank>``, ``raylet``, ``gcs``,
and ``other_<class>`` for Ray's own actors such as the Serve controller); the object store's used
bytes and object count; the queue actor's items by state; open file descriptors of all of those
processes; and ``probe_s``, the time of a fixed CPU workload run right after the iteration
(``machine_probe_s``: on a shared host the machine's own speed drifts). It writes
``<out>/<name>.json`` (``command``, ``iterations``: one record per iteration,
``max_rss_growth_mb_per_100_iterations``: the largest least-squares slope over iterations >=
``--slope-from``, 20, in MB per 100 iterations, over the processes and the object store, with
``rss_growth_mb_per_100_iterations`` by role beside it, and ``time_drift``: the mean time per
iteration without validation over iterations 10-39 and 120-149, their ratio, and the ratio of
the times divided by the probe) and ``<name>.png`` (time per
iteration and memory by role against the iteration), and prints each slope. Run it alone on the
machine: its times are only comparable with nothing else running.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROLE_BY_CLASS = {
    "RequestQueue": "queue",
    "WeightBroadcast": "broadcast",
    "BanditState": "bandit",
    "RewardScorer": "reward",
}
"""Roles of the project's actors and Serve replicas by class name (a Serve replica's class name
reads ``ServeReplica:<app>:<deployment>``)."""
OWN_PROCESSES = {"raylet": "raylet", "gcs_server": "gcs"}
MB = 1024 * 1024


def role_of(class_name: str, seen: dict[str, str], actor_id: str) -> str:
    """The role of an actor: fixed names for the project's actors, ``replica_<i>`` and
    ``trainer_<i>`` numbered in the order first seen (``seen`` keeps the numbering across
    snapshots), ``other_<class>`` for the rest."""
    if actor_id in seen:
        return seen[actor_id]
    short = class_name.rsplit(":", 1)[-1]
    if short in ROLE_BY_CLASS:
        role = ROLE_BY_CLASS[short]
    elif short in ("SamplerReplica", "OnDemandSampler"):
        role = f"replica_{sum(r.startswith('replica_') for r in seen.values())}"
    elif short == "RayTrainWorker":
        role = f"trainer_{sum(r.startswith('trainer_') for r in seen.values())}"
    else:
        role = f"other_{short}"
    seen[actor_id] = role
    return role


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ``ys`` on ``xs`` (None for fewer than two distinct ``xs``)."""
    n = len(xs)
    if n < 2:
        return None
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx


def growth_per_100(records: list[dict[str, Any]], start: int = 20) -> dict[str, float]:
    """MB per 100 iterations of every process's RSS and of the object store, fitted over the
    iterations >= ``start`` where the series has a value."""
    series: dict[str, list[tuple[int, float]]] = {}
    for r in records:
        if r["iteration"] < start:
            continue
        for role, mb in r["rss_mb"].items():
            series.setdefault(role, []).append((r["iteration"], mb))
        if r.get("object_store_mb") is not None:
            series.setdefault("object_store", []).append((r["iteration"], r["object_store_mb"]))
    out = {}
    for role, pts in sorted(series.items()):
        s = slope([p[0] for p in pts], [p[1] for p in pts])
        if s is not None:
            out[role] = 100 * s
    return out


def machine_probe_s(repeats: int = 3) -> float:
    """Seconds of a fixed single-threaded CPU workload (pure Python; the median of
    ``repeats``), run right after an iteration: how fast this machine runs normal-priority work
    at that moment. The job's sampler replicas run at idle priority, so the probe measures the
    machine (a shared host's speed varies by tens of percent over an hour) more than the job."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        acc = 0
        for i in range(200_000):
            acc += i * i % 7
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def time_drift(
    records: list[dict[str, Any]],
    early: tuple[int, int] = (10, 40),
    late: tuple[int, int] = (120, 150),
) -> dict[str, Any] | None:
    """Mean wall time per iteration without validation over the ``early`` and ``late`` iteration
    ranges (end excluded), their ratio, and the same ratio with each iteration's time divided by
    its machine probe (``probe_s``): the job's own slow-down, the machine's taken out. None when
    a range holds no such iteration."""

    def mean(lo: int, hi: int, key) -> float | None:
        xs = [key(r) for r in records if lo <= r["iteration"] < hi and not r["validated"]]
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    def per_probe(r):
        return r["wall_s_iteration"] / r["probe_s"] if r.get("probe_s") else None

    out: dict[str, Any] = {"early": list(early), "late": list(late)}
    for name, key in (
        ("wall_s", lambda r: r["wall_s_iteration"]),
        ("probe_s", lambda r: r.get("probe_s")),
        ("wall_per_probe", per_probe),
    ):
        a, b = mean(*early, key), mean(*late, key)
        out[f"{name}_early"], out[f"{name}_late"] = a, b
        out[f"{name}_ratio"] = b / a if a and b else None
    return out if out["wall_s_ratio"] is not None else None


def iteration_record(row: dict[str, Any], prev_wall_s: float, snap: dict[str, Any]) -> dict:
    """One iteration's record from its ``metrics.jsonl`` row and the snapshot taken after it."""
    return {
        "iteration": row["iteration"],
        "wall_s_iteration": row["wall_s"] - prev_wall_s,
        "validated": "val_reward" in row,
        "sample_s": row.get("sample_s"),
        "train_s": row.get("train_s"),
        **snap,
    }


def snapshot(seen: dict[str, str]) -> dict[str, Any]:
    """RSS by role, object store, queue items by state and open fds, now (needs Ray up in this
    process: the job's driver)."""
    import psutil
    import ray
    from ray._private.internal_api import get_memory_info_reply, get_state_from_address
    from ray.util.state import list_actors

    from spotlight.actors import names

    gcs = ray.get_runtime_context().gcs_address  # this job's Ray, whatever else runs here
    procs: dict[str, psutil.Process] = {"driver": psutil.Process()}
    alive = list_actors(address=gcs, filters=[("state", "=", "ALIVE")], detail=True, limit=1000)
    for a in alive:
        if a.pid:
            procs[role_of(a.class_name, seen, a.actor_id)] = psutil.Process(a.pid)
    session = ray._private.worker._global_node.session_name  # in the raylet's and GCS's flags
    for p in psutil.process_iter(["name", "cmdline"]):
        if p.info["name"] in OWN_PROCESSES and any(session in w for w in p.info["cmdline"] or []):
            procs[OWN_PROCESSES[p.info["name"]]] = p
    rss, fds = {}, 0
    for role, p in procs.items():
        try:
            rss[role] = p.memory_info().rss / MB
            fds += p.num_fds()
        except psutil.Error:  # gone between the listing and the read
            continue
    reply = get_memory_info_reply(get_state_from_address(gcs))
    queue = ray.get_actor(names.REQUEST_QUEUE, namespace=names.NAMESPACE)
    stats = ray.get(queue.stats.remote())
    return {
        "rss_mb": rss,
        "object_store_mb": reply.store_stats.object_store_bytes_used / MB,
        "object_count": reply.store_stats.num_local_objects,
        "queue_items_by_state": {
            "pending": stats["pending"],
            "leased": stats["leased"],
            "done": stats["results"],
        },
        "open_fds": fds,
    }


def plot(records: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    plain = [r for r in records if not r["validated"]]
    top.plot([r["iteration"] for r in plain], [r["wall_s_iteration"] for r in plain], label="wall")
    for key in ("sample_s", "train_s"):
        top.plot([r["iteration"] for r in plain], [r[key] for r in plain], label=key)
    top.set_ylabel("s per iteration (no validation)")
    top.legend()
    roles = sorted({role for r in records for role in r["rss_mb"]})
    for role in roles:
        pts = [(r["iteration"], r["rss_mb"][role]) for r in records if role in r["rss_mb"]]
        bottom.plot([p[0] for p in pts], [p[1] for p in pts], label=role)
    bottom.plot(
        [r["iteration"] for r in records],
        [r["object_store_mb"] for r in records],
        "k--",
        label="object store",
    )
    bottom.set_xlabel("iteration")
    bottom.set_ylabel("MB")
    bottom.legend(fontsize=7, ncol=3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iterations", type=int, default=150)
    ap.add_argument("--recipe", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--runs", type=Path, default=Path("runs/soak"), help="the run folder")
    ap.add_argument("--out", type=Path, default=Path("docs/bench"))
    ap.add_argument("--name", default="soak")
    ap.add_argument("--slope-from", type=int, default=20)
    args = ap.parse_args()
    from spotlight.bench import repo_relative
    from spotlight.cli import build_parser

    train = ["train", "--iterations", str(args.iterations), "--out", str(args.runs)]
    train += ["--recipe", args.recipe] if args.recipe else []
    for s in args.set:
        train += ["--set", s]
    if (args.runs / "metrics.jsonl").exists():
        raise SystemExit(f"{args.runs} holds a run already: remove it or pass another --runs")
    parsed = build_parser().parse_args(train)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            parsed.func(parsed)
        except BaseException as e:  # reported by the main thread
            failed.append(e)

    job = threading.Thread(target=run, name="soak-job", daemon=True)
    job.start()
    metrics, records, seen, prev_wall = args.runs / "metrics.jsonl", [], {}, 0.0
    while True:
        rows = metrics.read_text().splitlines() if metrics.exists() else []
        for line in rows[len(records) :]:
            row = json.loads(line)
            try:
                snap = snapshot(seen)
            except Exception as e:  # e.g. Ray going down after the last iteration
                print(f"[soak] no snapshot after iteration {row['iteration']}: {e}", flush=True)
                snap = {"rss_mb": {}, "object_store_mb": None, "object_count": None}
            snap["probe_s"] = machine_probe_s()
            records.append(iteration_record(row, prev_wall, snap))
            prev_wall = row["wall_s"]
            r = records[-1]
            print(
                f"[soak] iteration {r['iteration']}: {r['wall_s_iteration']:.1f} s,"
                f" driver {r['rss_mb'].get('driver', 0):.0f} MB,"
                f" object store {r['object_store_mb'] or 0:.1f} MB",
                flush=True,
            )
        if not job.is_alive() and len(records) >= len(rows):
            break
        time.sleep(0.5)
    if failed:
        raise failed[0]
    growth = growth_per_100(records, args.slope_from)
    drift = time_drift(records)
    doc = {
        "command": shlex.join(["python", "benchmarks/soak.py", *repo_relative(sys.argv[1:])]),
        "recipe": args.recipe or "tiny-ocr",
        "slope_from_iteration": args.slope_from,
        "max_rss_growth_mb_per_100_iterations": max(growth.values()) if growth else None,
        "rss_growth_mb_per_100_iterations": growth,
        "time_drift": drift,
        "iterations": records,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(doc, indent=1))
    plot(records, args.out / f"{args.name}.png")
    for role, mb in sorted(growth.items(), key=lambda kv: -kv[1]):
        print(f"[soak] {role}: {mb:+.1f} MB per 100 iterations", flush=True)
    if drift is not None:
        print(
            f"[soak] wall s per iteration {drift['wall_s_early']:.2f} (iterations 10-39) ->"
            f" {drift['wall_s_late']:.2f} (120-149): x{drift['wall_s_ratio']:.3f};"
            f" machine probe x{drift['probe_s_ratio'] or float('nan'):.3f};"
            f" per probe x{drift['wall_per_probe_ratio'] or float('nan'):.3f}",
            flush=True,
        )
    print(f"[soak] wrote {args.out / args.name}.json and .png", flush=True)


if __name__ == "__main__":
    main()
