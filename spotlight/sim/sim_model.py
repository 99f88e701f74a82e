"""Inputs of the simulator: step costs, scenarios, systems, and the learning model. No Ray.

Every number here is either **measured** (and says where) or **modelled** (and says so); the
report repeats the distinction.

* Step costs come from ``calib/h200-qwen-image.json`` (a Qwen-Image-sized DiT, 20.4 B parameters,
  on one H200, measured with CUDA events; shipped in ``spotlight/assets/calib``) for the update,
  and from ``calib/h200-qwen-image-recipe.json`` (the recipes' own sampler with its LoRA) for
  sampling.
* Scenario sizes: the paper scenarios are built from the recipes and cluster.yaml
  (``spotlight.sim.scenarios``).
* Overheads (weights broadcast, replica start, notices, leases) are modelled from the
  measurements named on each field. Spot capacity comes and goes in whole nodes
  (``Scenario.gpus_per_node``).
* Learning: how fast validation reward approaches the target is modelled from the tiny-model
  measurements described in :class:`LearningModel`.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field, replace
from pathlib import Path

CALIB = Path(__file__).resolve().parents[1] / "assets" / "calib" / "h200-qwen-image.json"
RECIPE_PATH = CALIB.with_name("h200-qwen-image-recipe.json")
"""The Qwen-Image recipes' own sampler on one H200 (benchmarks/gpu_qwen_image_recipe.py:
``QwenImagePolicy`` with the recipes' rank-64 LoRA, 256 text tokens, random full-size weights)."""
EVALS = Path(__file__).resolve().parents[1] / "assets" / "calib"


@dataclass(frozen=True)
class StepCosts:
    """Seconds of one GPU's work (measured: ``calib/h200-qwen-image-recipe.json`` and
    ``calib/h200-qwen-image.json``, see ``from_calib``)."""

    sample_step_s: float
    """One sample, one denoising step, with classifier-free guidance (two forwards' worth)."""
    train_step_s: float
    """One sample, one trained denoising step: forward + backward with checkpointing."""
    model_gb: float
    """bf16 weights."""

    @staticmethod
    def from_calib(
        image_tokens: int, path: Path = CALIB, recipe_path: Path | None = RECIPE_PATH
    ) -> StepCosts:
        """Per-sample costs at ``image_tokens`` (1024: 512x512, 6400: 1280x1280): the sampling
        step from ``recipe_path`` (the recipes' sampler, LoRA included) where it has a warm
        item at that size, else twice the bare forward; the trained step from the calibration
        rows (``path``) with the largest batch measured at that size (best throughput)."""
        doc = json.loads(path.read_text())
        rows = [r for r in doc["rows"] if r["img_tokens"] == image_tokens]
        if not rows:
            raise ValueError(f"no calibration rows at {image_tokens} image tokens in {path}")

        def best(kinds: tuple[str, ...]) -> float:
            found = [r["s"] / r["B"] for r in rows if r["kind"] in kinds]
            if not found:
                raise ValueError(f"no {kinds} rows at {image_tokens} tokens in {path}")
            return min(found)

        fwd = best(("fwd",))
        sample = recipe_sample_step_s(image_tokens, recipe_path) if recipe_path else None
        return StepCosts(
            # guidance: conditional + unconditional forward
            sample_step_s=sample if sample is not None else 2 * fwd,
            train_step_s=best(("fwd+bwd+ckpt", "fwd+bwd")),
            model_gb=doc["params_B"] * 2,
        )


def recipe_sample_step_s(image_tokens: int, path: Path = RECIPE_PATH) -> float | None:
    """Seconds per sample and step of the recipes' sampler at ``image_tokens`` (16 x 16 pixels
    a token), from the warm item of a run of ``path`` with its LoRA on; None: not measured."""
    for run in json.loads(path.read_text())["runs"]:
        height, width = run["image_size"]
        if (height // 16) * (width // 16) == image_tokens:
            return run["warm_item_s_per_sample_step"]
    return None


@dataclass(frozen=True)
class NodeStart:
    """What a new spot node costs before its first item, from its parts (estimates from AWS's
    and the components' published figures, none measured on AWS here; docs/cluster.md, "What a
    new spot node costs before its first item")."""

    boot_s: float = 105.0
    """Launch to SSH: about 1.5-2 minutes for a p5 with the Deep Learning Base AMI."""
    image_pull_s: float = 60.0
    """The project's container image, 10-15 GB from ECR in the region at 200-400 MB/s."""
    join_s: float = 10.0
    """NFS mount, ``ray start``, joining the head."""
    replica_s: float = 20.0
    """The Serve replica's process: imports, CUDA context."""
    weights_gb: float = 58.0
    """Qwen-Image: transformer 41 GB, text encoder 16 GB, VAE, all bf16."""
    read_gb_per_s: float = 1.2
    """From ``/shared`` (NFS on the head): its 12.5 Gbit/s network, one node loading at a time."""

    def total_s(self) -> float:
        return (
            self.boot_s
            + self.image_pull_s
            + self.join_s
            + self.replica_s
            + self.weights_gb / self.read_gb_per_s
        )


@dataclass(frozen=True)
class Overheads:
    """Modelled times (seconds) and how they were chosen."""

    weights_broadcast_s: float = 2.0
    """A replica picks up a new weights version: 41 GB bf16 read from the node's object store
    (one network transfer per node); measured here for the tiny model: 18 ms
    (docs/benchmarks.md); modelled for Qwen-Image at ~25 GB/s host-to-device."""
    replica_start_s: float = NodeStart().total_s()
    """A new spot node becomes sampling replicas: :class:`NodeStart`'s parts (243 s)."""
    notice_s: float = 120.0
    """Warning before a preemption (AWS spot: 2 minutes)."""
    hard_share: float = 0.1
    """Share of preemptions without a usable notice (modelled)."""
    lease_s: float = 30.0
    """A silent replica's items return to the queue after this (the job's default)."""
    push_detect_s: float = 30.0
    """Ablation (push): a dead replica's assigned items are re-pushed after this."""
    spill_wait_s: float = 30.0
    """Spill to on-demand samplers after rollout items waited this long for spot capacity."""


@dataclass(frozen=True)
class Scenario:
    """One cluster and workload. GPU counts are choices (stated in the report)."""

    name: str
    image_tokens: int
    trainer_gpus: int
    sampler_gpus: int
    """Spot sampler GPUs at full capacity (= on-demand sampler GPUs for on-demand systems)."""
    fallback_gpus: int
    """On-demand sampler GPUs the spill policy may add when spot capacity is gone."""
    prompts_per_iteration: int
    group_size: int
    num_steps: int
    train_step_fraction: float
    """Forward + backward passes a sample costs the update, per denoising step sampled (the paper
    scenarios: 4 of 10, Flow-GRPO's 2-step window replayed with guidance)."""
    batch_size: int
    """Samples per work item."""
    sp_degree: int
    """GPUs per SP group (Ulysses SP); 1 at 512x512. Groups are formed within a node."""
    gpus_per_node: int | None = None
    """GPUs of a spot node: the unit the traces count and a preemption takes (all of them at
    once, with one notice or none). None: ``sp_degree`` (one group a node). The paper scenarios
    use 8 (p5.48xlarge, p4d)."""
    sp_efficiency: dict[int, float] = field(default_factory=lambda: {1: 1.0})
    """Throughput per GPU of a group of k relative to k=1 (modelled, not measured on GPUs)."""
    valid_degrees: tuple[int, ...] = (1, 2, 3, 4, 6, 8)
    """SP degrees that divide Qwen-Image's 24 heads (up to a node)."""
    commit_every: int = 4
    explore_candidates: int = 32
    """Most seeds explored per prompt (the job's ``max_candidates``)."""
    explore_budget: int | None = None
    """Most seeds explored per iteration (the job's ``max_seeds_per_iteration``); None: what the
    update's time at the measured throughput allows. Set below ``prompts_per_iteration x
    explore_candidates`` to make the planner choose which prompts to explore."""
    critical_candidates: int = 32
    """Best-of-N for the critical-path baseline (N candidates per prompt, best G trained)."""
    overheads: Overheads = field(default_factory=Overheads)
    trace: str = "preemption-4node-aws-us-east-1f-v100.json"
    max_hours: float = 72.0
    step_costs: StepCosts | None = None
    """Override the calibration file (tests use round numbers)."""

    def __post_init__(self) -> None:
        if self.gpus_per_node is not None and self.gpus_per_node < 1:
            raise ValueError(f"scenario {self.name}: gpus_per_node must be >= 1")
        if self.node_gpus < self.sp_degree or self.sampler_gpus % self.node_gpus:
            raise ValueError(
                f"scenario {self.name}: {self.sampler_gpus} sampler GPUs in nodes of"
                f" {self.node_gpus} (need whole nodes, each holding an SP group of"
                f" {self.sp_degree})"
            )

    @property
    def node_gpus(self) -> int:
        """GPUs per spot node (``gpus_per_node``, or ``sp_degree`` when unset)."""
        return self.gpus_per_node or self.sp_degree

    @property
    def spot_nodes(self) -> int:
        """Spot nodes at full capacity: the trace is scaled to this many."""
        return self.sampler_gpus // self.node_gpus

    def costs(self) -> StepCosts:
        return self.step_costs or StepCosts.from_calib(self.image_tokens)


@dataclass(frozen=True)
class System:
    """One way of running the same training (see ``SYSTEMS``)."""

    name: str
    samplers: str
    """'on_demand' (fixed sampler GPUs) or 'spot' (trace capacity + spill)."""
    exploration: str = "off"
    """'off', 'critical_path' (best-of-N before each rollout), 'spot' (during training) or
    'oversample' (pipeline 'pipelined' only: the next rollout, sampled during the update, draws
    the exploration budget as extra candidates and trains on the max-variance G of a prompt's)."""
    uniform_planner: bool = False
    planner_gain: str = "std"
    """What Spotlight's planner learns a chunk is worth (``ExplorationConfig.planner_gain``)."""
    dispatch: str = "pull"
    """'pull' (queue with leases and commits) or 'push' (round robin, no commits)."""
    pipeline: str = "separate"
    """How rollout and update share time and GPUs:

    * 'separate': sampler GPUs sample the rollout, then the trainer GPUs update on it (the
      samplers idle or explore meanwhile);
    * 'colocated': the same on-demand GPUs sample the rollout, then all of them train on it
      (Flow-GRPO, DanceGRPO, verl style); no separate sampler pool, no spot GPUs;
    * 'async_one_step': separate pools, and while iteration t trains the samplers already
      sample iteration t+1's rollout on the weights before t's update (staleness 1; its
      learning cost is :attr:`LearningModel.async_staleness_factor`);
    * 'pipelined': 'async_one_step' on spot samplers (``spotlight_pipelined``): the next
      rollout, sampled during the update on the weights before it, is oversampled by the
      exploration budget (``exploration='oversample'``), and with ``trainer_samples`` the
      trainer GPUs sample what is left of it once the update ends."""
    colocated_gpus: str = "trainer"
    """Colocated only: 'trainer' (the scenario's on-demand trainer GPUs, Spotlight's on-demand
    count) or 'total' (trainer + sampler GPUs: Spotlight's GPUs at full spot capacity, its
    on-demand fallback left out since it runs only while spot capacity is gone)."""
    trainer_samples: bool = False
    """Separate pools only ('separate', 'pipelined'): the trainer GPUs, idle while the rollout
    runs, sample rollout items too (they hold the fresh weights: no broadcast wait), from the
    rollout's start to its end; they are on-demand GPUs held anyway, so the rollout costs no
    more. Pipelined: they sample the first rollout with the samplers, and every later one's rest
    from the update's end, with a copy they keep of the weights before the update (the
    rollout's: no pick-up)."""
    trainer_share: float | None = None
    """On-demand separate pools only: split the same trainer + sampler GPUs as ``share`` trainers
    and the rest samplers (None: the scenario's split). The ``*_split`` systems use 1/3, the
    best share in a scan of 1/6 to 5/6 at both paper scenarios (docs/simulator.md): the
    scenarios' own split, so there they equal ``on_demand_grpo`` and ``async_one_step``; a
    scenario whose samplers and trainers weigh otherwise is where they differ."""

    def __post_init__(self) -> None:
        pipelined = self.pipeline == "pipelined"
        allowed = ("off", "oversample") if pipelined else ("off", "critical_path", "spot")
        if self.exploration not in allowed:
            raise ValueError(
                f"system {self.name}: pipeline {self.pipeline!r} explores with one of"
                f" {allowed}, not {self.exploration!r}"
            )

    def trainer_gpus(self, sc: Scenario) -> int:
        """GPUs that run the update."""
        if self.pipeline == "colocated" and self.colocated_gpus == "total":
            return sc.trainer_gpus + sc.sampler_gpus
        if self.trainer_share is not None:
            total = sc.trainer_gpus + sc.sampler_gpus
            return min(total - 1, max(1, round(self.trainer_share * total)))
        return sc.trainer_gpus

    def sampler_gpus(self, sc: Scenario) -> int:
        """GPUs that sample (a spot system's: at full capacity, the fallback not counted)."""
        if self.pipeline == "colocated":
            return self.trainer_gpus(sc)
        if self.trainer_share is not None:
            return sc.trainer_gpus + sc.sampler_gpus - self.trainer_gpus(sc)
        return sc.sampler_gpus

    def on_demand_gpus(self, sc: Scenario) -> int:
        """On-demand GPUs held for the whole run (a spot system's fallback not counted)."""
        if self.pipeline == "colocated":
            return self.trainer_gpus(sc)
        if self.samplers == "on_demand":
            return sc.trainer_gpus + sc.sampler_gpus
        return sc.trainer_gpus

    def total_gpus(self, sc: Scenario) -> int:
        """GPUs the system uses at full spot capacity (the fallback not counted)."""
        if self.pipeline == "colocated":
            return self.trainer_gpus(sc)
        return sc.trainer_gpus + sc.sampler_gpus


def _spotlight() -> list[System]:
    """Spotlight (spot samplers, exploration during the update, the trainer GPUs sampling the
    rollout), and its ablations: Spotlight with one part changed."""
    spotlight = System("spotlight", "spot", exploration="spot", trainer_samples=True)
    return [
        spotlight,
        dataclasses.replace(spotlight, name="ablation_no_trainer_samples", trainer_samples=False),
        dataclasses.replace(spotlight, name="ablation_uniform_planner", uniform_planner=True),
        dataclasses.replace(spotlight, name="ablation_live_planner", planner_gain="live"),
        dataclasses.replace(spotlight, name="ablation_push", dispatch="push"),
    ]


def _spotlight_pipelined() -> list[System]:
    """Spotlight's one-step-stale schedule (``pipeline='pipelined'``): spot samplers sample the
    next rollout, oversampled by the exploration budget, during the update; the trainer GPUs
    sample what is left of it after the update. Its ablations: one part changed."""
    pipelined = System(
        "spotlight_pipelined",
        "spot",
        exploration="oversample",
        pipeline="pipelined",
        trainer_samples=True,
    )
    return [
        pipelined,
        dataclasses.replace(
            pipelined, name="ablation_pipelined_no_oversampling", exploration="off"
        ),
        dataclasses.replace(
            pipelined, name="ablation_pipelined_no_trainer_samples", trainer_samples=False
        ),
    ]


SYSTEMS: dict[str, System] = {
    s.name: s
    for s in [
        System("on_demand_grpo", "on_demand"),
        System("on_demand_critical_path", "on_demand", exploration="critical_path"),
        System("colocated", "on_demand", pipeline="colocated"),
        System("colocated_same_total", "on_demand", pipeline="colocated", colocated_gpus="total"),
        System("async_one_step", "on_demand", pipeline="async_one_step"),
        System("on_demand_grpo_split", "on_demand", trainer_share=1 / 3),
        System("async_one_step_split", "on_demand", pipeline="async_one_step", trainer_share=1 / 3),
        System("spot_grpo", "spot"),
        *_spotlight(),
        *_spotlight_pipelined(),
    ]
}


@dataclass(frozen=True)
class LearningModel:
    """How validation reward moves per iteration (modelled, with measured inputs).

    Progress toward the target is counted in units of the plain-GRPO iteration: plain GRPO needs
    ``baseline_iterations`` iterations (an input: the tiny task runs here have not reached a
    target yet, see docs/tasks.md); reward moves linearly with progress from ``initial`` to
    ``target``. Every rollout is drawn by the real seed-selection code from a measured prompt
    population (``per_prompt`` of an ``eval.json``, each prompt fitted with a beta-binomial:
    spotlight.sim.sim_rewards), selection on stale rewards and training on fresh ones drawn with
    ``rank_preservation`` as their Spearman (measured on OCR-mini, docs/benchmarks.md). What an
    iteration is worth depends on ``signal``:

    * ``"live_groups"`` (the default): ``(live / baseline_live) ** live_exponent``, ``live`` the
      share of the rollout's groups whose fresh rewards are not all equal (a dead group gives no
      gradient under group-normalized advantages) and ``baseline_live`` plain GRPO's expected
      share at the same reward level. Measured: exploration that raised the group std 1.2-1.3x on
      a reward with almost no dead groups bought no iterations, and on one with half of them
      dead it cut the dead share and the iterations to the target (docs/benchmarks.md).
    * ``"contrast"``: ``(contrast / baseline_contrast) ** contrast_exponent``, contrast the mean
      group reward std (the model before the dead-group benches).

    With ``follow_level`` the draws follow the validation reward: at every iteration the
    population is shifted (a probit shift of every prompt, ``Rewards.shift_for_level``) so that
    its mean reward is the current level, so groups die as a saturating reward rises.
    """

    baseline_iterations: int = 300
    initial: float = 0.118
    target: float = 0.268
    rank_preservation: float = 0.67
    prompts_file: str = "eval-ocr-mini-v0.json"
    signal: str = "live_groups"
    """What an iteration's progress follows: 'live_groups' or 'contrast' (class docstring)."""
    live_exponent: float = 0.0
    """``k`` in ``progress = (live / baseline_live) ** k``. Fitted
    (:func:`spotlight.sim.sim_fit.fit_exponent` with ``signal="live_groups"``; ``spotlight
    simulate --fit-exploration docs/bench/exploration-ocr-mini-exact-power.json``) on the
    exploration power bench: OCR-mini under the exact-match reward, where half of plain GRPO's
    groups are dead, 8 paired seeds of ``off`` against ``spot``, ``spot_uniform`` and
    ``rescue``. The exploring arms raised the live share 1.26-1.28x and needed 0.99-1.01x
    ``off``'s iterations to base + 0.10 (7 of 8 runs of every arm never got there and count as
    their 30 iterations): k = 0.000, 90% bootstrap interval over the seeds -0.002 to 0.005; by
    the validation gain per iteration, -0.04 (-0.38 to 0.28). So a live group more is worth
    nothing measured. The earlier fit on 3 seeds, k = 1.237, came from ratios (1.19-1.60x) that
    the power bench did not repeat; ``--exponent 1.237`` reproduces what was computed with it
    (docs/simulator.md)."""
    follow_level: bool = False
    """Draw every iteration's rewards at the current validation level (class docstring)."""
    contrast_exponent: float = 0.275
    """``k`` in ``progress = (contrast / baseline_contrast) ** k`` (1 would be plain
    proportionality), with ``signal="contrast"``. Measured where RL learns a real task:
    :func:`spotlight.sim.sim_fit.fit_contrast_exponent` pooled
    over the three OCR-mini exploration benches, ``docs/bench/exploration-ocr-mini-learning.json``
    (lr 2e-5), ``exploration-ocr-mini-learning-lr1e-5.json`` and
    ``exploration-ocr-mini-learning-lr2e-6.json`` (3 modes x 3 seeds each, every run at the
    target: k = 0.275; docs/benchmarks.md). The lr 2e-6 bench alone gives 0.008; fitted by the
    validation gain per iteration (``speedup="slope"``) the three give 0.035. Before it: 0.549
    (the first two benches), the toy brightness reward 0.783 (``exploration-brightness.json``)."""
    reward_draws: str = "beta_binomial"
    """How seed rewards are drawn from ``prompts_file``: 'beta_binomial' (a fit per prompt,
    stale and fresh rewards with ``rank_preservation`` as their Spearman; spotlight.sim.sim_rewards)
    or 'empirical' (the measured values resampled, the selection's gain shrunk linearly by
    ``rank_preservation``: the model before the fit, whose best group std is capped at half a
    prompt's measured range; no ``follow_level``)."""
    async_staleness_factor: float = 1.0
    """Progress of an iteration trained on a one-step-stale rollout (``async_one_step``,
    ``spotlight_pipelined`` and its ablations) relative to the same rollout on-policy: progress
    is multiplied by this. **Measured** on OCR-mini (tiny-ocr, DiffusionNFT at lr 2e-6, to the
    base + 0.10, 3 training seeds an arm; ``docs/bench/staleness-ocr-mini.json``, written by
    ``python benchmarks/staleness.py --recipe tiny-ocr --seeds 0 1 2 --target-delta 0.10 --set
    grpo.learning_rate=2e-6 --set num_val_seeds=2 --runs runs/staleness --out docs/bench``):
    on-policy 32.0 iterations (34, 34, 28), one version stale 30.0 (32, 28, 30); the factor,
    on-policy over one-stale clamped to (0, 1], is 1.0. Two versions stale took 32.0."""

    def __post_init__(self) -> None:
        if self.signal not in SIGNALS:
            raise ValueError(
                f"learning signal must be one of {tuple(SIGNALS)}, not {self.signal!r}"
            )
        if self.follow_level and self.reward_draws != "beta_binomial":
            raise ValueError(
                "follow_level needs reward_draws='beta_binomial' (a fitted population)"
            )
        if self.follow_level and not (0.0 < self.initial < 1.0 and 0.0 < self.target < 1.0):
            raise ValueError(
                f"follow_level needs reward levels in (0, 1), got {self.initial} -> {self.target}"
            )


SIGNALS = {
    "live_groups": "the share of live groups (rewards not all equal)",
    "contrast": "the mean group reward std",
}
"""What :class:`LearningModel` makes an iteration's progress follow, and what it reads as."""


def with_overheads(s: Scenario, **changes) -> Scenario:
    return replace(s, overheads=replace(s.overheads, **changes))
