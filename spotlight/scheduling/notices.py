"""Preemption notices from the cloud's instance metadata, without Ray.

Ray does not read cloud interruption notices. A :class:`NoticeWatcher` polls, on the node it runs
on, the sources that apply:

* **AWS** (IMDSv2): ``PUT /latest/api/token`` then ``GET
  /latest/meta-data/spot/instance-action`` -> ``{"action": "terminate"|"stop", "time":
  "2026-11-30T08:22:00Z"}`` about two minutes ahead; 404 while there is none.
* **GCP**: ``GET /computeMetadata/v1/instance/preempted`` (header ``Metadata-Flavor: Google``)
  -> ``TRUE`` once preemption has begun; the VM has about 30 s.

The first notice wins; a source that fails before it ever answered (not on that cloud) is
switched off, so the watcher costs nothing elsewhere. The Ray side (deployments/sampler.py)
turns a notice into a drain of the node with the deadline minus a safety margin, and also treats a
drain that someone else requested (reason preemption) as the notice.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

AWS_IMDS = "http://169.254.169.254"
GCP_METADATA = "http://metadata.google.internal"
AWS_GRACE_S = 120.0
GCP_GRACE_S = 30.0


@dataclass(frozen=True)
class Notice:
    source: str
    """'aws', 'gcp' or 'ray' (a drain already requested through Ray)."""
    deadline_unix_s: float
    """When the node goes away."""
    detail: str = ""


class Unreachable(Exception):
    """The metadata service is not there (not on this cloud)."""


Http = Callable[[str, str, dict[str, str]], tuple[int, str]]
"""``http(method, url, headers) -> (status, body)``; raises :class:`Unreachable`."""


def urllib_http(timeout_s: float = 0.5) -> Http:
    def http(method: str, url: str, headers: dict[str, str]) -> tuple[int, str]:
        req = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, ""
        except (urllib.error.URLError, OSError) as e:
            raise Unreachable(str(e)) from e

    return http


def parse_aws_instance_action(body: str, now_unix_s: float) -> Notice | None:
    """An AWS ``spot/instance-action`` document as a notice (None for an empty body)."""
    if not body.strip():
        return None
    doc = json.loads(body)
    when = datetime.fromisoformat(doc["time"].replace("Z", "+00:00")).timestamp()
    return Notice("aws", min(when, now_unix_s + AWS_GRACE_S), f"action={doc.get('action')}")


def parse_gcp_preempted(body: str, now_unix_s: float) -> Notice | None:
    """GCP's ``instance/preempted`` value as a notice (None unless ``TRUE``)."""
    if body.strip().upper() != "TRUE":
        return None
    return Notice("gcp", now_unix_s + GCP_GRACE_S, "preempted=TRUE")


def aws_notice(http: Http, now_unix_s: float) -> Notice | None:
    status, token = http(
        "PUT",
        f"{AWS_IMDS}/latest/api/token",
        {"X-aws-ec2-metadata-token-ttl-seconds": "60"},
    )
    if status != 200:
        raise Unreachable(f"IMDSv2 token: HTTP {status}")
    status, body = http(
        "GET",
        f"{AWS_IMDS}/latest/meta-data/spot/instance-action",
        {"X-aws-ec2-metadata-token": token},
    )
    if status == 404:
        return None
    if status != 200:
        raise Unreachable(f"instance-action: HTTP {status}")
    return parse_aws_instance_action(body, now_unix_s)


def gcp_notice(http: Http, now_unix_s: float) -> Notice | None:
    status, body = http(
        "GET",
        f"{GCP_METADATA}/computeMetadata/v1/instance/preempted",
        {"Metadata-Flavor": "Google"},
    )
    if status != 200:
        raise Unreachable(f"preempted: HTTP {status}")
    return parse_gcp_preempted(body, now_unix_s)


Source = Callable[[float], "Notice | None"]


class NoticeWatcher:
    """Polls its sources in order; remembers the first notice; drops unreachable sources."""

    def __init__(self, sources: dict[str, Source]):
        self.sources = dict(sources)
        self.notice: Notice | None = None
        self.disabled: dict[str, str] = {}
        self.errors = 0
        self._answered: set[str] = set()

    @staticmethod
    def for_clouds(clouds: list[str], http: Http | None = None) -> NoticeWatcher:
        """A watcher over ``clouds`` ('aws', 'gcp'), through ``http`` (urllib by default)."""
        http = http or urllib_http()
        table = {"aws": aws_notice, "gcp": gcp_notice}
        unknown = [c for c in clouds if c not in table]
        if unknown:
            raise ValueError(f"unknown notice source(s) {unknown}; known: aws, gcp")
        return NoticeWatcher({c: (lambda now, f=table[c]: f(http, now)) for c in clouds})

    def poll(self, now_unix_s: float) -> Notice | None:
        if self.notice is not None:
            return self.notice
        for name, source in list(self.sources.items()):
            try:
                found = source(now_unix_s)
            except (Unreachable, ValueError, KeyError) as e:
                self.errors += 1
                if name not in self._answered:  # never answered: not this cloud
                    self.disabled[name] = str(e)
                    del self.sources[name]
                continue
            self._answered.add(name)
            if found is not None:
                self.notice = found
                return found
        return None


def node_notice(
    node_id: str,
    draining_ms: dict[str, int],
    watcher: NoticeWatcher | None,
    now_unix_s: float,
    margin_s: float,
) -> tuple[Notice | None, float | None]:
    """The notice for ``node_id``, and the drain deadline to request through Ray (None when
    there is nothing to request).

    A drain already under way (``draining_ms``: Ray's ``{node_id: deadline_ms}``, 0 = none) is
    the notice; the cloud is not polled then. Otherwise a cloud notice becomes a drain
    ``margin_s`` before the cloud's deadline (never in the past)."""
    if node_id in draining_ms:
        ms = draining_ms[node_id]
        return Notice("ray", ms / 1000 if ms else now_unix_s, "drain requested"), None
    found = watcher.poll(now_unix_s) if watcher is not None and watcher.sources else None
    if found is None:
        return None, None
    deadline = max(now_unix_s, found.deadline_unix_s - margin_s)
    return Notice(found.source, deadline, found.detail), deadline
