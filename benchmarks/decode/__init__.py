"""Decode-step, tree-verify, drafter and token-forcing benchmarks."""
