"""Replicas on a shared CPU yield to the trainer: their work threads run at idle priority."""

import os
import threading

import pytest

from spotlight.deployments.node import idle_thread_priority


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling policies")
def test_idle_priority_applies_to_the_calling_thread_only():
    seen = {}

    def work():
        idle_thread_priority()
        seen["policy"] = os.sched_getscheduler(threading.get_native_id())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert seen["policy"] == os.SCHED_IDLE
    assert os.sched_getscheduler(threading.get_native_id()) != os.SCHED_IDLE  # not this one
