"""Elastic sequence parallelism: valid SP group shapes and the replica's regroup policy, long-lived
node workers re-formed into groups, the regroup benchmark.
"""
