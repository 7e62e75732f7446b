"""DSpark's greedy sequential head and confidence head inside the static body (what its CUDA graph captures).

On the static path a greedy chain round takes the walk and the confidences the body computed (a
``k``-token round is the prefix of the body's full-block walk); sampled and tree rounds stay eager on
the body's base logits. Both must give what the dynamic (reference) path gives, for every head type, on
awkward context lengths, crops and ingestion sizes, and keep speculative decoding exact. Graph capture
needs a GPU: ``benchmarks/decode/bench_drafters.py`` checks replays against this eager body there.
"""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.drafters.block import DSparkDrafter, PrefixScheduler, fixture_config, random_block_model
from specdec.testing import tiny_target
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import TreeVerifier

HEADS = ["vanilla", "gated", "rnn"]
GREEDY = SamplingConfig()


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, max_seq_len=256)


def _pair(target, head, *, block_size=5, max_context=120, extra=None, **kw):
    cfg = fixture_config(
        "Qwen3DSparkModel",
        target,
        num_layers=2,
        target_layer_ids=[0, 1],
        block_size=block_size,
        markov_head_type=head,
        extra=extra,
    )
    model = random_block_model(cfg, target, seed=3)
    dynamic, static = DSparkDrafter(model, target, **kw), DSparkDrafter(model, target, **kw)
    static.enable_static_cache(max_context)
    return dynamic, static


def _rounds(max_new: int):
    """(context length, feature rows sent): the prompt, every ingestion size up to past the bucket,
    crops (rows taken back and sent again, ``None`` = only what the drafter lacks), a jump."""
    g = torch.Generator().manual_seed(7)
    length = 11
    yield length, length - 1
    for rows in [1, max_new, 0, 2, max_new + 3, 1]:
        length += rows
        yield length, rows
    for _ in range(5):
        crop = int(torch.randint(0, 4, (1,), generator=g))
        grow = int(torch.randint(0, max_new + 1, (1,), generator=g))
        length += grow
        yield length, crop + grow
    yield length + 2 * max_new, None


def _drive(drafters, target, sampling, max_tokens=None):
    """The same rounds through each drafter: per drafter a list of (proposal, confidence, confidence logits, eager)
    where ``eager`` is, on the static path, the eager head's proposal on the same hidden rows."""
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, target.vocab_size, (80,), generator=g)
    feats = torch.randn(80, 2, target.config.hidden_size, generator=g)
    results = [[] for _ in drafters]
    for d in drafters:
        d.reset()
    for n, rows in _rounds(drafters[0].max_draft_tokens + 1):
        for j, d in enumerate(drafters):
            start = d.cache.length if rows is None else n - 1 - rows
            k = d.max_draft_tokens if max_tokens is None else max_tokens
            gen = torch.Generator().manual_seed(100 + n)
            p = d.propose(tokens[:n], k, sampling=sampling, generator=gen, target_hidden=feats[start : n - 1])
            conf = None if d.last_confidence is None else d.last_confidence.clone()
            conf_logits = None if d.last_confidence_logits is None else d.last_confidence_logits.clone()
            eager = None
            if d._graph_out is not None and sampling.greedy:
                # the eager head on the very same hidden rows (the body's outputs set aside)
                saved, d._graph_out = d._graph_out, None
                e = d._draft(tokens[:n], d.last_hidden[:k], k, sampling, None, max_nodes=k)
                eager = (e, d.last_confidence.clone())
                d._graph_out = saved
            results[j].append((p, conf, conf_logits, eager))
            assert d.cache.length == n - 1
    return results


def _assert_same(ref, got):
    for (p, c, cl, _), (q, cq, clq, eager) in zip(ref, got):
        assert torch.equal(p.tokens, q.tokens)
        assert (p.draft_probs is None) == (q.draft_probs is None)
        if p.draft_probs is not None:
            torch.testing.assert_close(q.draft_probs, p.draft_probs, rtol=1e-5, atol=1e-6)
        for a, b in ((c, cq), (cl, clq)):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        if eager is not None:
            assert torch.equal(eager[0].tokens, q.tokens)
            torch.testing.assert_close(cq, eager[1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("head", HEADS)
def test_static_walk_matches_dynamic(head, target):
    dynamic, static = _pair(target, head)
    ref, got = _drive([dynamic, static], target, GREEDY)
    _assert_same(ref, got)
    assert all(eager is not None for *_, eager in got)  # every round compared with the eager head too
    assert static._graph_out is not None and "greedy" in static._graph_out
    # a short round takes the prefix of the body's full-block walk
    ref, got = _drive([dynamic, static], target, GREEDY, max_tokens=2)
    _assert_same(ref, got)
    assert all(q.tokens.numel() == 2 for q, *_ in (r for r in got))


@pytest.mark.parametrize("head", ["vanilla", "rnn"])
def test_sampled_rounds_on_body_logits_match_dynamic(head, target):
    dynamic, static = _pair(target, head)
    ref, got = _drive([dynamic, static], target, SamplingConfig(temperature=0.9, top_k=20))
    _assert_same(ref, got)
    assert all(q.draft_probs is not None for q, *_ in got)


def test_heads_without_confidence_or_markov_term(target):
    """No confidence head (confidence 1, no logits), and a confidence head without the W1 term."""
    for extra in ({"enable_confidence_head": False}, {"confidence_head_with_markov": False}):
        dynamic, static = _pair(target, "gated", extra=extra)
        ref, got = _drive([dynamic, static], target, GREEDY)
        _assert_same(ref, got)
    dynamic, static = _pair(target, "rnn", extra={"enable_confidence_head": False})
    ref, got = _drive([dynamic, static], target, GREEDY)
    _assert_same(ref, got)
    assert all(torch.equal(c, torch.ones_like(c)) and cl is None for _, c, cl, _ in got)


def test_calibration_reaches_the_body(target, monkeypatch):
    """Temperatures set before or after enable_static_cache are what the body divides by."""
    temps = torch.tensor([0.5, 1.0, 2.0, 3.0, 0.7])
    dynamic, static = _pair(target, "rnn", confidence_temperatures=temps)
    _assert_same(*_drive([dynamic, static], target, GREEDY))
    temps2 = torch.tensor([2.0, 0.25, 1.0, 4.0, 1.5])
    dynamic.calibrate(temps2)
    static.calibrate(temps2)  # after the body's buffer was made: written in place (a captured graph reads it)
    _assert_same(*_drive([dynamic, static], target, GREEDY))
    dynamic.calibrate(None)
    static.calibrate(None)
    _assert_same(*_drive([dynamic, static], target, GREEDY))
    # mutation: a calibrate that does not reach the body's buffer leaves stale temperatures in the graph
    monkeypatch.setattr(DSparkDrafter, "_sync_graph_temperatures", lambda self: None)
    dynamic.calibrate(temps2)
    static.calibrate(temps2)
    with pytest.raises(AssertionError):
        _assert_same(*_drive([dynamic, static], target, GREEDY))


def test_mutation_walk_feeding_the_base_argmax_is_caught(target, monkeypatch):
    """The in-graph walk must feed the *biased* pick to the next step; feeding the base argmax is caught."""
    dynamic, static = _pair(target, "gated")
    ref, _ = _drive([dynamic, static], target, GREEDY)

    def wrong_walk(self, base, hidden, anchor):
        prev, state, tokens, prevs = anchor, None, [], []
        for t in range(base.shape[0]):
            bias, state = self.sequential_bias(prev, hidden[t], state)
            prevs.append(prev)
            tokens.append((base[t] + bias).argmax(-1))
            prev = base[t].argmax(-1)  # the bug: the unbiased argmax becomes the predecessor
        return torch.stack(tokens), torch.stack(prevs)

    monkeypatch.setattr(DSparkDrafter, "_greedy_walk", wrong_walk)
    _, bad = _drive([dynamic, static], target, GREEDY)
    assert any(not torch.equal(p.tokens, q.tokens) for (p, *_), (q, *_) in zip(ref, bad))
    with pytest.raises(AssertionError):
        _assert_same(ref, bad)


def test_mutation_stale_rnn_state_is_caught(target, monkeypatch):
    """Dropping the RNN state between steps of the in-graph walk is caught too."""
    dynamic, static = _pair(target, "rnn")
    real = DSparkDrafter.sequential_bias
    calls = {"in_body": False}
    original_head = DSparkDrafter._graph_head

    def head(self, hidden, anchor):
        calls["in_body"] = True
        try:
            return original_head(self, hidden, anchor)
        finally:
            calls["in_body"] = False

    monkeypatch.setattr(DSparkDrafter, "_graph_head", head)
    monkeypatch.setattr(
        DSparkDrafter,
        "sequential_bias",
        lambda self, prev, hidden=None, state=None: real(self, prev, hidden, None if calls["in_body"] else state),
    )
    with pytest.raises(AssertionError):
        _assert_same(*_drive([dynamic, static], target, GREEDY))


def test_graph_head_makes_no_host_reads(target, monkeypatch):
    """Nothing in the captured head reads a device value back (``.item()``, ``int()``, ``bool()``, ...)."""
    _, static = _pair(target, "rnn")
    hidden = torch.randn(static.block_size, target.config.hidden_size)
    anchor = torch.tensor([3])

    def refuse(*args, **kwargs):
        raise RuntimeError("host read of a tensor value")

    with monkeypatch.context() as m:
        for name in ("item", "tolist", "__int__", "__index__", "__bool__", "__float__"):
            m.setattr(torch.Tensor, name, refuse)
        out = static._graph_head(hidden, anchor)
    assert set(out) == {"logits", "greedy", "confidence_logits", "confidence"}
    assert out["greedy"].shape == (static.block_size,) and out["confidence"].shape == (static.block_size,)
    # the guard bites: the eager path reads the anchor with int() on tree rounds
    with monkeypatch.context() as m:
        m.setattr(torch.Tensor, "__int__", refuse)
        with pytest.raises(RuntimeError, match="host read"):
            int(anchor[0])


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_speculative_equals_autoregressive_on_static_path(head, tree):
    small = tiny_target(seed=0, vocab_size=6, max_seq_len=256)
    cfg = fixture_config("Qwen3DSparkModel", small, num_layers=2, target_layer_ids=[0, 1], block_size=5, markov_head_type=head)
    drafter = DSparkDrafter(random_block_model(cfg, small, seed=3), small, tree_budget=5 if tree else None)
    drafter.enable_static_cache(120)
    prompt = torch.tensor([[1, 2, 3, 4, 5, 0, 1, 2, 3]])
    ar = sd.generate(small, prompt, 40)
    verifier = TreeVerifier(budget=5) if tree else sd.ChainVerifier()
    out = sd.generate(small, prompt, 40, drafter=drafter, verifier=verifier, num_draft_tokens=5)
    assert torch.equal(out.tokens, ar.tokens)
    assert out.stats.mean_accepted > 0


def test_scheduled_chain_on_static_path(target):
    """With a prefix scheduler the chain is cut from the body's confidences, as on the dynamic path."""
    dynamic, static = _pair(target, "vanilla")
    dynamic.scheduler = PrefixScheduler([1.0, 0.95, 0.9, 0.85, 0.6, 0.5])
    static.scheduler = PrefixScheduler([1.0, 0.95, 0.9, 0.85, 0.6, 0.5])
    ref, got = _drive([dynamic, static], target, GREEDY)
    _assert_same(ref, got)
    assert min(q.tokens.numel() for q, *_ in got) < static.max_draft_tokens  # the scheduler did cut chains
    small = tiny_target(seed=0, vocab_size=6, max_seq_len=256)
    cfg = fixture_config("Qwen3DSparkModel", small, num_layers=2, target_layer_ids=[0, 1], block_size=5)
    drafter = DSparkDrafter(
        random_block_model(cfg, small, seed=3), small, scheduler=PrefixScheduler([1.0, 0.97, 0.95, 0.9, 0.8, 0.7])
    )
    drafter.enable_static_cache(120)
    prompt = torch.tensor([[1, 2, 3, 4, 5, 0, 1, 2, 3]])
    assert torch.equal(
        sd.generate(small, prompt, 40, drafter=drafter, num_draft_tokens=5).tokens, sd.generate(small, prompt, 40).tokens
    )
