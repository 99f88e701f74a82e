"""Ray tests: a real local Ray per module (helpers here), small recipes, one thread each.

The suite may run in several pytest processes (scripts/test.sh, pytest-xdist): a module that
stops every Ray on the machine (``ray stop --force``; marked ``ray_exclusive``) must not run
beside another Ray test. Each module holds a lock on a file all processes share for its
lifetime: shared, or exclusive for a ``ray_exclusive`` module."""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path

import pytest

from ray_tests.helpers import ray_options
from spotlight.job.cluster import JOB_ENV, init_local
from spotlight.job.options import local_resources

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # tests only (see ../shared RAY_NOTES)


LOCK_FILE = Path(tempfile.gettempdir()) / f"spotlight-ray-tests-{os.getuid()}.lock"


@pytest.fixture(scope="module", autouse=True)
def _ray_module_lock(request):
    """Held while the module runs; before its other module fixtures (autouse ones come first)."""
    exclusive = request.node.get_closest_marker("ray_exclusive") is not None
    with open(LOCK_FILE, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with the job's virtual resources; shut down after the module."""
    import ray

    from spotlight.actors.names import NAMESPACE

    opts = ray_options(num_train_workers=2)  # capacity for the data-parallel test
    init_local(
        ray,
        None,
        address="local",  # never a cluster another process left behind
        num_cpus=6,
        resources=local_resources(opts),
        namespace=NAMESPACE,
        include_dashboard=False,
        runtime_env={"env_vars": {**JOB_ENV, "RAY_AUTH_MODE": "disabled"}},
    )
    yield ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()
