"""Ray tests: a real local Ray per module (helpers here), small recipes, one thread each."""

from __future__ import annotations

import os

import pytest

from ray_tests.helpers import ray_options
from spotlight.job.cluster import JOB_ENV
from spotlight.job.options import local_resources

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # tests only (see ../shared RAY_NOTES)


@pytest.fixture(scope="module")
def local_ray():
    """A local Ray with the job's virtual resources; shut down after the module."""
    import ray

    from spotlight.actors.names import NAMESPACE

    opts = ray_options(num_train_workers=2)  # capacity for the data-parallel test
    ray.init(
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
