"""The Ray job (``spotlight.job``): a thin driver and trainer over the pure core.

Everything here runs Ray; nothing in ``spotlight/`` or ``policies/`` does (tests/unit/
test_core_imports_no_ray.py). One iteration is the five steps of docs/design.md, read top to
bottom in :mod:`.controller`; the modules around it are the plumbing:

- :mod:`.options`: ``RayOptions``, *where* and how wide the job runs (``Config`` is *what*);
- :mod:`.cluster`: joining or starting Ray, the capacity check, cleaning up;
- :mod:`.launch`: the Serve sampler app and the Ray Train trainer;
- :mod:`.queue_client`: the driver's calls to the request queue, which survive its restart;
- :mod:`.run_watch`: the driver's waits, which account GPU time, replay the spot trace and
  watch the trainer;
- :mod:`.protocol`: both ends of the driver <-> trainer hand-off, written out at its top;
- :mod:`.controller`: the iteration as named steps; :mod:`.run`: ``run_ray``, the run loop;
- :mod:`.trainer`: the Ray Train worker loop; :mod:`.trainer_sampling`: its GPUs sampling
  rollout items while it waits;
- :mod:`.local_cluster`: the local multi-node Ray of ``--spot-trace``; :mod:`.ray_logs`: Ray's
  own output to ``<out>/ray.log``.

The repository's top-level ``job/`` folder is this package (mapped in pyproject.toml, as
``actors/`` and ``deployments/`` are).
"""
