"""A per-request drafter with work in flight (a FinishingDrafter, SSD's pre-draft) is finished when its request
ends in the engine, as ``generate`` finishes it: on completion and on cancellation."""

from __future__ import annotations

import torch

import specdec as sd
from specdec.drafters import ModelDrafter
from specdec.drafters.ssd import SpeculativeSpeculationDrafter
from specdec.engine import Engine
from specdec.testing import HeldJobTransport, tiny_target

TARGET = tiny_target(seed=0, max_seq_len=96)


def test_a_request_that_ends_leaves_no_predraft_in_flight():
    made = []

    def factory():
        draft_model = tiny_target(seed=0, max_seq_len=96)  # its own: a ModelDrafter keeps its cache in its model
        made.append(SpeculativeSpeculationDrafter(ModelDrafter(draft_model), fan_out=4, transport=HeldJobTransport()))
        return made[-1]

    engine = Engine(TARGET, factory, max_batch=2, num_draft_tokens=3)
    prompts = [torch.tensor([3, 1, 4, 1, 5]), torch.tensor([9, 2, 6])]
    done = engine.add_request(prompts[0], max_new_tokens=10)
    cancelled = engine.add_request(prompts[1], max_new_tokens=40)
    engine.step()
    engine.step()
    engine.cancel(cancelled)
    outputs = engine.run()
    assert len(made) == 2 and all(d.transport.held is None for d in made)
    assert torch.equal(outputs[done], sd.generate(TARGET, prompts[0][None], 10).tokens[0])
