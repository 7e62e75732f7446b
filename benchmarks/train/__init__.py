"""Drafter training run at real scale (SmolLM2-135M)."""
