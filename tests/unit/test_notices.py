"""Cloud preemption notices: parsing, IMDSv2 flow, source fallback."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from spotlight.scheduling.notices import (
    NoticeWatcher,
    Unreachable,
    aws_notice,
    gcp_notice,
    parse_aws_instance_action,
    parse_gcp_preempted,
)

NOW = datetime(2026, 11, 30, 8, 20, tzinfo=UTC).timestamp()


def test_parse_aws_and_gcp():
    n = parse_aws_instance_action('{"action": "terminate", "time": "2026-11-30T08:22:00Z"}', NOW)
    assert n.source == "aws" and n.deadline_unix_s == NOW + 120
    assert parse_aws_instance_action("", NOW) is None
    late = parse_aws_instance_action('{"action": "stop", "time": "2026-11-30T09:00:00Z"}', NOW)
    assert late.deadline_unix_s == NOW + 120  # never trust a deadline past the 2-minute warning
    assert parse_gcp_preempted("FALSE", NOW) is None
    assert parse_gcp_preempted("TRUE\n", NOW).deadline_unix_s == NOW + 30


class FakeAws:
    def __init__(self, action: str | None):
        self.action = action
        self.calls = []

    def __call__(self, method, url, headers):
        self.calls.append((method, url, dict(headers)))
        if "169.254.169.254" not in url:
            return 404, ""
        if url.endswith("/api/token"):
            assert method == "PUT" and "X-aws-ec2-metadata-token-ttl-seconds" in headers
            return 200, "tok"
        assert headers.get("X-aws-ec2-metadata-token") == "tok"  # IMDSv2: token required
        if self.action is None:
            return 404, ""
        return 200, self.action


def test_aws_imdsv2_flow():
    http = FakeAws(None)
    assert aws_notice(http, NOW) is None
    assert [c[0] for c in http.calls] == ["PUT", "GET"]
    http.action = '{"action": "terminate", "time": "2026-11-30T08:21:30Z"}'
    assert aws_notice(http, NOW).deadline_unix_s == NOW + 90


def test_gcp_flow_sends_the_flavor_header():
    seen = {}

    def http(method, url, headers):
        seen.update(headers)
        return 200, "TRUE"

    assert gcp_notice(http, NOW).source == "gcp"
    assert seen == {"Metadata-Flavor": "Google"}


def test_watcher_drops_unreachable_sources_and_keeps_the_first_notice():
    calls = {"aws": 0, "gcp": 0}

    def aws(now):
        calls["aws"] += 1
        raise Unreachable("no route")

    answers = [None, None]

    def gcp(now):
        calls["gcp"] += 1
        return answers.pop(0) if answers else parse_gcp_preempted("TRUE", now)

    w = NoticeWatcher({"aws": aws, "gcp": gcp})
    assert w.poll(NOW) is None and w.poll(NOW + 1) is None
    assert calls["aws"] == 1 and "aws" in w.disabled
    n = w.poll(NOW + 2)
    assert n.source == "gcp" and n.deadline_unix_s == NOW + 32
    assert w.poll(NOW + 100) is n and calls["gcp"] == 3  # remembered, not polled again


def test_watcher_keeps_a_source_that_answered_before_through_a_transient_error():
    state = {"n": 0}

    def aws(now):
        state["n"] += 1
        if state["n"] == 2:
            raise Unreachable("blip")
        return None

    w = NoticeWatcher({"aws": aws})
    for t in range(4):
        w.poll(NOW + t)
    assert state["n"] == 4 and not w.disabled and w.errors == 1


def test_for_clouds_validates():
    with pytest.raises(ValueError, match="unknown notice source"):
        NoticeWatcher.for_clouds(["azure"])
    w = NoticeWatcher.for_clouds(["aws", "gcp"], http=FakeAws(None))
    assert w.poll(NOW) is None and "gcp" in w.disabled  # FakeAws answers 404 for GCP's URL


def test_node_notice_prefers_a_drain_under_way_and_turns_cloud_notices_into_drains():
    from spotlight.scheduling.notices import node_notice

    polled = []

    def gcp(now):
        polled.append(now)
        return parse_gcp_preempted("TRUE", now)

    w = NoticeWatcher({"gcp": gcp})
    n, drain = node_notice("me", {"me": int((NOW + 50) * 1000)}, w, NOW, margin_s=10)
    assert (n.source, n.deadline_unix_s, drain) == ("ray", NOW + 50, None) and not polled
    n, drain = node_notice("me", {"other": 0}, w, NOW, margin_s=10)
    assert n.source == "gcp" and drain == n.deadline_unix_s == NOW + 20
    n, drain = node_notice("me", {}, NoticeWatcher({"gcp": gcp}), NOW, margin_s=60)
    assert drain == NOW  # a margin longer than the warning: drain now, not in the past
    assert node_notice("me", {}, NoticeWatcher({}), NOW, 10) == (None, None)
    assert node_notice("me", {"me": 0}, None, NOW, 10)[0].deadline_unix_s == NOW
