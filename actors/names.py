"""Names and namespace of Spotlight's detached actors: the one place they are spelled.

The controller, the Serve replicas and the Ray Train workers look the actors up with these
(``ray.get_actor(WEIGHT_BROADCAST, namespace=NAMESPACE)``), so a restarted driver finds the
actors its predecessor created.
"""

NAMESPACE = "spotlight"
"""Ray namespace of every detached actor (and of the job that uses them)."""

WEIGHT_BROADCAST = "spotlight.weight_broadcast"
"""Versioned policy weights: the trainer publishes, replicas pull."""

BANDIT_STATE = "spotlight.bandit_state"
"""The exploration planner's statistics."""

REQUEST_QUEUE = "spotlight.request_queue"
"""The pull-based work queue of rollout and exploration items."""

ALL_ACTORS = (WEIGHT_BROADCAST, BANDIT_STATE, REQUEST_QUEUE)

# Custom resources that place work on the right capacity (see cluster.yaml). Locally they are
# virtual resources of the embedded Ray.
RESOURCE_SPOT = "spot"
"""One unit on every spot node."""
RESOURCE_ON_DEMAND = "on_demand"
"""One unit on every on-demand node (the head too: detached actors live there)."""
RESOURCE_CONTROL = "control"
"""One unit on the head node: where the detached actors and the driver live."""
RESOURCE_SAMPLER = "sampler_gpu"
"""One unit per GPU that may run sampling replicas (spot, or the on-demand fallback)."""
RESOURCE_TRAINER = "trainer_gpu"
"""One unit per on-demand GPU reserved for the Ray Train trainer."""
RESOURCE_REWARD = "reward_gpu"
"""One unit per on-demand GPU reserved for a model reward (never a trainer's or a sampler's)."""

SERVE_APP = "spotlight"
"""The Serve application of the sampler replicas and the reward deployment."""
