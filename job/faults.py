"""Strikes a schedule of faults (``spotlight.scheduling.chaos``) on a run in a driver process.

A :class:`Striker` starts a local Ray cluster (``LocalSpotCluster``: a head with the on-demand
roles, one spot node per sampler replica), runs the driver (``spotlight train`` joined to it)
as a child process, and for each fault waits for its moment, strikes, and waits for the run's
next committed iteration (or, struck after the last one, the driver's clean exit). What to
strike and when is the schedule's; this module moves processes and waits.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import ray

from spotlight.actors.names import BANDIT_STATE, NAMESPACE, REQUEST_QUEUE, WEIGHT_BROADCAST
from spotlight.job.local_cluster import LocalSpotCluster, head_resources
from spotlight.job.protocol import train_batch_key
from spotlight.scheduling import resources
from spotlight.scheduling.chaos import Fault, FaultKind, Moment

POLL_S = 0.1
"""Between looks at the run while waiting for a moment or a commit."""
MOMENT_TIMEOUT_S = 900.0
"""How long a fault waits for its moment before it strikes anyway (noted as missed)."""
RECOVERY_TIMEOUT_S = 900.0
"""A fault not followed by a committed iteration within this long is not recovered."""
NOTICE_HANDBACK_S = 15.0
"""After a drain notice, how long the node stays for its replica to hand its items back."""
ACTORS = {FaultKind.QUEUE: REQUEST_QUEUE, FaultKind.BROADCAST: WEIGHT_BROADCAST}
ACTORS[FaultKind.BANDIT] = BANDIT_STATE
PROCESSES = {FaultKind.REWARD: "RewardScorer", FaultKind.TRAINER: "RayTrainWorker"}
"""Kinds struck by killing an actor's process, by the actor's class name (its last part)."""


def rows_of(run: Path) -> list[dict[str, Any]]:
    """The run's metrics rows (a line being written is left out)."""
    f = run / "metrics.jsonl"
    rows = []
    for line in f.read_text().splitlines() if f.exists() else []:
        with contextlib.suppress(json.JSONDecodeError):
            rows.append(json.loads(line))
    return rows


def committed(run: Path) -> int:
    """Iterations done in the run's checkpoint (0 before the first)."""
    with contextlib.suppress(OSError, json.JSONDecodeError, KeyError):
        return json.loads((run / "checkpoint" / "state.json").read_text())["iterations_done"]
    return 0


class Striker:
    """The cluster, the driver process and the strikes (module docstring)."""

    def __init__(self, num_spot_nodes: int, log_path: Path):
        self.num_spot_nodes = num_spot_nodes
        self.log = log_path.open("a")
        self.driver: subprocess.Popen | None = None
        self.cluster: LocalSpotCluster | None = None

    def __enter__(self) -> Striker:
        head = {**head_resources(1, False), resources.RESOURCE_REWARD: 1.0}
        self.cluster = LocalSpotCluster(head_cpus=3, head_resources=head)
        for slot in range(self.num_spot_nodes):
            self.cluster.add(slot)
        ray.init(address=self.cluster.address, namespace=NAMESPACE, log_to_driver=False)
        return self

    def __exit__(self, *exc) -> None:
        if self.driver is not None and self.driver.poll() is None:
            self.driver.kill()
            self.driver.wait()
        ray.shutdown()
        self.cluster.shutdown()
        self.log.close()

    # -- The driver ----------------------------------------------------------------------
    def start_driver(self, cmd: list[str]) -> None:
        env = {**os.environ, "RAY_ADDRESS": self.cluster.address, "PYTHONUNBUFFERED": "1"}
        self.log.write(f"[chaos] $ {' '.join(cmd)}\n")
        self.log.flush()
        self.driver = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=self.log)

    def _driver_failed(self) -> bool:
        return self.driver.poll() not in (None, 0)

    def finish(self, timeout_s: float) -> int | None:
        """Wait for the driver's end; its exit code (None: still running at the timeout)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            return self.driver.wait(timeout=timeout_s)
        return None

    # -- The schedule --------------------------------------------------------------------
    def carry_out(self, schedule: list[Fault], run: Path, resume_cmd) -> list[dict]:
        """Strike each fault at its moment; one record per fault (``injected``,
        ``recovery_s``: seconds to the next committed iteration, None if none came)."""
        records = []
        for fault in schedule:
            rec: dict[str, Any] = {**fault.to_dict(), "injected": 0, "recovery_s": None}
            records.append(rec)
            if self.driver.poll() is not None:  # the run ended (or failed): nothing to strike
                rec["skipped"] = f"driver exited with {self.driver.returncode}"
                continue
            rec["moment_seen"] = self._wait_moment(fault, run)
            time.sleep(fault.delay_s)
            before, t0 = committed(run), time.monotonic()
            try:
                rec.update(self._strike(fault, run, resume_cmd), injected=1)
            except Exception as e:  # nothing to strike (a replica restarting): not injected
                rec["error"] = f"{type(e).__name__}: {e}"
                continue
            rec["recovery_s"] = self._wait_commit(run, before, t0)
            print(f"[chaos] {rec}", flush=True)
        return records

    def _wait_moment(self, fault: Fault, run: Path) -> bool:
        deadline = time.monotonic() + MOMENT_TIMEOUT_S
        while time.monotonic() < deadline and self.driver.poll() is None:
            done = len(rows_of(run))
            if done > fault.iteration + (fault.moment == Moment.MID_COMMIT):
                return False  # the moment went by
            with contextlib.suppress(Exception):  # an actor restarting, the run not up yet
                if done >= fault.iteration and self._at_moment(fault, run, done):
                    return True
            time.sleep(POLL_S)
        return False

    def _at_moment(self, fault: Fault, run: Path, done: int) -> bool:
        it = fault.iteration
        if fault.moment == Moment.MID_COMMIT:
            return done == it + 1
        if fault.moment == Moment.MID_BROADCAST:
            broadcast = ray.get_actor(WEIGHT_BROADCAST, namespace=NAMESPACE)
            return max(ray.get(broadcast.versions.remote()), default=0) >= it + 1
        queue = ray.get_actor(REQUEST_QUEUE, namespace=NAMESPACE)
        if fault.moment == Moment.TRAINING:
            return ray.get(queue.wait_post.remote(train_batch_key(it), 0.0)) is not None
        leased = ray.get(queue.leased.remote())
        if fault.kind in (FaultKind.SAMPLER_NOTICE, FaultKind.SAMPLER_KILL):
            return self._slot_in_flight(leased) is not None
        return bool(leased)

    def _slot_in_flight(self, leased: list[dict]) -> int | None:
        for slot, node in self.cluster.nodes.items():
            if any(node.node_id[:8] in x["worker_id"] for x in leased):
                return slot
        return None

    def _wait_commit(self, run: Path, before: int, t0: float) -> float | None:
        while time.monotonic() - t0 < RECOVERY_TIMEOUT_S and not self._driver_failed():
            if committed(run) > before:
                return round(time.monotonic() - t0, 2)
            if self.driver.poll() == 0:  # the run ended well: its last commit came after the
                # strike, or the strike came after it (a moment the striker saw too late) and
                # the run still ended well
                return round(time.monotonic() - t0, 2)
            time.sleep(POLL_S)
        return None

    # -- The strikes ---------------------------------------------------------------------
    def _strike(self, fault: Fault, run: Path, resume_cmd) -> dict[str, Any]:
        kind = fault.kind
        if kind in ACTORS:
            ray.kill(ray.get_actor(ACTORS[kind], namespace=NAMESPACE), no_restart=False)
            return {}
        if kind in PROCESSES:
            pid = self._actor_pid(PROCESSES[kind])
            os.kill(pid, signal.SIGKILL)
            return {"pid": pid}
        if kind == FaultKind.DRIVER:
            return self._restart_driver(run, resume_cmd)
        return self._lose_node(kind == FaultKind.SAMPLER_NOTICE)

    def _actor_pid(self, class_name: str) -> int:
        from ray.util.state import list_actors

        # this cluster's State API: its dashboard may not be on Ray's default port
        # (local_cluster.DASHBOARD_PORT is taken while another local Ray holds it)
        gcs = ray.get_runtime_context().gcs_address
        alive = list_actors(address=gcs, filters=[("state", "=", "ALIVE")], limit=1000)
        pids = [a.pid for a in alive if a.class_name.rsplit(":", 1)[-1] == class_name]
        if not pids:
            raise RuntimeError(f"no live {class_name} actor to strike")
        return pids[0]

    def _restart_driver(self, run: Path, resume_cmd) -> dict[str, Any]:
        self.driver.send_signal(signal.SIGKILL)
        self.driver.wait()
        rows, done = len(rows_of(run)), committed(run)
        self.start_driver(resume_cmd())
        # the iteration it was in, and any row written past its last checkpoint
        return {"iterations_redone": 1 + rows - done}

    def _lose_node(self, notice: bool) -> dict[str, Any]:
        """A spot node with a sampler replica goes (drained with a notice first, or at once);
        another spot node joins in its place."""
        queue = ray.get_actor(REQUEST_QUEUE, namespace=NAMESPACE)
        slot = self._slot_in_flight(ray.get(queue.leased.remote()))
        slot = min(self.cluster.nodes) if slot is None else slot
        if notice:
            released = ray.get(queue.stats.remote())["released"]
            self.cluster.drain(slot, time.time() + 30)
            deadline = time.monotonic() + NOTICE_HANDBACK_S
            while time.monotonic() < deadline:
                if ray.get(queue.stats.remote())["released"] > released:
                    break
                time.sleep(POLL_S)
        self.cluster.remove(slot, graceful=notice)
        self.cluster.add(slot)
        return {"slot": slot}
