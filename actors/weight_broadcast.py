"""The ``WeightBroadcast`` detached actor: versioned, checksummed policy weights.

The trainer publishes each new version as safetensors bytes with its sha256; the actor verifies
them and ``ray.put``s them itself, so the object outlives the trainer worker that made it (an
object put by a Train worker dies with the worker). It keeps the newest ``keep`` versions, which
bounds how stale a reader may be.

Readers call :func:`fetch_weights`: it gets the version's object reference from the actor and
the bytes from the object store. Ray keeps one copy per node: the first replica on a node pulls
the bytes over the network, the others on that node read the node's shared-memory copy. Every
reader verifies the checksum (:func:`spotlight.flow.weights.unpack_state`), so a partial or
corrupted version raises instead of being sampled from.
"""

from __future__ import annotations

import ray

from spotlight.actors.request_queue import QUIET
from spotlight.flow.weights import WeightsCorrupted, WeightsHeader, checksum, unpack_state
from spotlight.scheduling.polling import poll_until


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class WeightBroadcast:
    def __init__(self, keep: int = 3):
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self._keep = keep
        self._versions: dict[int, tuple[WeightsHeader, ray.ObjectRef]] = {}

    def publish(self, header: WeightsHeader, data: bytes) -> None:
        """Verify and store a version; a mismatching checksum or length is refused."""
        if len(data) != header.num_bytes or checksum(data) != header.sha256:
            raise WeightsCorrupted(
                f"publish v{header.version}: bytes do not match the header "
                f"({len(data)} bytes, expected {header.num_bytes}); version refused"
            )
        self._versions[header.version] = (header, ray.put(data))
        for old in sorted(self._versions)[: -self._keep]:
            del self._versions[old]

    @QUIET
    def header(self, version: int) -> WeightsHeader | None:
        entry = self._versions.get(version)
        return entry[0] if entry else None

    @QUIET
    def get(self, version: int) -> tuple[WeightsHeader, list[ray.ObjectRef]] | None:
        """The header and ``[ref]`` of ``version`` (a list, so Ray does not resolve the ref)."""
        entry = self._versions.get(version)
        return (entry[0], [entry[1]]) if entry else None

    @QUIET
    def versions(self) -> list[int]:
        return sorted(self._versions)

    def clear(self) -> None:
        self._versions.clear()


def publish_weights(broadcast, version: int, iteration: int, data: bytes) -> WeightsHeader:
    """Publish ``data`` as ``version`` (blocks until the actor has stored it)."""
    header = WeightsHeader(version, checksum(data), len(data), iteration)
    ray.get(broadcast.publish.remote(header, data))
    return header


REPUBLISH_KEEP = 2
"""Versions the trainer keeps to publish again: the newest, and the one before, on which items
still queued were submitted (exploration during the update, a pipelined rollout)."""


class Publisher:
    """The publishing end (the trainer's rank 0): publishes versions and keeps the newest
    :data:`REPUBLISH_KEEP`, to publish them again when the actor restarted without them (Ray
    restarts it with no versions). Costs that many copies of the weights' bytes in its memory."""

    def __init__(self, broadcast):
        self.broadcast = broadcast
        self.kept: dict[int, tuple[WeightsHeader, bytes]] = {}

    def publish(self, version: int, iteration: int, data: bytes) -> WeightsHeader:
        header = publish_weights(self.broadcast, version, iteration, data)
        self.kept[version] = (header, data)
        for old in sorted(self.kept)[:-REPUBLISH_KEEP]:
            del self.kept[old]
        return header

    def republish_if_lost(self) -> list[int]:
        """Publish again, oldest first, the kept versions the actor no longer holds; returns
        them."""
        lost = [v for v in sorted(self.kept) if not ray.get(self.broadcast.header.remote(v))]
        for v in lost:
            ray.get(self.broadcast.publish.remote(*self.kept[v]))
        return lost


def read_published(
    broadcast, version: int, timeout_s: float = 300.0
) -> tuple[WeightsHeader, bytes]:
    """The header and verified bytes of ``version``, waiting while it is not there (a restarted
    actor gets it again from the trainer's :class:`Publisher`)."""
    entry = poll_until(lambda: ray.get(broadcast.get.remote(version)), timeout_s, 0.01, 0.5)
    if entry is None:
        raise TimeoutError(f"weights v{version} not published within {timeout_s:.0f} s")
    header, (ref,) = entry
    data = ray.get(ref)
    unpack_state(data, header)  # verify before the caller keeps it
    return header, data


def fetch_weights(broadcast, version: int, timeout_s: float = 300.0):
    """Wait for ``version``, read its bytes and verify them: ``(header, state_dict)``.

    Raises:
        WeightsCorrupted: the bytes do not match the header.
        TimeoutError: the version did not appear within ``timeout_s``.
        LookupError: the version was published and has since been dropped (too stale).
    """

    def probe():
        entry = ray.get(broadcast.get.remote(version))
        if entry is None:
            kept = ray.get(broadcast.versions.remote())
            if kept and version < kept[0]:
                raise LookupError(f"weights v{version} is gone; the broadcast keeps {kept}")
        return entry

    entry = poll_until(probe, timeout_s, first_delay_s=0.01, max_delay_s=0.2)
    if entry is None:
        raise TimeoutError(f"weights v{version} not published within {timeout_s:.0f} s")
    header, (ref,) = entry
    return header, unpack_state(ray.get(ref), header)
