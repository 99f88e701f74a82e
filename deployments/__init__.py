"""Serve deployments."""
