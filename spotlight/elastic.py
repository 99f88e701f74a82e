"""Long-lived SP workers on one node, re-formed into groups without restarting. No Ray.

A :class:`NodeWorkers` owns ``n`` worker processes (one per GPU; CPU processes here). Each loads
the policy weights once, from storage, when it starts. Afterwards the scheduler re-forms them
into SP groups as members come and go (:mod:`spotlight.sp_groups`): only the communicator is
rebuilt (``destroy_process_group`` + ``init_process_group`` on a fresh rendezvous), the process
and its weights stay. A worker that needs weights (a new version, or one that joined empty) gets
them from a peer on the same node through shared memory (torch's multiprocessing shares tensor
storage between processes), not from storage.

The alternative a preemption forces without this, a **cold restart**, starts new processes,
imports torch, loads the checkpoint from storage and initializes the process group:
``spotlight bench regroup`` (benchmarks in spotlight/bench_regroup.py) times both.

Workers talk to the scheduler over pipes; each command returns its timings.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(conn, threads: int) -> None:  # runs in the child process
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    torch.set_num_threads(threads)
    state: dict[str, torch.Tensor] = {}
    conn.send({"ready": True})
    while True:
        cmd, *args = conn.recv()
        t0 = time.perf_counter()
        if cmd == "load":  # from storage (the cold path)
            state = load_file(args[0])
            conn.send({"load_s": time.perf_counter() - t0, "tensors": len(state)})
        elif cmd == "form":  # join a new group: only the communicator changes
            rank, world, port = args
            if dist.is_initialized():
                dist.destroy_process_group()
            t1 = time.perf_counter()
            dist.init_process_group(
                "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
            )
            t2 = time.perf_counter()
            check = torch.tensor([float(rank + 1)])
            dist.all_reduce(check)  # the new group works: sum of 1..world
            conn.send(
                {
                    "destroy_s": t1 - t0,
                    "init_s": t2 - t1,
                    "check_s": time.perf_counter() - t2,
                    "sum": float(check.item()),
                    "pid": os.getpid(),
                }
            )
        elif cmd == "leave":
            if dist.is_initialized():
                dist.destroy_process_group()
            conn.send({"destroy_s": time.perf_counter() - t0})
        elif cmd == "share":  # hand our weights to a peer (shared memory, no copy here)
            for t in state.values():
                t.share_memory_()
            conn.send({"state": state, "share_s": time.perf_counter() - t0})
        elif cmd == "adopt":  # weights from a peer: copy out of its shared memory
            state = {k: v.clone() for k, v in args[0].items()}
            conn.send({"adopt_s": time.perf_counter() - t0, "tensors": len(state)})
        elif cmd == "checksum":
            conn.send({"sum": float(sum(float(t.double().sum()) for t in state.values()))})
        elif cmd == "exit":
            if dist.is_initialized():
                dist.destroy_process_group()
            conn.send({})
            return
        else:
            conn.send({"error": f"unknown command {cmd!r}"})


@dataclass
class _Handle:
    proc: Any
    conn: Any


class NodeWorkers:
    """The node's SP workers (see the module docstring)."""

    def __init__(self, n: int, threads: int = 1):
        if n < 1:
            raise ValueError(f"need at least one worker, got {n}")
        self._ctx = mp.get_context("spawn")
        self.workers: dict[int, _Handle] = {}
        self.threads = threads
        self.groups: list[list[int]] = []
        self.start_timings = self.start(*range(n))

    def start(self, *wids: int) -> list[dict[str, float]]:
        """Start workers ``wids`` together (new processes: the cold path); returns timings."""
        t0 = time.perf_counter()
        pending = []
        for wid in wids:
            if wid in self.workers:
                raise ValueError(f"worker {wid} is already running")
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(target=_worker, args=(child, self.threads), daemon=True)
            proc.start()
            pending.append((wid, proc, parent))
        out = []
        for wid, proc, parent in pending:
            parent.recv()  # ready: Python started, torch imported
            self.workers[wid] = _Handle(proc, parent)
            out.append({"spawn_ready_s": time.perf_counter() - t0})
        return out

    def _call(self, wids: list[int], msgs: list[tuple]) -> list[dict[str, Any]]:
        for wid, msg in zip(wids, msgs, strict=True):
            self.workers[wid].conn.send(msg)
        out = [self.workers[wid].conn.recv() for wid in wids]
        for wid, reply in zip(wids, out, strict=True):
            if "error" in reply:
                raise RuntimeError(f"worker {wid}: {reply['error']}")
        return out

    def load(self, wids: list[int], path: str) -> list[dict[str, Any]]:
        return self._call(wids, [("load", path)] * len(wids))

    def form(self, groups: list[list[int]]) -> dict[str, Any]:
        """Re-form the live workers into ``groups`` (lists of worker ids; every group its own
        communicator); returns the wall time and each worker's breakdown."""
        t0 = time.perf_counter()
        wids, msgs = [], []
        for group in groups:
            port = free_port()
            for rank, wid in enumerate(group):
                wids.append(wid)
                msgs.append(("form", rank, len(group), port))
        replies = self._call(wids, msgs)
        wall = time.perf_counter() - t0
        for group in groups:
            want = len(group) * (len(group) + 1) / 2
            got = {r["sum"] for w, r in zip(wids, replies, strict=True) if w in group}
            if got != {want}:
                raise RuntimeError(f"group {group}: all-reduce gave {got}, expected {want}")
        self.groups = [list(g) for g in groups]
        return {"wall_s": wall, "workers": dict(zip(wids, replies, strict=True))}

    def lose(self, wid: int) -> None:
        """Worker ``wid`` dies (its GPU was preempted): killed, no goodbye."""
        h = self.workers.pop(wid)
        h.proc.kill()
        h.proc.join(timeout=10)
        self.groups = [[w for w in g if w != wid] for g in self.groups]

    def copy_weights(self, src: int, dst: int) -> dict[str, float]:
        """``dst`` takes ``src``'s weights through shared memory (no storage read)."""
        t0 = time.perf_counter()
        shared = self._call([src], [("share",)])[0]
        adopted = self._call([dst], [("adopt", shared["state"])])[0]
        return {
            "wall_s": time.perf_counter() - t0,
            "share_s": shared["share_s"],
            "adopt_s": adopted["adopt_s"],
        }

    def checksum(self, wid: int) -> float:
        return self._call([wid], [("checksum",)])[0]["sum"]

    def pids(self) -> list[int]:
        return [h.proc.pid for h in self.workers.values()]

    def shutdown(self) -> None:
        for wid, h in list(self.workers.items()):
            try:
                h.conn.send(("exit",))
                h.conn.recv()
            except (EOFError, BrokenPipeError, OSError):
                pass
            h.proc.join(timeout=10)
            if h.proc.is_alive():
                h.proc.kill()
            del self.workers[wid]
