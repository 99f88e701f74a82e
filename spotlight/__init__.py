"""Spotlight: Flow-GRPO post-training of diffusion transformers with exploration on spot GPUs.

The ``spotlight`` package is the Ray-free core (config, sampler, GRPO math, rewards, the
single-process loop, the CLI). ``spotlight.policies``, ``spotlight.actors`` and
``spotlight.deployments`` live in the repository's top-level ``policies/``, ``actors/`` and
``deployments/`` folders (mapped in pyproject.toml).
"""

__version__ = "0.1.0"
