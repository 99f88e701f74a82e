"""The reward deployment: scores the replicas' images with a named reward, on the on-demand
side."""

from __future__ import annotations

from ray import serve

from spotlight.deployments.node import idle_thread_priority


def reward_scorer(
    reward: str,
    threads: int = 1,
    idle_priority: bool = False,
    model: str | None = None,
    gpus: float = 0.0,
):
    """The bound reward deployment, on the on-demand side: losing a spot node must not take the
    scorer every replica calls along with it. ``model``: the reward's local model folder;
    ``gpus``: GPUs of its own (a model reward on a GPU cluster), 0 for a CPU reward."""
    from spotlight.scheduling import resources

    actor = {"num_cpus": 1, "resources": {resources.RESOURCE_ON_DEMAND: 0.001}}
    if gpus > 0:  # a GPU reserved for the reward: never one a trainer or a sampler counts on
        actor["num_gpus"] = gpus
        actor["resources"][resources.RESOURCE_REWARD] = gpus
    return RewardScorer.options(ray_actor_options=actor).bind(reward, threads, idle_priority, model)


# graceful_shutdown_wait_loop_s: as the sampler replicas' (deployments/sampler.py)
@serve.deployment(
    num_replicas=1, ray_actor_options={"num_cpus": 1}, graceful_shutdown_wait_loop_s=0.2
)
class RewardScorer:
    """Scores images with a named reward (``spotlight.rewards``); a model reward loads its
    model once, on this replica's GPU when it has one."""

    def __init__(
        self, reward: str, threads: int = 1, idle_priority: bool = False, model: str | None = None
    ):
        import ray
        import torch

        from spotlight.rewards import build_reward
        from spotlight.scheduling.storage import require_paths

        require_paths(ray.util.get_node_ip_address(), "reward", {"reward_model": model})
        torch.set_num_threads(threads)
        self._reward = build_reward(reward, model)
        self.name = reward
        self._idle = idle_priority

    def __call__(self, images, prompts: list[str]) -> list[float]:
        if self._idle:  # Serve calls from its own threads: set it here
            idle_thread_priority()
        return [float(r) for r in self._reward(images, prompts)]
