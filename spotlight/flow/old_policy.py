"""DiffusionNFT's sampling ("old") policy as an EMA of the trained one (``grpo.nft_old_ema``).

In DiffusionNFT (Zheng et al. 2025, arXiv 2509.16117; NVlabs/DiffusionNFT,
``scripts/train_nft_sd3.py``) the policy that samples the rollouts is not the trained one but a
second LoRA adapter, ``"old"``: the rollouts are drawn with it (``set_adapter("old")`` before
sampling), ``v_old`` in the loss is its velocity, and after each epoch's optimizer steps it
moves toward the trained adapter, ``old = decay * old + (1 - decay) * current``, with
``decay = return_decay(global_step, config.decay_type)`` at ``global_step`` optimizer steps so
far. ``return_decay`` (lines 169-189 of that file at commit 24af555) is 0 for ``step < flat``
and ``min((step - flat) * uprate, uphold)`` from there; ``decay_type`` 2 is ``flat`` 75,
``uprate`` 0.0075, ``uphold`` 0.999 (``config/nft.py``: its OCR config), type 1 is 0, 0.001,
0.5 (its GenEval and PickScore configs). :func:`ema_decay` is that schedule with the three
numbers as ``GRPOConfig.nft_old_ema_hold_steps``, ``nft_old_ema_rate`` and
``nft_old_ema_max``.

:class:`OldPolicy` holds the old copy of a policy's *trainable* parameters only (for LoRA the
adapters: never a second 20B model) and swaps it into the policy for sampling and for ``v_old``
(:meth:`OldPolicy.applied`). Validation samples with it too here (the Ray job validates through
the sampler replicas, which hold the published, i.e. sampling, weights); the reference evaluates
its trained adapter instead.

No Ray here: the reference loop and the Ray Train worker share it. The trainer also posts its
checkpoint parts as one blob (:func:`pack_parts`) where a run without the EMA posts its
optimizer state alone.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from spotlight.config import GRPOConfig

OLD_POLICY_FORMAT = "spotlight-nft-old-policy"
"""Safetensors metadata ``format`` of :meth:`OldPolicy.to_bytes`."""


def ema_decay(optimizer_steps: int, cfg: GRPOConfig) -> float:
    """The decay of the EMA step taken after ``optimizer_steps`` optimizer steps in all:
    0 while ``optimizer_steps < cfg.nft_old_ema_hold_steps``, then
    ``(optimizer_steps - hold) * cfg.nft_old_ema_rate``, capped at ``cfg.nft_old_ema_max``
    (DiffusionNFT's ``return_decay``, see the module docstring)."""
    if optimizer_steps < 0:
        raise ValueError(f"optimizer_steps must be >= 0, got {optimizer_steps}")
    if optimizer_steps < cfg.nft_old_ema_hold_steps:
        return 0.0
    ramp = (optimizer_steps - cfg.nft_old_ema_hold_steps) * cfg.nft_old_ema_rate
    return min(ramp, cfg.nft_old_ema_max)


class OldPolicy:
    """A copy of a policy's trainable parameters: DiffusionNFT's sampling policy.

    It starts equal to the policy (the reference copies its adapter into ``"old"`` before the
    first epoch), follows it by :meth:`step` after each update, and stands in for the trained
    parameters inside :meth:`applied`. ``optimizer_steps`` counts the optimizer steps it has
    followed (the schedule's ``global_step``); both are checkpointed (:meth:`to_bytes`).
    """

    def __init__(self, policy) -> None:
        self.params = [p.detach().clone() for p in policy.trainable_parameters()]
        """The old values, in the order of ``policy.trainable_parameters()``."""
        self.optimizer_steps = 0
        """Optimizer steps taken by the runs' updates so far (the schedule's step)."""

    @staticmethod
    def for_config(cfg: GRPOConfig, policy) -> OldPolicy | None:
        """The old policy of a run: a copy of ``policy`` with ``cfg.nft_old_ema``, else None
        (the old policy is then the weights each update starts with)."""
        return OldPolicy(policy) if cfg.nft_old_ema else None

    def _trainable(self, policy) -> list[torch.nn.Parameter]:
        params = policy.trainable_parameters()
        shapes = [tuple(p.shape) for p in params]
        if shapes != [tuple(o.shape) for o in self.params]:
            raise ValueError(
                f"old policy of {len(self.params)} tensors does not fit the policy's"
                f" {len(params)} trainable parameters (other shapes or count)"
            )
        return params

    def matches(self, policy) -> bool:
        """Whether the old parameters equal the policy's, bit for bit."""
        params = self._trainable(policy)
        return all(torch.equal(o, p.detach()) for o, p in zip(self.params, params, strict=True))

    def update(self, policy, decay: float) -> None:
        """``old = decay * old + (1 - decay) * current``, per parameter (decay 0: a copy)."""
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        with torch.no_grad():
            for o, p in zip(self.params, self._trainable(policy), strict=True):
                if decay == 0.0:
                    o.copy_(p.detach())
                else:
                    o.copy_(o * decay + p.detach() * (1.0 - decay))

    def step(self, policy, num_optimizer_steps: int, cfg: GRPOConfig) -> float:
        """After an update of ``num_optimizer_steps`` steps: count them and take the EMA step
        at :func:`ema_decay` of the new total. Returns the decay used."""
        self.optimizer_steps += int(num_optimizer_steps)
        decay = ema_decay(self.optimizer_steps, cfg)
        self.update(policy, decay)
        return decay

    @contextmanager
    def applied(self, policy) -> Iterator[None]:
        """Within: the policy's trainable parameters hold the old values, and autograd is off.
        On exit (also on an exception) they hold their own values again, bit for bit."""
        params = self._trainable(policy)
        with torch.no_grad():
            current = [p.detach().clone() for p in params]
            try:
                for p, o in zip(params, self.params, strict=True):
                    p.copy_(o)
                yield
            finally:
                for p, c in zip(params, current, strict=True):
                    p.copy_(c)

    # -- Checkpoints -----------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """``params.<i>`` (the old values, detached, not copied) and ``optimizer_steps``."""
        state = {f"params.{i}": o for i, o in enumerate(self.params)}
        state["optimizer_steps"] = torch.tensor(self.optimizer_steps, dtype=torch.int64)
        return state

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Copy a :meth:`state_dict` in (raises ValueError when it does not fit)."""
        want = {f"params.{i}": tuple(o.shape) for i, o in enumerate(self.params)}
        got = {k: tuple(v.shape) for k, v in state.items() if k != "optimizer_steps"}
        if got != want or "optimizer_steps" not in state:
            raise ValueError(
                f"old-policy state does not fit: {len(got)} tensors for {len(want)} trainable"
                " parameters (or other shapes, or no optimizer_steps)"
            )
        with torch.no_grad():
            for i, o in enumerate(self.params):
                o.copy_(state[f"params.{i}"])
        self.optimizer_steps = int(state["optimizer_steps"])

    def to_bytes(self) -> bytes:
        """:meth:`state_dict` as safetensors bytes (the checkpoint's old-policy file)."""
        from safetensors.torch import save

        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        return save(state, metadata={"format": OLD_POLICY_FORMAT})

    def load_bytes(self, data: bytes) -> None:
        """Load :meth:`to_bytes` (raises ValueError on other bytes or another policy)."""
        from safetensors.torch import load

        try:
            (size,) = struct.unpack("<Q", data[:8])
            meta = json.loads(data[8 : 8 + size]).get("__metadata__") or {}
            state = load(data)
        except Exception as e:  # safetensors raises its own error types
            raise ValueError(f"old-policy bytes unreadable ({e})") from None
        if meta.get("format") != OLD_POLICY_FORMAT:
            raise ValueError(f"not an old-policy file (format {meta.get('format')!r})")
        self.load_state_dict(state)


def load_old_policy(old: OldPolicy | None, data: bytes | None, where: str) -> None:
    """Load a checkpoint's old-policy bytes into ``old`` (both None: a run without
    ``grpo.nft_old_ema``). Raises ValueError when only one of them is there."""
    if old is None and data is None:
        return
    if old is None or data is None:
        raise ValueError(
            f"{where}: the checkpoint holds {'an' if data is not None else 'no'} old policy"
            f" (grpo.nft_old_ema) but the run has grpo.nft_old_ema {old is not None}"
        )
    old.load_bytes(data)


def sampling_bytes(policy, old: OldPolicy | None) -> bytes:
    """The weights the samplers get: the policy's state as bytes
    (:func:`spotlight.flow.weights.policy_bytes`), with the old parameters in place when
    there is an old policy."""
    from spotlight.flow.weights import policy_bytes

    if old is None:
        return policy_bytes(policy)
    with old.applied(policy):
        return policy_bytes(policy)


def sampling_copy(policy, old: OldPolicy | None) -> OldPolicy:
    """A copy of the weights the samplers get (the old parameters when there is an old
    policy): what a pipelined run keeps of the weights that sample the next rollout."""
    if old is None:
        return OldPolicy(policy)
    with old.applied(policy):
        return OldPolicy(policy)


_PARTS_MAGIC = b"spotlight-parts\x00"


def pack_parts(parts: dict[str, bytes]) -> bytes:
    """Named byte strings as one: how the Ray trainer posts its optimizer state, trained
    weights and old policy together (a run without the EMA posts the optimizer's bytes
    alone). :func:`unpack_parts` reverses it."""
    header = json.dumps([[name, len(data)] for name, data in parts.items()]).encode()
    return b"".join([_PARTS_MAGIC, struct.pack("<Q", len(header)), header, *parts.values()])


def unpack_parts(data: bytes) -> dict[str, bytes] | None:
    """The parts of :func:`pack_parts` bytes; None for any other bytes (a plain optimizer
    state: ``torch.save`` output starts with a zip header)."""
    if not data.startswith(_PARTS_MAGIC):
        return None
    at = len(_PARTS_MAGIC)
    (size,) = struct.unpack("<Q", data[at : at + 8])
    names = json.loads(data[at + 8 : at + 8 + size])
    at += 8 + size
    out = {}
    for name, length in names:
        out[name] = data[at : at + length]
        at += length
    if at != len(data):
        raise ValueError(f"packed parts: {len(data)} bytes, the header accounts for {at}")
    return out
