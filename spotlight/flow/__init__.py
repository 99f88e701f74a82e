"""The Flow-GRPO math and sampling: the SDE, seeded trajectories, the objectives and one update,
the iteration's random streams, versioned weights as bytes.
"""
