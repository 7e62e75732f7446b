"""generate(): speculative == AR (greedy, float32, torch.equal) for drafters of every quality; sampling laws."""

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import specdec as sd
from specdec.drafters.model import ModelDrafter
from specdec.testing import ForcedDrafter, RandomDrafter, tiny_hf_model, tiny_target


@functools.cache
def _target(model_type: str, seed: int, vocab_size: int):
    return tiny_target(model_type, seed=seed, vocab_size=vocab_size, max_seq_len=128)


def _drafter(kind: str, target, k: int, seed: int):
    if kind == "forced":
        return ForcedDrafter(target, accept=k)
    if kind == "ngram":
        return sd.NGramDrafter(max_ngram=3)
    if kind == "same-model":  # perfect drafter: the target's own weights
        return ModelDrafter(tiny_target(target.config.model_type, seed=seed, vocab_size=target.vocab_size, max_seq_len=160))
    if kind == "other-model":  # poor drafter: unrelated random weights
        return ModelDrafter(tiny_target("llama", seed=seed + 100, vocab_size=target.vocab_size, hidden_size=16, max_seq_len=160))
    if kind == "random":
        return RandomDrafter(target.vocab_size)
    raise AssertionError(kind)


@settings(max_examples=30)
@given(
    model_type=st.sampled_from(["llama", "qwen3", "qwen2"]),
    seed=st.integers(0, 3),
    vocab_size=st.sampled_from([61, 97]),
    kind=st.sampled_from(["forced", "ngram", "same-model", "other-model", "random"]),
    k=st.integers(0, 5),
    num_draft_tokens=st.integers(0, 6),
    prompt=st.lists(st.integers(0, 60), min_size=1, max_size=12),
    max_new_tokens=st.integers(1, 40),
)
def test_greedy_speculative_equals_ar(model_type, seed, vocab_size, kind, k, num_draft_tokens, prompt, max_new_tokens):
    target = _target(model_type, seed, vocab_size)
    ids = torch.tensor([prompt])
    ar = sd.generate(target, ids, max_new_tokens)
    spec = sd.generate(
        target, ids, max_new_tokens, drafter=_drafter(kind, target, k, seed), num_draft_tokens=num_draft_tokens, seed=seed
    )
    assert torch.equal(spec.tokens, ar.tokens)
    assert spec.stats.new_tokens == max_new_tokens
    assert spec.stats.target_passes <= ar.stats.target_passes


@pytest.mark.parametrize("accept", range(0, 6))
def test_forced_drafter_accepts_exactly_k(accept):
    target = _target("llama", 1, 97)
    out = sd.generate(target, torch.tensor([[5, 9, 2, 7]]), 40, drafter=ForcedDrafter(target, accept=accept), num_draft_tokens=5)
    hist = out.stats.accepted_histogram
    full_rounds = hist[min(accept, 5)]
    # every round but possibly the last (cut short by max_new_tokens) accepts exactly min(accept, 5)
    assert full_rounds >= out.stats.rounds - 1
    assert out.stats.target_passes == 1 + out.stats.rounds
    assert torch.equal(out.tokens, sd.generate(target, torch.tensor([[5, 9, 2, 7]]), 40).tokens)


def test_tokens_per_pass_counts_prefill():
    target = _target("llama", 0, 97)
    ar = sd.generate(target, torch.tensor([[1, 2, 3]]), 10)
    assert ar.stats.target_passes == 10 and ar.stats.tokens_per_target_pass == 1.0


def test_batch_rows_are_independent_requests():
    target = _target("qwen3", 2, 97)
    prompts = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]])
    both = sd.generate(target, prompts, 15, drafter=sd.NGramDrafter())
    for row in range(2):
        alone = sd.generate(target, prompts[row : row + 1], 15)
        assert torch.equal(both.tokens[row], alone.tokens[0])


def test_eos_stops_each_request_and_lengths_may_differ():
    target = _target("llama", 3, 97)
    prompts = torch.tensor([[4, 5, 6, 7], [8, 9, 10, 11]])
    free = sd.generate(target, prompts, 30)
    eos = int(free.tokens[0, 5])  # a token the first request emits at step 5
    out = sd.generate(target, prompts, 30, drafter=sd.NGramDrafter(), eos_token_id=eos)
    first = out.tokens[0]
    assert int(first[-1]) == eos and eos not in first[:-1].tolist() and first.numel() <= 6
    ar = sd.generate(target, prompts, 30, eos_token_id=eos)
    for a, b in zip(ar.tokens, out.tokens):
        assert torch.equal(a, b)
    # on the CPU, AR stops at once: one target pass per returned token
    assert [s.target_passes for s in ar.per_request] == [s.new_tokens for s in ar.per_request]


def _first_fresh_position(tokens: list[int], start: int) -> int:
    """The first position >= ``start`` whose token does not occur before it (an EOS there ends the output there)."""
    return next(i for i in range(start, len(tokens)) if tokens[i] not in tokens[:i])


@pytest.mark.parametrize("stop_at", [1, 2, 4])
def test_a_stop_inside_a_round_counts_only_the_drafts_the_output_keeps(stop_at):
    target = _target("llama", 1, 97)
    prompt = torch.tensor([[5, 9, 2, 7]])
    free = sd.generate(target, prompt, 20).tokens[0].tolist()
    pos = _first_fresh_position(free, stop_at)
    assert pos < 6, "the EOS must land before the first round's last token (positions 1..6)"
    # every round proposes 5 drafts, all accepted: the first round emits positions 1..6, the EOS ends it at pos
    out = sd.generate(target, prompt, 20, drafter=ForcedDrafter(target, accept=5), num_draft_tokens=5, eos_token_id=free[pos])
    assert out.tokens[0].tolist() == free[: pos + 1]
    stats = out.stats
    assert stats.rounds == 1 and stats.accepted_histogram[pos - 1] == 1 and sum(stats.accepted_histogram) == 1
    # the prefill's token, then each round's accepted drafts and one more
    assert stats.new_tokens == 1 + stats.rounds + sum(n * c for n, c in enumerate(stats.accepted_histogram))


# drafters with caches


@pytest.mark.parametrize("family", ["llama", "qwen3_5_text"])
def test_hf_model_drafter_rolls_back_exactly(family):
    """An HF drafter (attention: crop; Gated DeltaNet hybrid: snapshot) proposes what a fresh one would."""
    target = _target("llama", 0, 97)
    hf = _hf_drafter(family)
    drafter, fresh = ModelDrafter(hf), ModelDrafter(hf)
    drafter.reset()
    gen_ids = sd.generate(target, torch.tensor([[7, 8, 9]]), 24).tokens[0]
    context = torch.tensor([7, 8, 9])
    greedy = sd.SamplingConfig()
    for step in range(6):
        got = drafter.propose(context, 3, sampling=greedy, generator=None).tokens
        fresh.reset()
        want = fresh.propose(context, 3, sampling=greedy, generator=None).tokens
        assert torch.equal(got, want), f"round {step}"
        context = torch.cat([context, gen_ids[3 * step : 3 * step + 1 + step % 3]])


def _hf_drafter(family):
    if family == "llama":
        return tiny_hf_model("llama", seed=4, vocab_size=97)
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    cfg = Qwen3_5TextConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "full_attention"],
    )
    torch.manual_seed(0)
    return Qwen3_5ForCausalLM(cfg).float().eval()


def test_hybrid_hf_drafter_in_generate_is_lossless():
    target = _target("llama", 0, 97)
    ids = torch.tensor([[7, 8, 9, 10]])
    spec = sd.generate(target, ids, 20, drafter=ModelDrafter(_hf_drafter("qwen3_5_text")), num_draft_tokens=3)
    assert torch.equal(spec.tokens, sd.generate(target, ids, 20).tokens)


def test_generate_rejects_bad_input():
    target = _target("llama", 0, 97)
    ok = torch.tensor([[1, 2, 3]])
    with pytest.raises(TypeError, match="input_ids"):
        sd.generate(target, torch.tensor([1, 2, 3]), 5)
    with pytest.raises(TypeError, match="input_ids"):
        sd.generate(target, ok.float(), 5)
    with pytest.raises(ValueError, match=r"input_ids: token ids must lie in \[0, 97\)"):
        sd.generate(target, torch.tensor([[1, 97]]), 5)
    with pytest.raises(ValueError, match="max_seq_len 128"):
        sd.generate(target, torch.zeros(1, 120, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="drafter: vocabulary size 50 differs from the target's 97"):
        sd.generate(target, ok, 5, drafter=RandomDrafter(50))
    with pytest.raises(TypeError, match="drafter"):
        sd.generate(target, ok, 5, drafter=object())
    with pytest.raises(ValueError, match="max_new_tokens"):
        sd.generate(target, ok, 0)
    with pytest.raises(ValueError, match="temperature"):
        sd.generate(target, ok, 5, temperature=-0.5)
    with pytest.raises(ValueError, match="seed"):
        sd.generate(target, ok, 5, seed=[1, 2])
    with pytest.raises(ValueError, match="expected device cpu"):
        sd.generate(target, ok.to("meta"), 5)
    with pytest.raises(ValueError, match="verifier: a TwoLevelVerifier was given without a drafter"):
        sd.generate(target, ok, 5, verifier=sd.TwoLevelVerifier())
    with pytest.raises(TypeError, match="verifier: expected a verifier with verify"):
        sd.generate(target, ok, 5, drafter=sd.NGramDrafter(), verifier="tree")
    # classes pass the drafter protocol's attribute check and have a verify attribute: refused by name before a pass
    with pytest.raises(
        TypeError, match=r"verifier: expected a verifier instance, got the class TreeVerifier \(pass TreeVerifier\(\)\)"
    ):
        sd.generate(target, ok, 5, drafter=sd.NGramDrafter(), verifier=sd.TreeVerifier)
    with pytest.raises(TypeError, match=r"drafter: expected a drafter instance, got the class NGramDrafter"):
        sd.generate(target, ok, 5, drafter=sd.NGramDrafter)
    with pytest.raises(TypeError, match=r"seed: expected None, an int or 1 ints \(one per request\), got 1.5"):
        sd.generate(target, ok, 5, seed=1.5)
    with pytest.raises(
        ValueError, match=r"seed: expected ints in \[-2\*\*63, 2\*\*64\) .*, got 18446744073709551616 for request 0"
    ):
        sd.generate(target, ok, 5, temperature=1.0, seed=2**64)
    with pytest.raises(ValueError, match=r"seed: expected ints in .*, got 18446744073709551616 for request 1"):
        sd.generate(target, torch.cat([ok, ok]), 5, temperature=1.0, seed=2**64 - 1)  # seed + 1 for the second row
    with pytest.raises(ValueError, match="probs: expected every row to have positive, finite mass, got row sums \\[nan\\]"):
        sd.generate(target, ok, 5, temperature=1.0, logits_processor=lambda ids, s: torch.full_like(s, float("-inf")))


def test_generate_takes_numpy_seeds_and_a_single_logits_processor():
    target = _target("llama", 0, 97)
    ok = torch.tensor([[1, 2, 3]])
    plain = sd.generate(target, ok, 5, temperature=1.0, seed=4).tokens
    assert torch.equal(sd.generate(target, ok, 5, temperature=1.0, seed=np.int64(4)).tokens, plain)

    def ban_three(ids, scores):
        scores = scores.clone()
        scores[..., 3] = float("-inf")
        return scores

    banned = sd.generate(target, ok, 8, temperature=1.0, seed=4, logits_processor=ban_three).tokens
    assert torch.equal(banned, sd.generate(target, ok, 8, temperature=1.0, seed=4, logits_processor=[ban_three]).tokens)
    assert 3 not in banned.tolist()[0]


# trees from the stock drafters


@pytest.mark.parametrize("kind", ["ngram-paths", "model-logprobs"])
def test_stock_drafters_feed_tree_verification_losslessly(kind):
    target = _target("qwen3", 1, 61)
    ids = torch.tensor([[3, 4, 5, 3, 4, 6, 3, 4, 5, 9, 3, 4]])
    if kind == "ngram-paths":
        drafter, verifier = sd.NGramDrafter(max_ngram=2, max_paths=4, depth=4), sd.TreeVerifier(budget=12)
    else:
        drafter = ModelDrafter(tiny_target("llama", seed=7, vocab_size=61, max_seq_len=160))
        verifier = sd.TreeVerifier(budget=12)
    spec = sd.generate(target, ids, 30, drafter=drafter, verifier=verifier, num_draft_tokens=12)
    assert torch.equal(spec.tokens, sd.generate(target, ids, 30).tokens)


def test_ngram_paths_build_a_tree_whose_first_path_is_the_chain():
    context = torch.tensor([1, 2, 7, 1, 2, 8, 9, 1, 2])
    greedy = sd.SamplingConfig()
    chain = sd.NGramDrafter(max_ngram=2).propose(context, 3, sampling=greedy, generator=None)
    tree = sd.NGramDrafter(max_ngram=2, max_paths=3).propose(context, 6, sampling=greedy, generator=None)
    assert chain.tokens.tolist() == [8, 9, 1]
    assert tree.tree is not None and tree.tree.num_nodes == 6
    assert tree.tokens[:3].tolist() == [8, 9, 1]
    assert set(tree.tree.tokens[tree.tree.parents == -1].tolist()) == {8, 7}


def test_model_drafter_reports_tree_scores_even_when_greedy():
    drafter = ModelDrafter(tiny_target(seed=3, max_seq_len=64))
    drafter.reset()
    prop = drafter.propose(torch.tensor([1, 2, 3]), 4, sampling=sd.SamplingConfig(), generator=None)
    assert prop.draft_probs is None and prop.tree_logprobs.shape == (4, 97)
    assert torch.equal(prop.tree_logprobs.argmax(-1), prop.tokens)


def test_generate_rejects_a_tree_larger_than_the_draft_budget():
    target = _target("llama", 0, 97)

    class Greedy:
        vocab_size = None

        def reset(self):
            pass

        def propose(self, context, max_tokens, *, sampling, generator):
            return sd.DraftProposal(tokens=context.new_zeros(0), tree=sd.verify.Tree.chain(torch.arange(max_tokens + 1)))

    with pytest.raises(ValueError, match="drafter: proposed 5 tokens / tree nodes, expected at most 4"):
        sd.generate(
            target, torch.tensor([[1, 2, 3]]), 10, drafter=Greedy(), verifier=sd.TreeVerifier(budget=8), num_draft_tokens=4
        )


# feature taps for drafters that read the target's hidden states


class TapRecorder:
    """Records the target features a tap drafter receives, and proposes n-gram continuations."""

    vocab_size = None
    target_layer_ids = (1, 2)

    def __init__(self, max_paths: int = 3):
        self.ngram = sd.NGramDrafter(max_ngram=2, max_paths=max_paths)
        self.rows: list[torch.Tensor] = []

    def reset(self):
        self.rows = []

    def propose(self, context, max_tokens, *, sampling, generator, target_hidden):
        assert target_hidden.shape[0] + sum(r.shape[0] for r in self.rows) == context.numel() - 1
        self.rows.append(target_hidden)
        return self.ngram.propose(context, max_tokens, sampling=sampling, generator=generator)


@pytest.mark.parametrize("verifier", ["chain", "tree"])
def test_feature_taps_are_the_hidden_states_of_the_committed_context(verifier):
    """The features handed to a drafter equal a clean forward over the committed context (no extra pass)."""
    target = _target("llama", 2, 97)
    ids = torch.tensor([[3, 4, 5, 3, 4, 6, 3, 4, 5, 3]])
    drafter = TapRecorder(max_paths=1 if verifier == "chain" else 3)  # trees for the tree verifier
    ver = sd.ChainVerifier() if verifier == "chain" else sd.TreeVerifier(budget=8)
    out = sd.generate(target, ids, 20, drafter=drafter, verifier=ver, num_draft_tokens=6)
    assert torch.equal(out.tokens, sd.generate(target, ids, 20).tokens)
    seen = torch.cat(drafter.rows)  # [committed rows, 2, H]
    context = torch.cat([ids[0], out.tokens[0]])[: seen.shape[0]]
    clean = tiny_target("llama", seed=2, vocab_size=97, max_seq_len=128)
    ref = clean(context[None], hidden_layers=(1, 2)).hidden
    torch.testing.assert_close(seen, torch.stack([h[0] for h in ref], dim=1), rtol=1e-5, atol=1e-5)


def test_stats_record_the_longest_proposal_offered():
    from specdec.testing import ForcedDrafter

    target = _target("llama", 0, 97)
    prompt = torch.tensor([[3, 4, 5, 3, 4]])
    spec = sd.generate(target, prompt, 12, drafter=ForcedDrafter(target, accept=2), num_draft_tokens=4)
    assert spec.stats.longest_proposal == 3  # two right tokens and a wrong one a round
    assert len(spec.stats.accepted_histogram) - 1 == 2  # the longest accepted run is shorter than what was offered
    assert sd.generate(target, prompt, 12).stats.longest_proposal == 0  # AR offers nothing
    assert (spec.stats + sd.GenerationStats(longest_proposal=5)).longest_proposal == 5  # the longest of both
    assert spec.stats.as_dict()["longest_proposal"] == 3  # what profile_system reads


class _StarDrafter:
    """Three children of the root a round (depth 1), as ``tree=`` or as ``tokens`` + ``parents``."""

    vocab_size = 5

    def __init__(self, as_parents: bool):
        self.as_parents = as_parents

    def reset(self):
        pass

    def propose(self, context, max_tokens, *, sampling, generator):
        from specdec.contracts import DraftProposal, Tree

        n = min(3, max_tokens)
        if self.as_parents:
            return DraftProposal(tokens=torch.arange(n), parents=torch.full((n,), -1))
        return DraftProposal(tokens=torch.arange(min(1, n)), tree=Tree(tokens=torch.arange(n), parents=torch.full((n,), -1)))


@pytest.mark.parametrize("as_parents", [False, True])
def test_longest_proposal_is_a_trees_depth_in_either_form(as_parents):
    from specdec.testing.laws import MarkovLaw, MarkovTarget

    target = MarkovTarget(MarkovLaw(5, seed=0), max_seq_len=64)
    out = sd.generate(
        target,
        torch.tensor([[1, 2]]),
        8,
        drafter=_StarDrafter(as_parents),
        verifier=sd.TreeVerifier(budget=8),
        num_draft_tokens=4,
    )
    assert out.stats.longest_proposal == 1


def test_a_tree_given_as_parents_is_built_once_a_round(monkeypatch):
    # the loop reads its depth and the tree verifier builds on it: one Tree (one host read of the parents) a round
    from specdec.contracts import tree as tree_module
    from specdec.testing.laws import MarkovLaw, MarkovTarget

    built, init = [], tree_module.Tree.__post_init__

    def counting(self):
        built.append(self.tokens.numel())
        init(self)

    monkeypatch.setattr(tree_module.Tree, "__post_init__", counting)
    target = MarkovTarget(MarkovLaw(5, seed=0), max_seq_len=64)
    drafter = _StarDrafter(as_parents=True)
    out = sd.generate(target, torch.tensor([[1, 2]]), 8, drafter=drafter, verifier=sd.TreeVerifier(budget=8), num_draft_tokens=4)
    assert len(built) == out.stats.rounds > 0
