"""Seed exploration: max-variance seed selection, the bandit planner, exploration items and the
stale/fresh selection.
"""
