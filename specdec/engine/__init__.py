"""Serving many requests: an engine that verifies all of them with one target pass per round."""

from specdec.engine.engine import Engine, RequestFailed, RequestState
from specdec.engine.rounds import RoundOutcome, accept_round, check_verifier, plan_round

__all__ = ["Engine", "RequestFailed", "RequestState", "RoundOutcome", "accept_round", "check_verifier", "plan_round"]
