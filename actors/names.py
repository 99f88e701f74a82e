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

SERVE_APP = "spotlight"
"""The Serve application of the sampler replicas and the reward deployment."""
