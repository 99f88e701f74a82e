"""Typed configuration: *what* the algorithm does, apart from *where* it runs.

Named recipes (spotlight/recipes.py) are functions returning a :class:`Config`. Every field has a
docstring; counts start with ``num_``, units are spelled in names.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class SamplerConfig:
    """Flow-GRPO SDE sampler settings (a trajectory carries these, so a resume cannot drift)."""

    num_steps: int = 10
    """Denoising steps per image."""
    eta: float = 0.7
    """SDE noise level: sigma_t = eta * sqrt(t / (1 - t))."""
    shift: float = 1.0
    """SD3 time shift of the grid (1 = uniform in t)."""
    guidance_scale: float = 1.0
    """Classifier-free guidance weight; 1.0 disables CFG (one forward pass per step)."""
    batch_size: int = 8
    """Rows per model forward. The model always runs on exactly this many rows (a short batch is
    padded), so a sample's bits do not depend on what else shares its batch: matrix kernels pick
    their reduction order by shape. Part of the reproducibility contract, like dtype."""
    sde_window_start: int = 0
    """First stochastic (SDE) step (Flow-GRPO-Fast, TempFlow-GRPO): steps ``[sde_window_start,
    sde_window_end)`` draw their noise into the sample and record a log-prob; every other step
    is a deterministic ODE (Euler) step ``x + v dt``. The defaults (0, None) make every step an
    SDE step (Flow-GRPO). Two ints rather than a tuple, so configs round-trip through JSON and
    ``--set``. Every step still draws its noise from the sample's generator (ODE steps discard
    it), so a seed's noise at step k does not depend on the window."""
    sde_window_end: int | None = None
    """One past the last SDE step (None = ``num_steps``). See ``sde_window_start``."""
    window_eta: float | None = None
    """SDE noise level inside the window (Flow-GRPO-Fast uses 0.8-1.2 on a short window);
    None = ``eta``. The GRPO update replays the window's steps with it."""
    group_init_noise: bool = False
    """The G members of a prompt's group share their initial noise x(t=1) (DanceGRPO
    ``--init_same_noise``), so they differ only by their SDE steps' noise. The loop draws one
    init seed per group (``spotlight.training.loop.iteration_batch(..., with_init_seeds=True)``) and
    passes it to the sampler; a trajectory records it as ``init_seed``. On Ray the work items
    carry it (``WorkItem.init_seeds``), exploration's candidates too. Without an init seed
    (validation) a sample's initial noise comes from its own seed as usual."""

    @property
    def sde_window(self) -> tuple[int, int]:
        """The SDE steps ``[start, end)``, resolved (``(0, num_steps)`` by default)."""
        end = self.num_steps if self.sde_window_end is None else self.sde_window_end
        return self.sde_window_start, end

    @property
    def sde_eta(self) -> float:
        """The noise level of the SDE steps: ``window_eta``, else ``eta``."""
        return self.eta if self.window_eta is None else self.window_eta

    def is_sde_step(self, step: int) -> bool:
        """Whether step ``step`` (``grid[step] -> grid[step + 1]``) is stochastic."""
        start, end = self.sde_window
        return start <= step < end

    def validate(self) -> None:
        if self.num_steps < 2:
            raise ValueError(f"sampler.num_steps must be >= 2, got {self.num_steps}")
        if self.eta <= 0:
            raise ValueError(f"sampler.eta must be > 0 (the log-probs need noise), got {self.eta}")
        start, end = self.sde_window
        if not 0 <= start < end <= self.num_steps:
            raise ValueError(
                f"sampler.sde_window [{start}, {end}) (sde_window_start, sde_window_end) must"
                f" satisfy 0 <= start < end <= num_steps ({self.num_steps}): at least one SDE"
                " step, inside the denoising steps"
            )
        if self.window_eta is not None and self.window_eta <= 0:
            raise ValueError(
                f"sampler.window_eta must be > 0 (the log-probs need noise), got {self.window_eta}"
            )
        if self.shift <= 0:
            raise ValueError(f"sampler.shift must be > 0, got {self.shift}")
        if self.batch_size < 1:
            raise ValueError(f"sampler.batch_size must be >= 1, got {self.batch_size}")
        if self.guidance_scale < 1.0:
            raise ValueError(f"sampler.guidance_scale must be >= 1, got {self.guidance_scale}")


GRPO_LOSSES = ("flow_grpo", "awm", "nft")


def trained_step_count(fraction: float, window: tuple[int, int]) -> int:
    """How many denoising steps of ``window = [start, end)`` one update replays for a sample
    under Flow-GRPO's loss: ``max(1, round(fraction * (end - start)))`` (the count of
    ``spotlight.flow.update.train_step_indices``; the simulator's update time uses it too)."""
    start, end = window
    return max(1, round(fraction * (end - start)))


@dataclass(frozen=True)
class GRPOConfig:
    """GRPO update settings."""

    group_size: int = 8
    """Images per prompt (G); advantages are normalized within each group."""
    clip_range: float = 0.2
    """PPO clip: the ratio is clipped to [1 - clip_range, 1 + clip_range]."""
    kl_beta: float = 0.0
    """Weight of the KL penalty to the frozen reference policy (0 = no reference forward)."""
    learning_rate: float = 3e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (<= 0 disables)."""
    timestep_fraction: float = 0.5
    """Fraction of the denoising steps trained on (a random subset per iteration); with a
    ``sampler.sde_window``, of the window's steps (the others are ODE steps, without log-probs).
    'flow_grpo' only."""
    num_inner_epochs: int = 1
    """Passes over the rollout per iteration (ratios move away from 1 after the first)."""
    train_batch_size: int = 16
    """Samples per forward/backward chunk (gradients accumulate over chunks)."""
    adv_eps: float = 1e-4
    """Added to the group std before dividing."""
    adv_clip: float = 5.0
    """Advantages are clipped to [-adv_clip, adv_clip]."""
    loss: str = "flow_grpo"
    """'flow_grpo': the clipped ratio objective on the log-probs of the SDE steps (Flow-GRPO);
    'awm': advantage-weighted flow matching on the final samples
    (spotlight.flow.grpo.advantage_weighted_matching_loss; uses no log-probs or step states);
    'nft': DiffusionNFT, flow matching of the final samples by implicit positive and negative
    policies around the sampling policy's velocity (spotlight.flow.grpo.diffusion_nft_loss; no
    log-probs or step states either; one extra no-grad forward per sample and draw for the
    sampling policy's velocity, except in the update's first chunk while the sampling policy is
    the trained one; see ``nft_old_ema``)."""
    shuffle_advantages: bool = False
    """Control runs only: permute the advantages at random across each batch (seeded), so an
    update keeps its size and noise but carries no signal; a learning result must beat it."""
    awm_draws: int = 8
    """'awm': noise draws ``(t, eps)`` per sample and update, shared within a prompt's group."""
    nft_beta: float = 0.1
    """'nft': beta in (0, 1], how far the implicit positive ``(1 - beta) v_old + beta v`` and
    negative ``(1 + beta) v_old - beta v`` policies sit from the sampling policy ``v_old``."""
    nft_draws: int = 4
    """'nft': noise draws ``(t, eps)`` per sample and update, shared within a prompt's group
    (as for 'awm')."""
    nft_old_ema: bool = False
    """'nft': the sampling ("old") policy is an EMA of the trained one, as in DiffusionNFT
    (NVlabs/DiffusionNFT, scripts/train_nft_sd3.py): rollouts and validation sample with it,
    ``v_old`` in the loss is its velocity, and after each iteration's update
    ``old = decay * old + (1 - decay) * current`` with the decay of the ``nft_old_ema_*``
    schedule at the optimizer steps taken so far (spotlight.flow.old_policy). It keeps a copy of
    the trainable parameters (the LoRA adapters, for LoRA), checkpointed beside the policy.
    False: the old policy is the weights each update starts with (decay 0 at every step)."""
    nft_old_ema_hold_steps: int = 75
    """'nft' with ``nft_old_ema``: optimizer steps during which the decay stays 0 (the old
    policy follows the trained one exactly). The default is DiffusionNFT's ``decay_type`` 2
    (its OCR config; GenEval and PickScore use type 1: hold 0, rate 0.001, max 0.5)."""
    nft_old_ema_rate: float = 0.0075
    """'nft' with ``nft_old_ema``: after the hold, the decay at optimizer step ``s`` is
    ``(s - nft_old_ema_hold_steps) * nft_old_ema_rate``, capped at ``nft_old_ema_max``."""
    nft_old_ema_max: float = 0.999
    """'nft' with ``nft_old_ema``: the decay's cap, in [0, 1) (1 would freeze the old policy)."""

    def validate(self) -> None:
        if self.group_size < 2:
            raise ValueError(
                f"grpo.group_size must be >= 2 (advantages need a group), got {self.group_size}"
            )
        if not 0.0 < self.timestep_fraction <= 1.0:
            raise ValueError(
                f"grpo.timestep_fraction must be in (0, 1], got {self.timestep_fraction}"
            )
        if self.clip_range <= 0:
            raise ValueError(f"grpo.clip_range must be > 0, got {self.clip_range}")
        if self.kl_beta < 0:
            raise ValueError(f"grpo.kl_beta must be >= 0, got {self.kl_beta}")
        if self.num_inner_epochs < 1 or self.train_batch_size < 1:
            raise ValueError("grpo.num_inner_epochs and grpo.train_batch_size must be >= 1")
        if self.loss not in GRPO_LOSSES:
            raise ValueError(f"grpo.loss must be one of {GRPO_LOSSES}, got {self.loss!r}")
        if self.awm_draws < 1:
            raise ValueError(f"grpo.awm_draws must be >= 1, got {self.awm_draws}")
        if not 0.0 < self.nft_beta <= 1.0:
            raise ValueError(f"grpo.nft_beta must be in (0, 1], got {self.nft_beta}")
        if self.nft_draws < 1:
            raise ValueError(f"grpo.nft_draws must be >= 1, got {self.nft_draws}")
        if self.nft_old_ema and self.loss != "nft":
            raise ValueError(
                f"grpo.nft_old_ema needs grpo.loss 'nft' (DiffusionNFT's EMA sampling policy),"
                f" got loss {self.loss!r}"
            )
        if self.nft_old_ema_hold_steps < 0 or self.nft_old_ema_rate < 0:
            raise ValueError(
                "grpo.nft_old_ema_hold_steps and grpo.nft_old_ema_rate must be >= 0, got"
                f" {self.nft_old_ema_hold_steps} and {self.nft_old_ema_rate}"
            )
        if not 0.0 <= self.nft_old_ema_max < 1.0:
            raise ValueError(
                f"grpo.nft_old_ema_max must be in [0, 1) (1 would freeze the old policy), got"
                f" {self.nft_old_ema_max}"
            )


@dataclass(frozen=True)
class PolicyConfig:
    """Which model to train."""

    name: str = "tiny"
    """Policy family: 'tiny' or 'qwen-image'."""
    init_seed: int = 0
    """Seed of the random initialisation (tiny) when no checkpoint is given, and of new LoRA
    adapters (tiny with ``lora_rank``, also on top of a checkpoint; qwen-image)."""
    checkpoint: str | None = None
    """Safetensors checkpoint to start from (tiny) or a diffusers model folder (qwen-image)."""
    options: dict[str, Any] = field(default_factory=dict)
    """Family-specific options. tiny: TinyConfig fields, and ``lora_rank`` (0 = full
    fine-tuning, the default; >= 1 trains peft LoRA adapters only), ``lora_alpha`` (default
    the rank), ``lora_targets`` (module-name suffixes, default the attention projections
    ``to_q, to_k, to_v, to_out.0, add_q_proj, add_k_proj, add_v_proj, to_add_out``); see
    spotlight.policies.tiny.TinyLoRA. qwen-image: ``QwenImagePolicy.from_pretrained``'s
    keyword arguments (``lora_rank``, ``height``, ...)."""


@dataclass(frozen=True)
class ExplorationConfig:
    """Seed exploration (DESIGN.md observation 1) and its planner (spotlight/explore/planner.py)."""

    mode: str = "off"
    """'off': random seeds; 'spot': explore the next iteration's prompts on the current
    (soon stale) weights while the trainer trains; 'critical_path': explore with the fresh
    weights before each rollout (best-of-N, adds time to every iteration)."""
    max_candidates: int = 32
    """Most seeds explored per prompt (a multiple of the group size is used)."""
    num_buckets: int = 4
    """Planner: difficulty buckets by a prompt's observed reward std."""
    ucb_c: float = 0.05
    """Planner: weight of the UCB exploration bonus (in units of reward std)."""
    prior_gain: float = 0.05
    """Planner: optimistic gain of a never-observed arm (reward std per chunk)."""
    uniform: bool = True
    """Planner: spread the budget evenly over the prompts (the default: on the exploration
    power bench, docs/benchmarks.md, the bandit did not beat the even split of the same budget;
    ``tests/unit/test_exploration_default.py`` holds the default to that report). False: the
    paper's bandit gives each chunk of seeds to where its learned gain is highest."""
    planner_gain: str = "std"
    """What the planner learns a chunk of explored seeds is worth (spotlight/explore/planner.py):
    'std': the rise of the selected group's reward std; 'live': 1 where the chunk turns a
    prompt's selected group from dead (rewards all equal) to live, else 0."""
    max_staleness: int = 1
    """Explored rewards older than this many weights versions are not used."""
    max_seeds_per_iteration: int = 1024
    """Cap on the exploration budget of one iteration."""
    budget_scale: float = 1.0
    """Multiplies the measured budget (predicted training time x sampling throughput); items
    still unfinished when the update arrives are withdrawn, their prompts fall back."""
    budget_seeds: int = 0
    """A fixed exploration budget (seeds per iteration) instead of the measured one, explored
    in full: ``spot`` waits for it after the update, and ``critical_path`` explores exactly it,
    so both modes compare allocations at equal budget. For benches where the samplers and the
    trainer share a machine's cores (a measured budget would then steal the trainer's time);
    0: measured."""

    selection: str = "max_variance"
    """Which G of a prompt's explored seeds the rollout keeps (spotlight.explore.seeds.SELECTIONS):
    'max_variance': the G whose rewards vary most; 'rescue': the first G (random) candidates,
    replaced by the max-variance G only where those G would be a dead group (all rewards equal)."""
    pool_advantages: bool = False
    """``critical_path`` only: a selected group's advantages take their mean and std from all of
    its prompt's explored candidates instead of the kept G (Reinforce-Ada's correction of
    selection's bias; the candidates are scored on the rollout's own weights there)."""

    def validate(self, group: int) -> None:
        if self.selection not in SELECTION_RULES:
            raise ValueError(
                f"exploration.selection must be one of {', '.join(SELECTION_RULES)},"
                f" got {self.selection!r}"
            )
        if self.planner_gain not in PLANNER_GAINS:
            raise ValueError(
                f"exploration.planner_gain must be one of {', '.join(PLANNER_GAINS)},"
                f" got {self.planner_gain!r}"
            )
        if self.pool_advantages and self.mode != "critical_path":
            raise ValueError(
                "exploration.pool_advantages needs exploration.mode=critical_path (the"
                f" candidates' rewards must come from the rollout's weights), got {self.mode!r}"
            )
        if self.mode not in ("off", "spot", "critical_path"):
            raise ValueError(
                f"exploration.mode must be off, spot or critical_path, got {self.mode!r}"
            )
        if (
            self.max_staleness < 1
            or self.max_seeds_per_iteration < 0
            or self.budget_scale < 0
            or self.budget_seeds < 0
        ):
            raise ValueError(
                "exploration: need max_staleness >= 1, max_seeds_per_iteration >= 0,"
                " budget_scale >= 0, budget_seeds >= 0"
            )
        if self.max_candidates < 2 * group:
            raise ValueError(
                f"exploration.max_candidates ({self.max_candidates}) must be >= 2 x group_size"
                f" ({2 * group}): exploring only G seeds selects nothing"
            )
        if self.num_buckets < 1 or self.ucb_c < 0 or self.prior_gain < 0:
            raise ValueError("exploration: num_buckets >= 1, ucb_c >= 0 and prior_gain >= 0")


PLANNER_GAINS = ("std", "live")
"""``ExplorationConfig.planner_gain`` values."""

SELECTION_RULES = ("max_variance", "rescue")
"""``ExplorationConfig.selection`` values: the rules of ``spotlight.explore.seeds.SELECTIONS``."""


@dataclass(frozen=True)
class Config:
    """Root config of a training run."""

    recipe: str = "tiny-brightness"
    """Name of the recipe that produced this config (checked on --resume)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """The model."""
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    """The SDE sampler."""
    grpo: GRPOConfig = field(default_factory=GRPOConfig)
    """The GRPO update."""
    reward: str = "brightness"
    """Reward name (see spotlight.rewards.REWARDS)."""
    reward_model: str | None = None
    """Local folder of the reward's model, for the rewards that load one: ``ocr-model`` (a
    GOT-OCR 2.0 folder), ``geneval-model`` (a folder with ``mask2former/`` and ``clip/``),
    ``clip`` (a CLIP folder). None: the reward's own default (an environment variable, then a
    path under /shared/models; spotlight.rewards). Nothing is ever downloaded."""
    task: str | None = None
    """Task whose train/val prompt splits are used (None: built-in random-word prompts)."""
    prompt_file: str | None = None
    """A JSON file ``{"train": [...], "val": [...]}`` whose prompts replace the task's splits
    (disjoint; each capped by ``num_train_prompts`` / ``num_val_prompts``): a subset of the
    task's words, say (``benchmarks/dead_groups.py --easy-split`` writes one). The task still
    draws and scores them. None: the task's splits."""
    num_iterations: int = 20
    """Training iterations."""
    num_prompts_per_iteration: int = 4
    """Prompts per iteration (B); each gets group_size images."""
    seed: int = 0
    """Master seed: prompt order, sampling seeds and timestep subsets derive from it."""
    num_train_prompts: int = 256
    """Size of the training prompt pool."""
    num_val_prompts: int = 8
    """Validation prompts (disjoint from training), scored with fixed seeds."""
    num_val_seeds: int = 2
    """Seeds per validation prompt."""
    val_every: int = 5
    """Evaluate every this many iterations (and before the first and after the last)."""
    stop_at_val_gain: float | None = None
    """End the run after the first validation that beats the initial one by at least this
    much (time-to-target benches); None: run all iterations."""
    max_wall_s: float | None = None
    """End the run after the first iteration that finishes past this wall time (validating
    it first); None: no cap."""
    exploration: ExplorationConfig = field(default_factory=ExplorationConfig)
    """Seed exploration (both runners: ``spotlight.explore.strategy``)."""
    rollout_staleness: int = 0
    """What stale rollouts cost (local runner, no exploration, no resume): iteration t samples
    with the sampling weights of version ``max(0, t - rollout_staleness)``."""
    schedule: str = "sync"
    """``"sync"``: each rollout is sampled on the weights it trains. ``"pipelined"``: iteration
    t + 1's rollout (with ``exploration.mode=spot``, its oversampled candidates) is sampled on
    ``v_t`` while t trains: one version stale (``spotlight.training.pipeline``)."""

    def validate(self) -> None:
        self.sampler.validate()
        self.grpo.validate()
        self.exploration.validate(self.grpo.group_size)
        from spotlight.rewards import MODEL_REWARDS, REWARDS

        if self.reward not in REWARDS:
            raise ValueError(f"unknown reward {self.reward!r}; known: {', '.join(sorted(REWARDS))}")
        if self.reward_model is not None and self.reward not in MODEL_REWARDS:
            raise ValueError(
                f"reward_model is set but reward {self.reward!r} loads no model (those that do:"
                f" {', '.join(MODEL_REWARDS)})"
            )
        if self.task is not None:
            from spotlight.tasks import get_task

            get_task(self.task)  # raises on an unknown task
        if self.num_iterations < 0:
            raise ValueError(f"num_iterations must be >= 0, got {self.num_iterations}")
        if self.num_val_prompts < 1 or self.num_val_seeds < 1 or self.val_every < 1:
            raise ValueError("num_val_prompts, num_val_seeds and val_every must be >= 1")
        if self.max_wall_s is not None and self.max_wall_s <= 0:
            raise ValueError(f"max_wall_s must be > 0 (or None), got {self.max_wall_s}")
        if not 1 <= self.num_prompts_per_iteration <= self.num_train_prompts:
            raise ValueError(
                f"num_prompts_per_iteration ({self.num_prompts_per_iteration}) must be >= 1 and"
                f" not exceed num_train_prompts ({self.num_train_prompts})"
            )
        if self.rollout_staleness < 0:
            raise ValueError(f"rollout_staleness must be >= 0, got {self.rollout_staleness}")
        if self.rollout_staleness and self.exploration.mode != "off":
            raise ValueError(
                "rollout_staleness > 0 measures stale rollouts without exploration: add"
                " --set exploration.mode=off"
            )
        if self.schedule not in ("sync", "pipelined"):
            raise ValueError(f"unknown schedule {self.schedule!r}; known: sync, pipelined")
        if self.schedule == "pipelined" and (
            self.rollout_staleness or self.exploration.mode == "critical_path"
        ):
            raise ValueError(
                "schedule 'pipelined' is one version stale by itself (leave rollout_staleness at"
                " 0) and oversamples in its rollout (exploration.mode spot or off, not"
                " critical_path)"
            )

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> Config:
        return Config(
            recipe=d["recipe"],
            policy=PolicyConfig(**d["policy"]),
            sampler=SamplerConfig(**d["sampler"]),
            grpo=GRPOConfig(**d["grpo"]),
            exploration=ExplorationConfig(**d.get("exploration", {})),
            **{
                k: v
                for k, v in d.items()
                if k not in ("recipe", "policy", "sampler", "grpo", "exploration")
            },
        )
