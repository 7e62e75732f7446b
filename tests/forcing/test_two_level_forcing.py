"""Token forcing on two-level outputs (bf16): the verifier passes, a fault in the Q hand-off is caught."""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.forcing import TokenForcingChecker
from specdec.testing import tiny_target
from specdec.testing.faults import QChainHandOff

NEW_TOKENS = 128


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
