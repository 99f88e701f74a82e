"""Detached named actors (weight broadcast, bandit state, request queue): thin Ray shells.

Their names, namespace and the placement resources are constants in :mod:`.names`.
"""
