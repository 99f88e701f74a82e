"""Free TCP ports on this machine, for the servers a run starts itself (torch.distributed's
rendezvous, a local Ray's dashboard). Plain sockets only, so any module may import it."""

from __future__ import annotations

import socket


def free_port(preferred: int | None = None) -> int:
    """``preferred`` when nothing listens on it, else a port the OS reports free.

    Another process may take the port between this call and its use; callers that start
    servers on it accept that small race (the OS hands out ports from a wide range)."""
    for port in ((preferred,) if preferred else ()) + (0,):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError("no free TCP port on 127.0.0.1")  # pragma: no cover (binding to 0 fails)
