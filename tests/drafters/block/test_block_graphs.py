"""The block drafters' static-cache path (what their CUDA graphs capture), run eagerly on the CPU.

It must give the proposals of the dynamic (reference) path on awkward context lengths, crops and
ingestion sizes, never read a slot it does not own, refuse contexts beyond its capacity before any
launch, and keep speculative decoding exact. Graph capture itself needs a GPU:
``benchmarks/decode/bench_drafters.py`` checks replays against this eager body there.
"""

from __future__ import annotations

import pytest
import torch

import specdec as sd
from specdec.drafters.block import (
    BlockDraftModel,
    DFlash2Drafter,
    DFlashDrafter,
    DSparkDrafter,
    StaticDraftKVCache,
    fixture_config,
    random_block_model,
)
from specdec.models.graphs import StaticGraphs
from specdec.testing import tiny_target
from specdec.verify.sampling import SamplingConfig
from specdec.verify.tree import TreeVerifier

# (id, class, architecture, fixture_config overrides): masks of every kind -- full, causal + window
# (the z-lab sliding rule), bidirectional window (the transformers assistant), mixed per layer
CASES = {
    "dflash-full": (DFlashDrafter, "DFlashDraftModel", {"block_size": 5}),
    "dflash-mixed": (
        DFlashDrafter,
        "DFlashDraftModel",
        {"block_size": 6, "sliding_window": 4, "extra": {"layer_types": ["sliding_attention", "full_attention"]}},
    ),
    "hf-assistant": (DFlashDrafter, "muse_glimmer_assistant", {"block_size": 4, "sliding_window": 5}),
    "dflash2": (DFlash2Drafter, "DFlash2DraftModel", {"block_size": 5, "selector_top_k": 6}),
    "dspark": (DSparkDrafter, "Qwen3DSparkModel", {"block_size": 4}),
}


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, max_seq_len=512)


def _drafter(case, target, **kw):
    cls, arch, sizes = CASES[case]
    cfg = fixture_config(arch, target, num_layers=2, target_layer_ids=[0, 1], **sizes)
    return cls(random_block_model(cfg, target, seed=3), target, **kw)


def _pair(case, target, max_context=200, **kw):
    dynamic = _drafter(case, target, **kw)
    static = _drafter(case, target, **kw)
    static.model = dynamic.model  # one set of weights
    static.enable_static_cache(max_context)
    return dynamic, static


def _rounds(n_ctx: int, max_new: int):
    """(context length, new feature rows) per round: a prompt, then every ingestion size from 0 to
    past the graph buckets, crops (rows taken back and sent again), and a jump to a longer context."""
    g = torch.Generator().manual_seed(7)
    length = 13
    yield length, length - 1
    for rows in [1, max_new, 0, 2, max_new + 3, 1, 3]:
        length += rows
        yield length, rows
    for _ in range(8):
        crop = int(torch.randint(0, 4, (1,), generator=g))
        grow = int(torch.randint(0, max_new + 1, (1,), generator=g))
        length += grow
        yield length, crop + grow  # the drafter drops `crop` cached rows and takes them again
    yield min(n_ctx, length + 2 * max_new), None


def _drive(drafters, target, sampling, *, poison=False, max_tokens=None):
    """Run the same rounds through each drafter; returns per drafter the list of proposals."""
    g = torch.Generator().manual_seed(11)
    tokens = torch.randint(0, target.vocab_size, (90,), generator=g)
    feats = torch.randn(90, 2, target.config.hidden_size, generator=g)
    results = [[] for _ in drafters]
    for d in drafters:
        d.reset()
    for n, rows in _rounds(90, drafters[0].max_draft_tokens + 1):
        for j, d in enumerate(drafters):
            start = d.cache.length if rows is None else n - 1 - rows  # None: everything it lacks
            if poison and d._static is not None:
                # stale finite junk in every slot the round does not own: a mask that lets it in shows
                for buf in d._static.k + d._static.v:
                    buf[:, start:] = 1e3 * torch.randn(buf[:, start:].shape, generator=torch.Generator().manual_seed(n))
            gen = torch.Generator().manual_seed(100 + n)
            k = d.max_draft_tokens if max_tokens is None else max_tokens
            p = d.propose(tokens[:n], k, sampling=sampling, generator=gen, target_hidden=feats[start : n - 1])
            results[j].append((p, None if d.last_hidden is None else d.last_hidden.clone()))
            assert d.cache.length == n - 1
    return results


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "sampled"])
def test_static_path_matches_dynamic(case, temperature, target):
    dynamic, static = _pair(case, target)
    sampling = SamplingConfig(temperature=temperature)
    ref, got = _drive([dynamic, static], target, sampling)
    for (p, h), (q, hq) in zip(ref, got):
        torch.testing.assert_close(hq, h, rtol=1e-5, atol=1e-5)
        assert torch.equal(p.tokens, q.tokens)
        for name in ("draft_probs", "tree_logprobs"):
            a, b = getattr(p, name), getattr(q, name)
            assert (a is None) == (b is None), name
            if a is not None:
                torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("case", ["dflash-mixed", "hf-assistant", "dflash2"])
def test_static_path_never_reads_stale_slots(case, target, monkeypatch):
    dynamic, static = _pair(case, target)
    ref, got = _drive([dynamic, static], target, SamplingConfig(), poison=True)
    for (p, h), (q, hq) in zip(ref, got):
        torch.testing.assert_close(hq, h, rtol=1e-5, atol=1e-5)
        assert torch.equal(p.tokens, q.tokens)
    # mutation: drop the "slot in use" part of the static mask -- the poisoned slots must now show
    original = BlockDraftModel._masks
    monkeypatch.setattr(BlockDraftModel, "_masks", lambda self, q, k, base: original(self, q, k, None))
    _, got = _drive([dynamic, static], target, SamplingConfig(), poison=True)
    assert any(not torch.allclose(hq, h, atol=1e-3) for (_, h), (_, hq) in zip(ref, got))


def test_zero_token_rounds_still_ingest(target):
    """``max_tokens = 0`` rounds run no block but must keep the cache in step (pending rows flushed)."""
    dynamic, static = _pair("dflash-full", target)
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 97, (40,), generator=g)
    feats = torch.randn(40, 2, 32, generator=g)
    greedy = SamplingConfig()
    for d in (dynamic, static):
        d.reset()
        assert d.propose(tokens[:10], 0, sampling=greedy, generator=None, target_hidden=feats[:9]).num_tokens == 0
        assert d.propose(tokens[:12], 0, sampling=greedy, generator=None, target_hidden=feats[9:11]).num_tokens == 0
        assert d.cache.length == 11
    a = dynamic.propose(tokens[:14], 4, sampling=greedy, generator=None, target_hidden=feats[11:13])
    b = static.propose(tokens[:14], 4, sampling=greedy, generator=None, target_hidden=feats[11:13])
    assert torch.equal(a.tokens, b.tokens)
    torch.testing.assert_close(static.last_hidden, dynamic.last_hidden, rtol=1e-5, atol=1e-5)


def test_capacity_and_arguments(target, monkeypatch):
    drafter = _drafter("dflash-full", target)
    drafter.enable_static_cache(20)
    assert drafter._static.slots % 16 == 0 and drafter._static.slots >= 20 + drafter.block_size
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 97, (40,), generator=g)
    feats = torch.randn(40, 2, 32, generator=g)
    greedy = SamplingConfig()
    drafter.propose(tokens[:21], 4, sampling=greedy, generator=None, target_hidden=feats[:20])  # exactly full
    assert drafter.cache.length == 20
    with pytest.raises(ValueError, match="max_context.*at most 20.*got 22"):
        drafter.propose(tokens[:23], 4, sampling=greedy, generator=None, target_hidden=feats[20:22])
    assert drafter.cache.length == 20  # refused before anything changed
    with pytest.raises(ValueError, match="max_context.*got 35"):
        drafter.propose(tokens[:36], 4, sampling=greedy, generator=None, target_hidden=feats[:35])
    for bad in (0, -3, True, 2.5):
        with pytest.raises(ValueError, match="max_context"):
            drafter.enable_static_cache(bad)
    with pytest.raises(ValueError, match="max_new_rows"):
        drafter.enable_static_cache(10, max_new_rows=-1)
    with pytest.raises(ValueError, match="enable_cuda_graphs.*CUDA"):
        drafter.enable_cuda_graphs(10)
    with pytest.raises(ValueError, match="target_hidden"):
        drafter.propose(tokens[:8], 4, sampling=greedy, generator=None, target_hidden=feats[:2])
    drafter.disable_static_cache()
    assert drafter._static is None and drafter.cache.length == 0
    # mutation: without the capacity guard a context past the slots fails deep inside a kernel
    # (or, within the rounding slack, silently shares slots with the block) -- not with a named error
    drafter.enable_static_cache(20)
    monkeypatch.setattr(StaticDraftKVCache, "reserve", lambda self, length: None)
    with pytest.raises(Exception) as info:
        drafter.propose(tokens[:36], 4, sampling=greedy, generator=None, target_hidden=feats[:35])
    assert "max_context" not in str(info.value)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("tree", [False, True], ids=["chain", "tree"])
def test_speculative_equals_autoregressive_on_static_path(case, tree, target):
    small = tiny_target(seed=0, vocab_size=6, max_seq_len=256)
    drafter = _drafter(case, small, tree_budget=5 if tree else None)
    drafter.enable_static_cache(120)
    prompt = torch.tensor([[1, 2, 3, 4, 5, 0, 1, 2, 3]])
    ar = sd.generate(small, prompt, 48)
    verifier = TreeVerifier(budget=5) if tree else sd.ChainVerifier()
    out = sd.generate(small, prompt, 48, drafter=drafter, verifier=verifier, num_draft_tokens=min(5, drafter.max_draft_tokens))
    assert torch.equal(out.tokens, ar.tokens)
    assert out.stats.mean_accepted > 0  # drafts were accepted: the check has teeth


def test_graph_outputs_are_used_and_checked(target, monkeypatch):
    """The static path's greedy picks come from the body's own head; a wrong head must change them."""
    dynamic, static = _pair("dflash2", target)
    greedy = SamplingConfig()
    ref, got = _drive([dynamic, static], target, greedy)
    assert all(torch.equal(p.tokens, q.tokens) for (p, _), (q, _) in zip(ref, got))
    original = DFlash2Drafter._graph_head

    def skewed(self, hidden, anchor):
        out = original(self, hidden, anchor)
        out["greedy"] = out["cand"][:, -1]  # the weakest candidate of each row instead of the walk
        return out

    monkeypatch.setattr(DFlash2Drafter, "_graph_head", skewed)
    _, bad = _drive([dynamic, static], target, greedy)
    assert any(not torch.equal(p.tokens, q.tokens) for (p, _), (q, _) in zip(ref, bad))


@pytest.mark.parametrize("case", ["dflash-full", "dflash2", "dspark"])
def test_static_rounds_run_through_the_graphs_helper(case, target, monkeypatch):
    """Each round with a block is one ``StaticGraphs.run`` keyed by its new-row count, whose body reads the
    static buffers and the helper's device row count: the body a CUDA graph captures, run eagerly here."""
    dynamic, static = _pair(case, target)
    assert isinstance(static._graphs, StaticGraphs) and not static._graphs.capture and not static.uses_cuda_graphs
    keys = []
    original = StaticGraphs.run

    def run(self, key, body):
        keys.append(key)
        buf = self.buffers(key, lambda: pytest.fail(f"the round's buffers of key {key} were not made before its run"))
        assert int(self.length) == static.cache.length - key  # the rows cached before this round's
        live = {name: t.clone() for name, t in buf.items()}
        # the body must read the buffers: other features and another anchor must change the result
        buf["feats"].fill_(3.0)
        buf["anchor"].add_(1).remainder_(target.vocab_size)
        bad = body()["hidden"].clone()  # writes the rows the real run writes again
        for name, t in buf.items():
            t.copy_(live[name])
        out = original(self, key, body)
        assert not torch.equal(bad, out["hidden"])
        return out

    monkeypatch.setattr(StaticGraphs, "run", run)
    max_new = static.max_draft_tokens + 1
    ref, got = _drive([dynamic, static], target, SamplingConfig())
    assert all(torch.equal(p.tokens, q.tokens) for (p, _), (q, _) in zip(ref, got))
    assert len(keys) == len(got) and set(keys) <= set(range(max_new + 1)) and {0, 1, max_new} <= set(keys)


def test_rope_frequencies_stay_float32_in_bf16(target):
    """A bf16 drafter keeps float32 RoPE frequencies (as the target does); a bf16 copy is off by up
    to 0.4%, which shifts the phase by radians at positions in the hundreds."""
    drafter = _drafter("dflash-full", target)
    ref = drafter.model.inv_freq.clone()
    model = drafter.model.to(torch.bfloat16)
    assert model.inv_freq.dtype == torch.float32 and torch.equal(model.inv_freq, ref)
    cos, _ = model.rope(torch.tensor([700]), torch.float32)
    bf16_freq = ref.to(torch.bfloat16).float()
    stale = torch.cat([700 * bf16_freq] * 2).cos()
    assert torch.allclose(cos[0], torch.cat([700 * ref] * 2).cos(), atol=1e-5)
    assert (cos[0] - stale).abs().max() > 0.05  # the bf16 frequencies would be visibly wrong here
