"""Ray Serve deployments: DiT sampling replicas on spot nodes, and reward models."""
