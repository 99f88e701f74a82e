"""Detached named actors."""
