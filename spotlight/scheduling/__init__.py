"""Scheduling and costs: the pull queue's rules, dispatch in simulated time, spot traces and
preemption notices, GPU-seconds and prices, autoscaling, waits.
"""
