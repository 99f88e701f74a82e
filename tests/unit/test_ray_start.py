"""Starting the local Ray: a node that timed out during startup (a busy machine) is cleaned up
and started once more; other errors are raised as they are. A fake ``ray`` stands in."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from spotlight.job.cluster import RAY_NODE_TIMEOUT, init_local

from .conftest import REAL_SLEEP

TIMEOUT = Exception(f"The current node {RAY_NODE_TIMEOUT}. This could happen because ...")


class FakeRay:
    """``init`` starts a child process (as Ray's GCS and raylet are) and raises the next of
    ``errors`` (None: it started)."""

    def __init__(self, *errors):
        self.errors = list(errors)
        self.children: list[subprocess.Popen] = []
        self.calls: list[str] = []

    def init(self, **kwargs):
        self.calls.append(f"init {kwargs['address']}")
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        self.children.append(child)
        error = self.errors.pop(0)
        if error is not None:
            raise error

    def shutdown(self):
        self.calls.append("shutdown")


@pytest.fixture
def fake_ray(monkeypatch):
    """Makes fake Rays; the children they started are killed after the test."""
    monkeypatch.setattr("time.sleep", REAL_SLEEP)  # psutil waits on the stopped children
    made: list[FakeRay] = []

    def make(*errors):
        made.append(FakeRay(*errors))
        return made[-1]

    yield make
    for child in [c for ray in made for c in ray.children]:
        child.kill()
        child.wait()


def test_a_node_that_timed_out_is_stopped_and_started_once_more(fake_ray):
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    ray = fake_ray(TIMEOUT, None)
    log = io.StringIO()
    try:
        init_local(ray, log, address="local", num_cpus=2)
        assert ray.calls == ["init local", "shutdown", "init local"]
        first, second = ray.children
        assert first.poll() is not None  # the failed start's process was stopped
        assert second.poll() is None  # the node that started runs on
        assert bystander.poll() is None  # a child that was there before is not Ray's
        assert "did not start in time" in log.getvalue()
        assert "stopping the 1 process(es)" in log.getvalue()
    finally:
        bystander.kill()
        bystander.wait()


def test_a_second_timeout_or_any_other_error_is_raised(fake_ray):
    ray = fake_ray(TIMEOUT, TIMEOUT)
    with pytest.raises(Exception, match=RAY_NODE_TIMEOUT):
        init_local(ray, None, address="local")
    assert ray.calls == ["init local", "shutdown", "init local"]

    ray = fake_ray(ValueError("bad resources"))
    with pytest.raises(ValueError, match="bad resources"):
        init_local(ray, None, address="local")
    assert ray.calls == ["init local"]  # not retried
