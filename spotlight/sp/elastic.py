"""Long-lived SP workers on one node, re-formed into groups without restarting. No Ray.

A :class:`NodeWorkers` owns ``n`` worker processes (one per GPU; CPU processes here). Each loads
the policy weights once, from storage, when it starts. Afterwards the scheduler re-forms them
into SP groups as members come and go (:mod:`spotlight.sp.sp_groups`): only the communicator is
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
``spotlight bench regroup`` (benchmarks in spotlight/sp/bench_regroup.py) times both.

Workers talk to the scheduler over pipes; each command returns its timings.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from typing import Any

import torch.multiprocessing as mp

from spotlight.ports import free_port


def _build_policy(policy: dict[str, Any], state: dict, degree: int):
    """A policy module around the weights already in memory (no copy: ``assign``), with Ulysses
    SP of ``degree`` over the current process group when ``degree > 1``."""
    from spotlight.config import PolicyConfig
    from spotlight.policies import make_policy
    from spotlight.policies.sp import enable_ulysses
    from spotlight.sp.sp_groups import check_degree

    cfg = PolicyConfig(**{**policy, "checkpoint": None})
    # Built on the CPU (the tiny policy: milliseconds), then pointed at the weights in memory.
    # At Qwen-Image size this would build on the meta device and recompute the few
    # non-persistent buffers (RoPE tables) instead.
    module = make_policy(cfg, "cpu")
    module.load_state_dict(state, assign=True)
    if degree > 1:
        check_degree(degree, module.transformer.config.num_attention_heads)
        enable_ulysses(module.transformer, degree)
    return module


def _forget_failed_group() -> None:
    """Undo what a failed ``init_process_group`` (a peer died while the group formed) leaves.

    torch names the default group after a per-process counter, counts the group before its
    rendezvous, and sets the counter back to 0 only when a group is destroyed. A failed init
    destroys nothing, so this worker would be one ahead of its peers (who destroyed theirs) and
    the next group's rendezvous would wait on keys no peer writes (a ``DistStoreError`` after
    ``timeout_s``). No group exists here, so the count is 0 (torch has no public setter)."""
    from torch.distributed import distributed_c10d

    distributed_c10d._world.group_count = 0


class _Worker:
    """The state of one worker process and its commands (each returns the reply)."""

    def __init__(self, timeout_s: float):
        self.state: dict[str, Any] = {}
        self.policy_cfg: dict[str, Any] = {}
        self.module = None
        self.rank = 0
        self.timeout_s = timeout_s

    def load(self, path: str, policy_cfg: dict[str, Any] | None = None) -> dict[str, Any]:
        """Weights from storage (the cold path)."""
        from safetensors.torch import load_file

        t0 = time.perf_counter()
        self.state = {k: v.float() for k, v in load_file(path).items()}
        self.policy_cfg = policy_cfg or {}
        heads = None
        if self.policy_cfg:  # also checks that the weights fit the policy
            self.module = _build_policy(self.policy_cfg, self.state, 1)
            heads = self.module.transformer.config.num_attention_heads
        return {"load_s": time.perf_counter() - t0, "tensors": len(self.state), "heads": heads}

    def form(self, rank: int, world: int, port: int) -> dict[str, Any]:
        """Join a new group: only the communicator changes (and the module's SP set-up)."""
        import datetime

        import torch
        import torch.distributed as dist

        t0 = time.perf_counter()
        self._leave()
        t1 = time.perf_counter()
        try:
            dist.init_process_group(
                "gloo",
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=self.timeout_s),
            )
        except Exception:
            _forget_failed_group()
            raise
        t2 = time.perf_counter()
        check = torch.tensor([float(rank + 1)])
        dist.all_reduce(check)  # the new group works: sum of 1..world
        t3 = time.perf_counter()
        self.rank = rank
        if self.policy_cfg:
            self.module = _build_policy(self.policy_cfg, self.state, world)
        return {
            "destroy_s": t1 - t0,
            "init_s": t2 - t1,
            "check_s": t3 - t2,
            "policy_s": time.perf_counter() - t3,
            "sum": float(check.item()),
            "pid": os.getpid(),
        }

    def _leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            # a group broken by a dead peer may fail to shut down cleanly: drop it anyway
            with contextlib.suppress(Exception):
                dist.destroy_process_group()

    def sample(self, prompts, seeds, sampler, version, resume, steps) -> dict[str, Any]:
        """Every member runs the same steps; rank 0 returns the trajectories' states."""
        import torch

        from spotlight.config import SamplerConfig
        from spotlight.flow.sampler import Trajectory, advance, start_trajectory

        t0 = time.perf_counter()
        scfg = SamplerConfig(**sampler)
        if resume:
            trajs = [Trajectory.from_bytes(b) for b in resume]
        else:
            shape = self.module.latent_shape
            trajs = [
                start_trajectory(p, sd, shape, scfg, version)
                for p, sd in zip(prompts, seeds, strict=True)
            ]
        with torch.no_grad():
            advance(self.module, trajs, steps)
        out = [t.to_bytes() for t in trajs] if self.rank == 0 else None
        return {"states": out, "sample_s": time.perf_counter() - t0}

    def share(self) -> dict[str, Any]:
        """Hand our weights to a peer (shared memory, no copy here)."""
        t0 = time.perf_counter()
        for t in self.state.values():
            t.share_memory_()
        return {"state": self.state, "share_s": time.perf_counter() - t0}

    def adopt(self, state: dict[str, Any], policy_cfg: dict[str, Any]) -> dict[str, Any]:
        """Weights from a peer or the replica, copied out of shared memory; a formed group's
        module takes them in place (its SP set-up stays)."""
        t0 = time.perf_counter()
        self.policy_cfg = policy_cfg
        if self.module is not None:
            self.module.load_state_dict(state)
            self.state = self.module.state_dict()
        else:
            self.state = {k: v.clone() for k, v in state.items()}
        return {"adopt_s": time.perf_counter() - t0, "tensors": len(self.state)}

    def checksum(self) -> dict[str, Any]:
        return {"sum": float(sum(float(t.double().sum()) for t in self.state.values()))}


def _worker(conn, threads: int, timeout_s: float) -> None:  # runs in the child process
    """Serve the scheduler's commands until ``exit``. A command that fails (for example a
    collective whose peer died: gloo gives up after ``timeout_s``) answers ``{"error": ...}``
    and the worker lives on, ready to join a new group."""
    import torch

    torch.set_num_threads(threads)
    w = _Worker(timeout_s)
    conn.send({"ready": True})
    while True:
        cmd, *args = conn.recv()
        if cmd == "exit":
            w._leave()
            conn.send({})
            return
        method = getattr(w, cmd, None) if not cmd.startswith("_") else None
        try:
            if method is None:
                raise ValueError(f"unknown command {cmd!r}")
            reply = method(*args)
        except Exception as e:  # reported to the scheduler; the worker lives on
            reply = {"error": f"{type(e).__name__}: {e}"}
        conn.send(reply)


class WorkerLost(RuntimeError):
    """Workers died (their GPU is gone); ``dead`` names them."""

    def __init__(self, dead: list[int]):
        super().__init__(f"worker(s) {dead} died")
        self.dead = dead


@dataclass
class _Handle:
    proc: Any
    conn: Any


class NodeWorkers:
    """The node's SP workers (see the module docstring)."""

    def __init__(
        self, n: int, threads: int = 1, timeout_s: float = 10.0, start_timeout_s: float = 300.0
    ):
        if n < 1:
            raise ValueError(f"need at least one worker, got {n}")
        self._ctx = mp.get_context("spawn")
        self.workers: dict[int, _Handle] = {}
        self.threads = threads
        self.timeout_s = timeout_s
        """How long a collective waits for a peer before the survivors give up."""
        self.start_timeout_s = start_timeout_s
        """How long a new worker may take to start (Python, torch import) before it is given
        up."""
        self.groups: list[list[int]] = []
        self.policy: dict[str, Any] = {}
        self.num_heads: int | None = None
        try:
            self.start_timings = self.start(*range(n))
        except WorkerLost:  # not all of them came up: stop the others, nothing left running
            self.shutdown()
            raise

    def start(self, *wids: int) -> list[dict[str, float]]:
        """Start workers ``wids`` together (new processes: the cold path); returns timings.

        A worker that dies or does not report ready within ``start_timeout_s`` is killed and
        left out, and :class:`WorkerLost` names it (after the others have joined)."""
        t0 = time.perf_counter()
        pending = []
        for wid in wids:
            if wid in self.workers:
                raise ValueError(f"worker {wid} is already running")
            parent, child = self._ctx.Pipe()
            proc = self._ctx.Process(
                target=_worker, args=(child, self.threads, self.timeout_s), daemon=True
            )
            proc.start()
            child.close()  # the child holds its end: if it dies, our end sees EOF, not a hang
            pending.append((wid, proc, parent))
        out, failed = [], []
        deadline = time.monotonic() + self.start_timeout_s
        for wid, proc, parent in pending:
            try:  # ready: Python started, torch imported
                if not parent.poll(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError
                parent.recv()
            except (EOFError, OSError, TimeoutError):
                proc.kill()
                proc.join(timeout=10)
                failed.append(wid)
                continue
            self.workers[wid] = _Handle(proc, parent)
            out.append({"spawn_ready_s": time.perf_counter() - t0})
        if failed:
            raise WorkerLost(failed)
        return out

    def _call(self, wids: list[int], msgs: list[tuple]) -> list[dict[str, Any]]:
        """Send each worker its message, then collect every reply (so the pipes stay in step
        even when some fail). Raises :class:`WorkerLost` when workers died, else
        ``RuntimeError`` for a command that failed."""
        dead, out = [], []
        for wid, msg in zip(wids, msgs, strict=True):
            try:
                self.workers[wid].conn.send(msg)
            except (BrokenPipeError, ConnectionResetError, OSError):
                dead.append(wid)
        for wid in wids:
            if wid in dead:
                out.append({"error": "dead"})
                continue
            try:
                out.append(self.workers[wid].conn.recv())
            except (EOFError, ConnectionResetError, OSError):
                dead.append(wid)
                out.append({"error": "dead"})
        dead += [w for w in wids if w not in dead and not self.workers[w].proc.is_alive()]
        if dead:
            raise WorkerLost(sorted(set(dead)))
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
        return self.sample_groups([group], [(prompts, seeds, resume)], sampler, version, steps)[0]

    def sample_groups(
        self,
        groups: list[list[int]],
        parts: list[tuple[list[str], list[int], list[bytes] | None]],
        sampler: dict[str, Any],
        version: int = 0,
        steps: int | None = None,
    ) -> list[list[bytes]]:
        """Each group samples its own part ``(prompts, seeds, resume)`` at the same time (the
        groups are data parallel; within a group, Ulysses SP); returns each part's states."""
        if len(groups) != len(parts):
            raise ValueError(f"{len(groups)} groups but {len(parts)} parts")
        wids, msgs = [], []
        for group, (prompts, seeds, resume) in zip(groups, parts, strict=True):
            msg = ("sample", prompts, seeds, sampler, version, resume, steps)
            wids += group
            msgs += [msg] * len(group)
        replies = dict(zip(wids, self._call(wids, msgs), strict=True))
        return [replies[group[0]]["states"] for group in groups]

    def form(self, groups: list[list[int]]) -> dict[str, Any]:
        """Re-form the live workers into ``groups`` (lists of worker ids; every group its own
        communicator); returns the wall time and each worker's breakdown. A group size that does
        not divide the policy's head count is refused before anything changes."""
        from spotlight.sp.sp_groups import check_degree

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
        """Worker ``wid`` dies (its GPU was preempted): killed, no goodbye. A worker that
        never started (:meth:`start` gave it up) is only dropped from the groups."""
        h = self.workers.pop(wid, None)
        if h is not None:
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

    def join(self, wids: list[int], peer: int) -> dict[str, float]:
        """New workers ``wids`` start (new processes) and take their weights from ``peer``
        through shared memory, not from storage; form a group with them afterwards."""
        if peer not in self.workers:
            raise ValueError(f"peer {peer} is not a live worker")
        t0 = time.perf_counter()
        self.start(*wids)
        t1 = time.perf_counter()
        copies = [self.copy_weights(peer, wid) for wid in wids]
        return {
            "wall_s": time.perf_counter() - t0,
            "spawn_s": t1 - t0,
            "copy_s": sum(c["wall_s"] for c in copies),
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
