"""The parts of :func:`specdec.generate` around its loop: inputs, stopping, streaming and the output."""

from specdec.generation.inputs import Requests, check_decode_args, check_proposal_size, prepare_requests, request_seeds
from specdec.generation.output import GenerationOutput, GenerationStats, build_output
from specdec.generation.stopping import StopCondition
from specdec.generation.streaming import Stream

__all__ = [
    "GenerationOutput",
    "GenerationStats",
    "Requests",
    "StopCondition",
    "Stream",
    "build_output",
    "check_decode_args",
    "check_proposal_size",
    "prepare_requests",
    "request_seeds",
]
