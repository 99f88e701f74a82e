"""The custom resources that place work on the right capacity (see cluster.yaml): the one place
they are spelled. The capacity plan and the simulator count them; the Ray job asks for them.
Locally they are virtual resources of the embedded Ray.
"""

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
