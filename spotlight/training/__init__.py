"""Runs without Ray: the single-process reference loop and its run folder, an iteration's rollout
as data, validation scoring, pretraining of the tiny bases.
"""
