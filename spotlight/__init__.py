"""Spotlight: Flow-GRPO post-training of diffusion transformers with exploration on spot GPUs.

The ``spotlight`` package holds the core (config, sampler, GRPO math, rewards, exploration,
queue rules, simulator, the single-process loop, the CLI), which imports no Ray, and the Ray
job's driver side (``controller``, ``trainer``, ``local_cluster``, ``ray_logs``), which does;
tests/unit/test_core_imports_no_ray.py holds the line. ``spotlight.policies``,
``spotlight.actors`` and ``spotlight.deployments`` live in the repository's top-level
``policies/``, ``actors/`` and ``deployments/`` folders (mapped in pyproject.toml).
"""

__version__ = "0.1.0"
