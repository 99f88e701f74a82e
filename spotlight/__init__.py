"""Spotlight: Flow-GRPO post-training of diffusion transformers with exploration on spot GPUs.

The ``spotlight`` package holds the core (config, sampler, GRPO math, rewards, exploration,
queue rules, simulator, the single-process loop, the CLI), which imports no Ray
(tests/unit/test_core_imports_no_ray.py holds the line). The Ray job is ``spotlight.job``, with
``spotlight.actors`` and ``spotlight.deployments``; they and ``spotlight.policies`` live in the
repository's top-level ``job/``, ``actors/``, ``deployments/`` and ``policies/`` folders
(mapped in pyproject.toml).
"""

__version__ = "0.1.0"
