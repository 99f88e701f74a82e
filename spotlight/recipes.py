"""Named recipes: functions returning the root :class:`Config` of a run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from spotlight.config import Config, ExplorationConfig, GRPOConfig, PolicyConfig, SamplerConfig
from spotlight.explore.arms import EXACT_REWARD_ARM, with_arm
from spotlight.policies.lora import FLOW_GRPO_LORA_TARGETS
from spotlight.tasks import base_checkpoint, get_task

TASK_SAMPLER = SamplerConfig(num_steps=10, eta=0.7, guidance_scale=3.0, batch_size=8)
"""Sampling for the task recipes and `spotlight eval`: CFG 3 reads far better on the tiny base
models than no guidance (docs/tasks.md)."""


def tiny_brightness() -> Config:
    """Tiny DiT from a random init, brightness reward: a minute on 2 CPU cores."""
    return Config(
        recipe="tiny-brightness",
        policy=PolicyConfig(name="tiny", init_seed=0),
        sampler=SamplerConfig(num_steps=10, eta=0.7, batch_size=8),
        grpo=GRPOConfig(
            group_size=8, learning_rate=3e-4, timestep_fraction=0.5, train_batch_size=16
        ),
        reward="brightness",
        num_iterations=20,
        num_prompts_per_iteration=4,
    )


def tiny_smoke() -> Config:
    """Seconds-long run for tests: 2 prompts x 4 images, 4 steps."""
    return Config(
        recipe="tiny-smoke",
        policy=PolicyConfig(
            name="tiny", init_seed=0, options={"num_layers": 2, "num_heads": 2, "head_dim": 16}
        ),
        sampler=SamplerConfig(num_steps=4, eta=0.7, batch_size=8),
        grpo=GRPOConfig(
            group_size=4, learning_rate=1e-3, timestep_fraction=0.5, train_batch_size=8
        ),
        reward="brightness",
        num_iterations=3,
        num_prompts_per_iteration=2,
    )


def qwen_image_brightness() -> Config:
    """Qwen-Image (LoRA, bf16) on a GPU node; pass the local model folder with --checkpoint."""
    return Config(
        recipe="qwen-image-brightness",
        policy=PolicyConfig(
            name="qwen-image",
            checkpoint=None,
            options={"lora_rank": 32, "height": 512, "width": 512, "gradient_checkpointing": True},
        ),
        sampler=SamplerConfig(num_steps=10, eta=0.7, shift=3.0, guidance_scale=4.0, batch_size=8),
        grpo=GRPOConfig(
            group_size=16,
            learning_rate=1e-4,
            kl_beta=0.04,
            timestep_fraction=0.6,
            train_batch_size=4,
        ),
        reward="brightness",
        num_iterations=100,
        num_prompts_per_iteration=8,
    )


def _tiny_task(task: str, reward: str) -> Config:
    return Config(
        recipe=f"tiny-{task.removesuffix('-mini')}",
        policy=PolicyConfig(name="tiny", checkpoint=base_checkpoint(task)),
        sampler=TASK_SAMPLER,
        # Full fine-tuning of a 2.5 M model: Adam steps of 1e-4 (4 per iteration) collapsed
        # OCR-mini's reward within 7 iterations; 1e-5 with one step per iteration is stable
        # (docs/tasks.md).
        grpo=GRPOConfig(
            group_size=8, learning_rate=1e-5, timestep_fraction=0.5, train_batch_size=64
        ),
        reward=reward,
        task=task,
        num_iterations=30,
        num_prompts_per_iteration=8,
        num_train_prompts=2000,
        num_val_prompts=64,
        num_val_seeds=2,
        val_every=10,
    )


def tiny_ocr() -> Config:
    """OCR-mini from the shipped v2 base model, scored by Tesseract, trained with DiffusionNFT
    and seed exploration on: the embedded default, and the recipe that raises the validation
    reward on a 2-core CPU (docs/tasks.md, "RL that learns: OCR-mini v2"; docs/bench/
    learn-ocr-mini.json). 40 iterations of 8 prompts x 8 images; validation on 128 prompts x 4
    fixed seeds before and after (the learning check's runs also validated at 20:
    ``--set val_every=20``).

    Flow-GRPO's gradient carried no signal above its control at this batch size
    (grpo_signal-tiny-ocr-v2.json), DiffusionNFT's did; at lr 1e-4 NFT collapsed (0.218 ->
    0.119 in 20 iterations), at 2e-5 it rose.

    Exploration explores a fixed 16 seeds an iteration (``exploration.budget_seeds``), waited
    for after each update: the planner gives them to one of the next iteration's prompts (it
    explores a prompt in at least two chunks of 8), and the 8 of its 16 candidates whose rewards
    vary most are rolled out on the fresh weights and trained on (32 seeds took the run past 12
    minutes on 2 cores: docs/tasks.md). A measured budget explores nothing
    here: on one CPU the sampler replicas run at idle priority beside the trainer, so nothing
    they start during the 4-second update finishes (docs/tasks.md, "The default run"). On a
    cluster, where the replicas are GPUs of their own, set ``exploration.budget_seeds=0`` to
    explore what they sample during the update."""
    cfg = _tiny_task("ocr-mini", "ocr")
    return dataclasses.replace(
        cfg,
        grpo=dataclasses.replace(cfg.grpo, loss="nft", learning_rate=2e-5, nft_draws=4),
        num_iterations=40,
        num_val_prompts=128,
        num_val_seeds=4,
        val_every=40,
        exploration=ExplorationConfig(mode="spot", budget_seeds=16),
    )


def tiny_ocr_exact() -> Config:
    """``tiny-ocr`` under the binary exact-match reward (``ocr-exact``: 1 when Tesseract reads
    the word exactly), where about half of the groups of 8 are dead on the base model: the
    regime where seed exploration can pay (docs/benchmarks.md, "Seed exploration with the power
    to rank the arms"). It explores 128 seeds an iteration, the power bench's budget, with the
    arm that bench chose (:data:`spotlight.explore.arms.EXACT_REWARD_ARM`; a test holds the two
    equal); when no arm has shown a gain, with the standing defaults."""
    cfg = tiny_ocr()
    exploration = dataclasses.replace(cfg.exploration, budget_seeds=128)
    if EXACT_REWARD_ARM is not None:
        exploration = with_arm(exploration, EXACT_REWARD_ARM)
    return dataclasses.replace(
        cfg, recipe="tiny-ocr-exact", reward="ocr-exact", exploration=exploration
    )


def tiny_geneval() -> Config:
    """GenEval-mini from the shipped patch-2 base model, scored by the rule-based detector,
    trained as ``tiny-ocr`` is (DiffusionNFT at 2e-5, 40 iterations of 8 prompts x 8 images,
    16 seeds explored an iteration), validated on all 84 validation prompts x 4 fixed seeds
    before and after (docs/tasks.md, "GenEval-mini"; docs/bench/learn-geneval-mini.json)."""
    cfg = tiny_ocr()
    return dataclasses.replace(
        cfg,
        recipe="tiny-geneval",
        policy=dataclasses.replace(cfg.policy, checkpoint=base_checkpoint("geneval-mini")),
        reward="geneval",
        task="geneval-mini",
        num_val_prompts=84,
    )


QWEN_IMAGE_SAMPLER = SamplerConfig(
    num_steps=10,
    eta=0.7,
    shift=3.0,
    guidance_scale=4.0,
    batch_size=8,
    sde_window_start=0,
    sde_window_end=2,
    window_eta=1.2,
)
"""Flow-GRPO's Qwen-Image sampling (yifan123/flow_grpo ``config/grpo.py``,
``pickscore_qwenimage``): 10 steps, CFG 4, an SDE window of 2 steps at noise level 1.2, ODE
elsewhere. Flow-GRPO draws the window's place in steps 0-4 at random each time; here it is
fixed at the first two steps, where the reward's variance is largest (TempFlow-GRPO)."""

QWEN_IMAGE_GRPO = GRPOConfig(
    group_size=16,
    learning_rate=3e-4,
    clip_range=1e-4,
    kl_beta=0.0,
    adv_clip=5.0,
    timestep_fraction=1.0,
    train_batch_size=4,
)
"""Flow-GRPO's Qwen-Image update (the same config; ``config/base.py`` for lr 3e-4, clip range
1e-4, advantages clipped to 5): 16 images per prompt, no KL, both window steps trained. Flow-GRPO
takes two optimizer steps per 512 images; this update takes one."""

NFT_OVERRIDES = (
    "grpo.loss=nft",
    "grpo.nft_beta=0.1",
    "grpo.nft_draws=4",
    "grpo.kl_beta=0.0001",
)
"""DiffusionNFT in place of Flow-GRPO (``--set`` each): the objective that raised OCR-mini's
reward on a CPU (docs/tasks.md), with DiffusionNFT's OCR settings (NVlabs/DiffusionNFT
``config/nft.py``: beta 0.1, KL 1e-4; LoRA at lr 3e-4 as here)."""


def _qwen_image_task(task: str, reward: str, size: int) -> Config:
    """A Qwen-Image recipe of the source paper's experiments: Flow-GRPO's Qwen-Image settings,
    on task ``task`` scored by ``reward``, at ``size`` x ``size`` pixels, seed exploration on."""
    sampler = QWEN_IMAGE_SAMPLER
    grpo = QWEN_IMAGE_GRPO
    if size > 512:  # ~6.3x the tokens of 512: keep a forward's activations about the same
        sampler = dataclasses.replace(sampler, batch_size=2)
        grpo = dataclasses.replace(grpo, train_batch_size=1)
    return Config(
        recipe=f"qwen-image-{task}-{size}",
        policy=PolicyConfig(
            name="qwen-image",
            checkpoint=None,
            options={
                "lora_rank": 64,
                "lora_alpha": 128,
                "lora_targets": list(FLOW_GRPO_LORA_TARGETS),
                "height": size,
                "width": size,
                "gradient_checkpointing": True,
            },
        ),
        sampler=sampler,
        grpo=grpo,
        reward=reward,
        task=task,
        num_iterations=300,
        num_prompts_per_iteration=32,
        num_train_prompts=1_000_000,  # the whole training split
        num_val_prompts=min(1_024, len(get_task(task).prompts("val"))),  # GenEval's: 277
        num_val_seeds=1,
        val_every=30,
        exploration=ExplorationConfig(mode="spot", max_candidates=64),
    )


def qwen_image_ocr_512() -> Config:
    """Qwen-Image on OCR (quoted text in scenes, spotlight/tasks/ocr_scenes.py) at 512 x 512,
    scored by GOT-OCR 2.0 with Flow-GRPO's OCR formula (``--reward-model``: its local folder).

    Flow-GRPO's Qwen-Image settings (``QWEN_IMAGE_SAMPLER``, ``QWEN_IMAGE_GRPO``; the repository
    publishes them for PickScore, its only text-to-image Qwen-Image config): 32 prompts x 16
    images an iteration, LoRA rank 64 / alpha 128 on the attention and MLPs at lr 3e-4, no KL.
    verl-omni's Qwen-Image OCR run uses the same 32 x 16 with LoRA 64 at 3e-4. Validation on
    1,024 held-out prompts x 1 seed every 30 iterations. DiffusionNFT: ``NFT_OVERRIDES``."""
    return _qwen_image_task("ocr", "ocr-model", 512)


def qwen_image_geneval_512() -> Config:
    """Qwen-Image on GenEval (its six categories over COCO objects, spotlight/tasks/geneval.py)
    at 512 x 512, scored by GenEval's rules on Mask2Former detections and CLIP colours
    (``--reward-model``: a folder with ``mask2former/`` and ``clip/``). The settings of
    :func:`qwen_image_ocr_512` (Flow-GRPO publishes no GenEval config for Qwen-Image; its SD3
    GenEval config differs mainly in KL 0.04 and 24 images per prompt), validated on all 277
    validation prompts (half of GenEval's 553, in its category proportions)."""
    return _qwen_image_task("geneval", "geneval-model", 512)


def qwen_image_ocr_1280() -> Config:
    """:func:`qwen_image_ocr_512` at 1280 x 1280 (6,400 image tokens): sampled with sequence
    parallelism, SP degree 4 (Qwen-Image's 24 heads, 6 per GPU; ``RAY_HINTS``), sampler batches
    of 2, train chunks of 1."""
    return _qwen_image_task("ocr", "ocr-model", 1280)


def qwen_image_geneval_1280() -> Config:
    """:func:`qwen_image_geneval_512` at 1280 x 1280, with SP degree 4 as
    :func:`qwen_image_ocr_1280`."""
    return _qwen_image_task("geneval", "geneval-model", 1280)


RAY_HINTS: dict[str, dict[str, int]] = {
    "qwen-image-ocr-1280": {"sp_degree": 4},
    "qwen-image-geneval-1280": {"sp_degree": 4},
}
"""Where a recipe wants to run, beyond ``RayOptions``' defaults (``spotlight train`` applies
these unless its flags say otherwise): the 1280 recipes sample with SP degree 4."""


RECIPES: dict[str, Callable[[], Config]] = {
    "tiny-ocr": tiny_ocr,
    "tiny-ocr-exact": tiny_ocr_exact,
    "tiny-geneval": tiny_geneval,
    "tiny-brightness": tiny_brightness,
    "tiny-smoke": tiny_smoke,
    "qwen-image-brightness": qwen_image_brightness,
    "qwen-image-ocr-512": qwen_image_ocr_512,
    "qwen-image-geneval-512": qwen_image_geneval_512,
    "qwen-image-ocr-1280": qwen_image_ocr_1280,
    "qwen-image-geneval-1280": qwen_image_geneval_1280,
}
DEFAULT_RECIPE = "tiny-ocr"


def exploration_note(cfg: Config) -> str | None:
    """What a run of a shipped recipe says about its seed exploration before it starts, when
    its reward and exploration are the recipe's own (not changed by ``--set``): why it
    explores. None otherwise."""
    if cfg.recipe not in RECIPES or cfg.exploration.mode == "off":
        return None
    own = RECIPES[cfg.recipe]()
    if (cfg.reward, cfg.exploration) != (own.reward, own.exploration):
        return None
    if cfg.recipe == "tiny-ocr":
        exact = (
            "nor on the exact-match reward at this budget"
            if EXACT_REWARD_ARM is None
            else "the exact-match reward is where it pays (--recipe tiny-ocr-exact)"
        )
        return (
            "seed exploration is on to exercise the system: on this graded reward it buys no"
            f" iterations, {exact} (docs/benchmarks.md)"
        )
    if cfg.recipe == "tiny-ocr-exact" and EXACT_REWARD_ARM is None:
        return (
            "seed exploration with the standing defaults: on the exploration power bench no"
            " arm's gain over no exploration cleared zero on 8 paired seeds (docs/benchmarks.md),"
            " so this explores to exercise the system"
        )
    if cfg.recipe == "tiny-ocr-exact":
        return f"seed exploration with {EXACT_REWARD_ARM!r}, the arm the power bench chose"
    return None


def get_recipe(name: str) -> Config:
    """The config of recipe ``name``, validated."""
    try:
        cfg = RECIPES[name]()
    except KeyError:
        raise ValueError(f"unknown recipe {name!r}; known: {', '.join(RECIPES)}") from None
    cfg.validate()
    return cfg
