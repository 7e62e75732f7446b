"""Token forcing on two-level outputs (bf16): the verifier passes, a fault in the Q hand-off is caught."""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.forcing import TokenForcingChecker
from specdec.testing import tiny_target
from specdec.testing.faults import TargetFault

NEW_TOKENS = 128


class QChainHandOff(TargetFault):
    """Planted fault: the exact pass reuses the Q pass's logits for the rows the two passes share.

    With chain drafts the exact pass's first rows (the root and the Q chain C) are the Q pass's first
    rows, same tokens at the same positions: the shortcut a fused implementation could take, and wrong,
    since the Q logits come from the 8-bit weights.
    """

    def __init__(self, target):
        super().__init__(target)
        self._q: tuple[torch.Tensor, torch.Tensor] | None = None  # (tokens [T], logits [1, T, V]) of the last Q pass

    def forward(self, tokens, positions=None, mask=None, *, hidden_layers=(), tree_parents=None, view="exact"):
        out = super().forward(tokens, positions, mask, hidden_layers=hidden_layers, tree_parents=tree_parents, view=view)
        if view == "q":
            self._q = (tokens[0].clone(), out.logits.clone())
        elif self._q is not None:
            q_tokens, q_logits = self._q
            self._q = None
            n = min(q_tokens.numel(), tokens.shape[1])
            differs = (q_tokens[:n] != tokens[0, :n]).nonzero()
            shared = n if differs.numel() == 0 else int(differs[0, 0])
            logits = out.logits.clone()
            logits[:, :shared] = q_logits[:, :shared]
            out = type(out)(logits=logits, hidden=out.hidden)
        return out


@pytest.fixture(scope="module")
def stock():
    return tiny_target(
        seed=3, max_seq_len=256, vocab_size=128, hidden_size=64, intermediate_size=96, num_kv_heads=4, dtype=torch.bfloat16
    )


@pytest.fixture(scope="module")
def prompts(stock):
    return torch.randint(0, stock.vocab_size, (8, 8), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def checker(stock):
    return TokenForcingChecker(stock)


def two_level_outputs(target, prompts):
    verifier = sd.TwoLevelVerifier(budget=12, q_budget=8, gate="always")
    out = sd.generate(target, prompts, NEW_TOKENS, drafter=sd.NGramDrafter(), verifier=verifier, num_draft_tokens=6)
    return out.tokens, verifier.stats


def test_two_level_bf16_outputs_pass_token_forcing(stock, prompts, checker):
    tokens, stats = two_level_outputs(stock, prompts)
    assert stats.q_passes > 0
    report = checker.check(prompts, tokens)
    assert report.passed, report.table()


def test_fault_in_the_q_hand_off_is_caught(stock, prompts, checker):
    tokens, stats = two_level_outputs(QChainHandOff(stock), prompts)
    assert stats.q_passes > 0
    report = checker.check(prompts, tokens)
    assert not report.passed, report.table()
    assert report.num_mismatches > 0
