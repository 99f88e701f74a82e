"""Long-lived SP workers on one node, re-formed into groups without restarting. No Ray.

A :class:`NodeWorkers` owns ``n`` worker processes (one per GPU; CPU processes here). Each loads
the policy weights once, from storage, when it starts. Afterwards the scheduler re-forms them
into SP groups as members come and go (:mod:`spotlight.sp_groups`): only the communicator is
rebuilt (``destroy_process_group`` + ``init_process_group`` on a fresh rendezvous), the process
and its weights stay. A worker that needs weights (a new version, or one that joined empty) gets
them from a peer on the same node through shared memory (torch's multiprocessing shares tensor
storage between processes), not from storage.

Sampling: every member of a group runs the same steps of the same item with Ulysses SP
(``spotlight.policies.sp``); the sequence is split among them and each gets the full velocity, so
their trajectories agree and rank 0 reports them. A group built for a new shape wraps the
weights already in memory in a fresh module (``load_state_dict(assign=True)``: no copy), because
diffusers attaches a parallel configuration to a module once. An item interrupted by a regroup
continues on the new group from its serialized state (``resume``).

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


def _build_policy(policy: dict[str, Any], state: dict, degree: int):
    """A policy module around the weights already in memory (no copy: ``assign``), with Ulysses
    SP of ``degree`` over the current process group when ``degree > 1``."""
    from spotlight.config import PolicyConfig
    from spotlight.policies import make_policy
    from spotlight.policies.sp import enable_ulysses

    cfg = PolicyConfig(**{**policy, "checkpoint": None})
    # Built on the CPU (the tiny policy: milliseconds), then pointed at the weights in memory.
    # At Qwen-Image size this would build on the meta device and recompute the few
    # non-persistent buffers (RoPE tables) instead.
    module = make_policy(cfg, "cpu")
    module.load_state_dict(state, assign=True)
    if degree > 1:
        enable_ulysses(module.transformer, degree)
    return module


def _worker(conn, threads: int) -> None:  # runs in the child process
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    torch.set_num_threads(threads)
    state: dict[str, torch.Tensor] = {}
    policy_cfg: dict[str, Any] = {}
    module = None
    rank = 0
    conn.send({"ready": True})
    while True:
        cmd, *args = conn.recv()
        t0 = time.perf_counter()
        if cmd == "load":  # from storage (the cold path)
            state = {k: v.float() for k, v in load_file(args[0]).items()}
            policy_cfg = args[1] if len(args) > 1 else {}
            heads = None
            if policy_cfg:  # also checks that the weights fit the policy
                module = _build_policy(policy_cfg, state, 1)
                heads = module.transformer.config.num_attention_heads
            conn.send({"load_s": time.perf_counter() - t0, "tensors": len(state), "heads": heads})
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
            t3 = time.perf_counter()
            module = _build_policy(policy_cfg, state, world) if policy_cfg else None
            conn.send(
                {
                    "destroy_s": t1 - t0,
                    "init_s": t2 - t1,
                    "check_s": t3 - t2,
                    "policy_s": time.perf_counter() - t3,
                    "sum": float(check.item()),
                    "pid": os.getpid(),
                }
            )
        elif cmd == "sample":  # every member runs the same steps; rank 0 returns the state
            from spotlight.config import SamplerConfig
            from spotlight.sampler import Trajectory, advance, start_trajectory

            prompts, seeds, sampler, version, resume, steps = args
            scfg = SamplerConfig(**sampler)
            if resume:
                trajs = [Trajectory.from_bytes(b) for b in resume]
            else:
                shape = module.latent_shape
                trajs = [
                    start_trajectory(p, sd, shape, scfg, version)
                    for p, sd in zip(prompts, seeds, strict=True)
                ]
            with torch.no_grad():
                advance(module, trajs, steps)
            out = [t.to_bytes() for t in trajs] if rank == 0 else None
            conn.send({"states": out, "sample_s": time.perf_counter() - t0})
        elif cmd == "leave":
            if dist.is_initialized():
                dist.destroy_process_group()
            conn.send({"destroy_s": time.perf_counter() - t0})
        elif cmd == "share":  # hand our weights to a peer (shared memory, no copy here)
            for t in state.values():
                t.share_memory_()
            conn.send({"state": state, "share_s": time.perf_counter() - t0})
        elif cmd == "adopt":  # weights from a peer or the replica: copy out of shared memory
            policy_cfg = args[1]
            if module is not None:  # a new version for the group: into the same module
                module.load_state_dict(args[0])
                state = module.state_dict()
            else:
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
        self.policy: dict[str, Any] = {}
        self.num_heads: int | None = None
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

    def load(
        self, wids: list[int], path: str, policy: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """Workers ``wids`` read the weights from storage. With ``policy`` (``PolicyConfig``
        fields) they can sample; groups formed later build their policy around these weights."""
        self.policy = policy or {}
        replies = self._call(wids, [("load", path, self.policy)] * len(wids))
        self.num_heads = replies[0]["heads"]
        return replies

    def sample(
        self,
        group: list[int],
        prompts: list[str],
        seeds: list[int],
        sampler: dict[str, Any],
        version: int = 0,
        resume: list[bytes] | None = None,
        steps: int | None = None,
    ) -> list[bytes]:
        """The group samples (or continues from ``resume``) ``steps`` steps (default: to the
        end) with Ulysses SP over its members; returns the trajectories' states."""
        msg = ("sample", prompts, seeds, sampler, version, resume, steps)
        replies = self._call(group, [msg] * len(group))
        return replies[0]["states"]

    def form(self, groups: list[list[int]]) -> dict[str, Any]:
        """Re-form the live workers into ``groups`` (lists of worker ids; every group its own
        communicator); returns the wall time and each worker's breakdown. A group size that does
        not divide the policy's head count is refused before anything changes."""
        from spotlight.sp_groups import check_degree

        if self.num_heads is not None:
            for group in groups:
                check_degree(len(group), self.num_heads)
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
        adopted = self._call([dst], [("adopt", shared["state"], self.policy)])[0]
        return {
            "wall_s": time.perf_counter() - t0,
            "share_s": shared["share_s"],
            "adopt_s": adopted["adopt_s"],
        }

    def set_weights(self, state: dict[str, Any], policy: dict[str, Any]) -> float:
        """Every live worker takes ``state`` (a new weights version) through shared memory;
        a formed group keeps its SP set-up. Returns the seconds it took."""
        t0 = time.perf_counter()
        for t in state.values():
            t.share_memory_()
        self.policy = policy
        wids = list(self.workers)
        self._call(wids, [("adopt", state, policy)] * len(wids))
        return time.perf_counter() - t0

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
