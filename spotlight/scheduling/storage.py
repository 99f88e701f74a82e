"""Where a cluster job's files live: the rules the job checks before it starts and on each node.

On a cluster every node reads the model folders (the policy's checkpoint, a model reward) and
the trainer writes the run folder; cluster.yaml mounts one shared file system at ``/shared`` on
every node for both (docs/cluster.md, "Storage"). Two mistakes cost a paid cluster its time and
are caught here, each as one message:

- a run folder on the head's own disk: the trainer nodes cannot reach it, and Ray Train's
  checkpoints, written there by the trainer, would never reach the driver
  (:func:`out_dir_problem`, checked by the driver before anything is deployed);
- a model folder missing on the node that loads it (shared storage not mounted there, a typo in
  the path): :func:`missing_paths_message`, raised by a sampler replica, the reward and each
  trainer worker before it builds anything, naming the node and the path.

Pure functions: the caller reads ``/proc/mounts`` (:func:`read_mounts`) and the node's name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import PurePosixPath

SHARED_FSTYPES = frozenset(
    {"nfs", "nfs4", "efs", "lustre", "fuse.s3fs", "fuse.mountpoint-s3", "fuse.gcsfuse", "ceph"}
)
"""File-system types every node of a cluster can mount at the same path (EFS mounts as nfs4,
FSx for Lustre as lustre)."""

DOCS = "docs/cluster.md#storage"


def read_mounts(text: str) -> list[tuple[str, str]]:
    """``(mount point, file-system type)`` of each line of ``/proc/mounts``."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 3:
            # /proc/mounts escapes spaces in paths as \040
            mounts.append((parts[1].replace("\\040", " "), parts[2]))
    return mounts


def mount_of(path: str, mounts: Iterable[tuple[str, str]]) -> tuple[str, str]:
    """The mount holding ``path`` (an absolute, resolved path): the longest mount point that is
    ``path`` or one of its parents; ``("/", "unknown")`` when none is listed."""
    p = PurePosixPath(path)
    best = ("/", "unknown")
    for point, fstype in mounts:
        q = PurePosixPath(point)
        if (q == p or q in p.parents) and len(q.parts) >= len(PurePosixPath(best[0]).parts):
            best = (point, fstype)
    return best


def out_dir_problem(out_dir: str, mounts: Iterable[tuple[str, str]]) -> str | None:
    """Why a cluster job cannot write its run folder at ``out_dir`` (resolved), or None.

    The trainer nodes write Ray Train's checkpoints into the run folder and the driver reads
    them back, so it must be on a file system every node mounts."""
    point, fstype = mount_of(out_dir, mounts)
    if fstype in SHARED_FSTYPES:
        return None
    return (
        f"--out {out_dir} is on this node's own disk ({fstype} at {point}), which the trainer"
        " nodes cannot reach: put the run folder on the shared file system every node mounts"
        f" (cluster.yaml mounts it at /shared; see {DOCS})"
    )


def missing_paths_message(
    node: str, role: str, paths: Mapping[str, str | None], exists: Callable[[str], bool]
) -> str | None:
    """One message naming ``node`` and every absolute path of ``paths`` (by the setting that
    names it) that does not exist there, or None. Relative paths and empty settings are not
    checked here: a relative path is the local runner's, and the loaders say what they miss."""
    missing = [
        f"{setting}={path}"
        for setting, path in paths.items()
        if path and os.path.isabs(path) and not exists(path)
    ]
    if not missing:
        return None
    return (
        f"{role} on node {node}: missing {', '.join(missing)}. Every node reads the model folders"
        f" from the shared file system (cluster.yaml mounts it at /shared; see {DOCS})"
    )


class StorageMissing(FileNotFoundError):
    """A model folder a node needs is not there (the message names the node and the path)."""

    MARKER = "StorageMissing: "
    """What precedes the message in a traceback's last line, where the driver finds it."""


def require_paths(
    node: str,
    role: str,
    paths: Mapping[str, str | None],
    exists: Callable[[str], bool] = os.path.exists,
) -> None:
    """Raise :class:`StorageMissing` when a path of ``paths`` is missing on this node."""
    message = missing_paths_message(node, role, paths, exists)
    if message is not None:
        raise StorageMissing(message)


def storage_error_in(text: str) -> str | None:
    """The :class:`StorageMissing` message inside ``text`` (a deployment's error with a
    replica's traceback), or None."""
    for line in text.splitlines():
        at = line.find(StorageMissing.MARKER)
        if at >= 0:
            return line[at + len(StorageMissing.MARKER) :].strip()
    return None
