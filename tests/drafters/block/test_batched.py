"""The batched block drafter: every request's round in one ingestion and one block forward.

* layout ``"per_request"``: proposals (tokens, draft laws, scores) ``torch.equal`` to the unbatched
  drafter's static path, for every architecture, greedy and sampled, over rounds with crops, zero-token
  rounds, a subset of slots in any order, and a slot reused by a new request;
* layout ``"packed"``: the same drafts as the dynamic (reference) path, laws and scores to rounding;
* a request never reads another request's slot or its own stale positions (poisoned caches; the
  mask and the slot index broken on purpose show it);
* bad arguments raise naming the argument, before any slot changes.
"""

from __future__ import annotations

import pytest
import torch

from specdec.contracts.sampling import SamplingConfig
from specdec.drafters.block import (
    BatchedBlockDrafter,
    BlockDraftModel,
    DFlash2Drafter,
    DFlashDrafter,
    DSparkDrafter,
    PrefixScheduler,
    fixture_config,
    random_block_model,
)
from specdec.testing import tiny_target

CASES = {
    "dflash-full": (DFlashDrafter, "DFlashDraftModel", {"block_size": 5}, {}),
    "dflash-mixed": (
        DFlashDrafter,
        "DFlashDraftModel",
        {"block_size": 6, "sliding_window": 4, "extra": {"layer_types": ["sliding_attention", "full_attention"]}},
        {},
    ),
    "hf-assistant": (DFlashDrafter, "muse_glimmer_assistant", {"block_size": 4, "sliding_window": 5}, {}),
    "dflash2": (DFlash2Drafter, "DFlash2DraftModel", {"block_size": 5, "selector_top_k": 6}, {}),
    "dflash2-tree": (DFlash2Drafter, "DFlash2DraftModel", {"block_size": 4, "selector_top_k": 3}, {"tree_budget": 4}),
    "dspark": (DSparkDrafter, "Qwen3DSparkModel", {"block_size": 4}, {}),
    "dspark-rnn": (DSparkDrafter, "Qwen3DSparkModel", {"block_size": 4, "markov_head_type": "rnn"}, {}),
}
MAX_CONTEXT = 100
TOKENS = 96


@pytest.fixture(scope="module")
def target():
    return tiny_target(seed=0, max_seq_len=256)


def _drafter(case, target, model=None):
    cls, arch, sizes, kw = CASES[case]
    if model is None:
        cfg = fixture_config(arch, target, num_layers=2, target_layer_ids=[0, 1], **sizes)
        model = random_block_model(cfg, target, seed=3)
    return cls(model, target, **kw)


def _script(num_requests: int, rounds: int, max_new: int, max_draft: int, seed: int):
    """Per round, the requests that draft (a subset in shuffled order), each as (request, context length, new rows, k).

    Request ``num_requests - 1`` joins late, in the slot request 0 leaves; contexts grow by up to
    ``max_new + 2`` rows a round and a round takes back up to 3 cached rows (a rejection).
    """
    g = torch.Generator().manual_seed(seed)
    lengths = [None] * num_requests  # context length of each request's previous call
    late = num_requests - 1
    script = []
    for r in range(rounds):
        active = [i for i in range(num_requests) if (i != late or r >= rounds // 2) and (i != 0 or r < rounds // 2)]
        chosen = [i for i in active if bool(torch.rand((), generator=g) < 0.8)] or active[:1]
        order = torch.randperm(len(chosen), generator=g).tolist()
        entries = []
        for i in (chosen[j] for j in order):
            if lengths[i] is None:
                n = int(torch.randint(2, 20, (), generator=g))
                rows = n - 1
            else:
                crop = min(int(torch.randint(0, 4, (), generator=g)), lengths[i] - 1)
                grow = int(torch.randint(0, max_new + 3, (), generator=g))
                n = min(lengths[i] + grow, TOKENS)
                rows = crop + n - lengths[i]
            k = int(torch.randint(0, max_draft + 2, (), generator=g))  # past the drafter's most, and 0
            lengths[i] = n
            entries.append((i, n, rows, k))
        script.append(entries)
    return script


def _run(case, target, layout, *, sampling, rounds=8, num_requests=4, poison=False, reference="static", row_buckets=None):
    """The same script through a batched drafter (3 slots; on its static path with ``row_buckets``) and one
    unbatched drafter per request."""
    batched_head = _drafter(case, target)
    batch = batched_head.batched(slots=3, layout=layout, max_context=MAX_CONTEXT)
    if row_buckets is not None:
        batch.enable_static_path(row_buckets)
    g = torch.Generator().manual_seed(5)
    tokens = [torch.randint(0, target.vocab_size, (TOKENS,), generator=g) for _ in range(num_requests)]
    feats = [torch.randn(TOKENS, 2, target.config.hidden_size, generator=g) for _ in range(num_requests)]
    alone = []
    for _ in range(num_requests):
        d = _drafter(case, target, model=batched_head.model)
        if reference == "static":
            d.enable_static_cache(MAX_CONTEXT)
        d.reset()
        alone.append(d)
    slot_of = {i: i for i in range(num_requests - 1)}
    slot_of[num_requests - 1] = 0  # the late request reuses request 0's slot
    started = set()
    pairs = []
    for r, entries in enumerate(_script(num_requests, rounds, batch.max_draft_tokens + 1, batch.max_draft_tokens, seed=9)):
        for i, _, _, _ in entries:
            if i not in started:
                batch.reset(slot_of[i])
                started.add(i)
        if poison:
            # finite junk everywhere a round must not read: other slots, and each slot past its rows
            junk = torch.Generator().manual_seed(r)
            for buf in batch.cache.k + batch.cache.v:
                for s in range(batch.slots + 1):  # the spare slot too
                    start = batch.cache.lengths[s]
                    buf[s, :, start:] = 1e3 * torch.randn(buf[s, :, start:].shape, generator=junk)
        args = [(slot_of[i], tokens[i][:n], feats[i][n - 1 - rows : n - 1], k) for i, n, rows, k in entries]
        gens = [torch.Generator().manual_seed(100 * r + i) for i, _, _, _ in entries]
        props = batch.propose_batch(
            [a[0] for a in args],
            [a[1] for a in args],
            [a[3] for a in args],
            samplings=[sampling] * len(args),
            generators=gens,
            target_hiddens=[a[2] if a[2].shape[0] else None for a in args],
        )
        for (i, n, rows, k), (_, context, hidden, _), prop in zip(entries, args, props):
            gen = torch.Generator().manual_seed(100 * r + i)
            ref = alone[i].propose(context, k, sampling=sampling, generator=gen, target_hidden=hidden if rows else None)
            pairs.append((prop, ref))
            assert batch.cache.lengths[slot_of[i]] == n - 1
    return pairs


def _fields(prop):
    return {name: getattr(prop, name) for name in ("tokens", "draft_probs", "tree_logprobs")} | {
        "tree": None if prop.tree is None else (prop.tree.tokens, prop.tree.parents)
    }


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "sampled"])
def test_per_request_layout_equals_the_unbatched_static_path(case, temperature, target):
    pairs = _run(case, target, "per_request", sampling=SamplingConfig(temperature=temperature))
    assert sum(p.tokens.numel() for p, _ in pairs) > 0
    for prop, ref in pairs:
        got, want = _fields(prop), _fields(ref)
        for name in got:
            a, b = got[name], want[name]
            assert (a is None) == (b is None), name
            if isinstance(a, tuple):
                assert all(torch.equal(x, y) for x, y in zip(a, b)), name
            elif a is not None:
                assert torch.equal(a, b), name


def _agree_to_rounding(pairs) -> list[bool]:
    """Asserts equal drafts and laws / scores equal to rounding; returns whether each law / score is bitwise equal."""
    bitwise = []
    for prop, ref in pairs:
        assert torch.equal(prop.tokens, ref.tokens)
        for name in ("draft_probs", "tree_logprobs"):
            a, b = getattr(prop, name), getattr(ref, name)
            assert (a is None) == (b is None), name
            if a is not None:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
                bitwise.append(torch.equal(a, b))
    return bitwise


@pytest.mark.parametrize("case", ["dflash-mixed", "dflash2", "dspark-rnn"])
@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "sampled"])
def test_packed_layout_agrees_with_the_dynamic_path(case, temperature, target):
    bitwise = _agree_to_rounding(
        _run(case, target, "packed", sampling=SamplingConfig(temperature=temperature), reference="dynamic")
    )
    if case == "dflash-mixed":
        # the packed GEMMs round differently here: the per_request layout's bitwise test has teeth
        assert not all(bitwise)


@pytest.mark.parametrize("case", ["dflash-mixed", "dflash2", "dspark-rnn"])
@pytest.mark.parametrize("temperature", [0.0, 0.9], ids=["greedy", "sampled"])
def test_static_path_agrees_with_the_dynamic_path(case, temperature, target):
    """Padded ingestion buckets (4, 8: the prompts and the longer catch-ups go eagerly first), every slot's block."""
    pairs = _run(
        case, target, "packed", sampling=SamplingConfig(temperature=temperature), reference="dynamic", row_buckets=(0, 4, 8)
    )
    assert sum(p.tokens.numel() for p, _ in pairs) > 0
    _agree_to_rounding(pairs)


def test_static_path_arguments(target):
    batch = _drafter("dflash-full", target).batched(slots=2, max_context=MAX_CONTEXT)
    assert not batch.uses_static_path
    for bad in ((), (4, 8), (0, 8, 4), (0, 4, 4), (0, -1), (0, 2.5)):
        with pytest.raises(ValueError, match="row_buckets"):
            batch.enable_static_path(bad)
    with pytest.raises(ValueError, match="enable_cuda_graphs.*CUDA"):
        batch.enable_cuda_graphs()
    batch.enable_static_path()
    assert batch.uses_static_path and not batch.uses_cuda_graphs
    assert batch.row_buckets == (0, 8, 16)  # 2 slots x (4 drafts + root) = 10 rows at most
    with pytest.raises(ValueError, match="layout.*packed.*per_request"):
        _drafter("dflash-full", target).batched(slots=2, layout="per_request", max_context=20).enable_static_path()


def _logprobs(pairs):
    return torch.cat([p.tree_logprobs for p, _ in pairs if p.tree_logprobs is not None])


@pytest.mark.parametrize("layout", ["packed", "per_request", "static"])
def test_no_request_reads_another_slot_or_stale_positions(layout, target, monkeypatch):
    kw = {"row_buckets": (0, 4, 8)} if layout == "static" else {}
    layout = "packed" if layout == "static" else layout
    clean = _logprobs(_run("dflash-mixed", target, layout, sampling=SamplingConfig(), **kw))
    poisoned = _logprobs(_run("dflash-mixed", target, layout, sampling=SamplingConfig(), poison=True, **kw))
    torch.testing.assert_close(poisoned, clean, rtol=0, atol=1e-6)
    # mutation: without the "position in use" mask the junk shows
    masks = BlockDraftModel._masks
    with monkeypatch.context() as m:
        m.setattr(BlockDraftModel, "_masks", lambda self, q, k, base: masks(self, q, k, None))
        broken = _logprobs(_run("dflash-mixed", target, layout, sampling=SamplingConfig(), poison=True, **kw))
    assert not torch.allclose(broken, clean, atol=1e-3)


def test_each_block_reads_its_own_slot(target, monkeypatch):
    clean = _logprobs(_run("dflash-full", target, "packed", sampling=SamplingConfig()))
    forward = BlockDraftModel.block_forward_slots

    def swapped(self, noise, starts, keys, values, slots=None):
        # mutation: each request of a batched block attends to the next request's slot
        return forward(self, noise, starts, keys, values, slots=None if slots is None else slots.roll(1))

    monkeypatch.setattr(BlockDraftModel, "block_forward_slots", swapped)
    broken = _logprobs(_run("dflash-full", target, "packed", sampling=SamplingConfig()))
    assert not torch.allclose(broken, clean, atol=1e-3)


def test_one_ingestion_and_one_block_forward_per_round(target, monkeypatch):
    calls = {"project_context": [], "block_forward_slots": []}
    for name in calls:
        original = getattr(BlockDraftModel, name)

        def counting(self, *args, _original=original, _name=name, **kw):
            calls[_name].append(args[0].shape[0])
            return _original(self, *args, **kw)

        monkeypatch.setattr(BlockDraftModel, name, counting)
    batch = _drafter("dflash-full", target).batched(slots=3, max_context=MAX_CONTEXT)
    g = torch.Generator().manual_seed(0)
    contexts = [torch.randint(0, 97, (n,), generator=g) for n in (6, 2, 9)]
    hiddens = [torch.randn(c.numel() - 1, 2, 32, generator=g) for c in contexts]
    for slot in range(3):
        batch.reset(slot)
    batch.propose_batch(
        [2, 0, 1], contexts, [4, 0, 3], samplings=[SamplingConfig()] * 3, generators=[None] * 3, target_hiddens=hiddens
    )
    # every request's rows in one projection; one block forward over the two requests that draft
    assert calls == {"project_context": [5 + 1 + 8], "block_forward_slots": [2]}


def test_bad_arguments_raise_before_any_slot_changes(target):
    drafter = _drafter("dflash-full", target)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="slots"):
            drafter.batched(slots=bad)
    with pytest.raises(ValueError, match="layout"):
        drafter.batched(slots=2, layout="interleaved")
    with pytest.raises(ValueError, match="max_context"):
        drafter.batched(slots=2, max_context=0)
    with pytest.raises(ValueError, match="scheduler.*PrefixScheduler"):
        DSparkDrafter(drafter_model("Qwen3DSparkModel", target), target, scheduler=PrefixScheduler([1.0, 0.9])).batched(slots=2)
    assert isinstance(drafter.batched(slots=2), BatchedBlockDrafter)
    assert drafter.batched(slots=2).cache.max_context == target.max_seq_len

    batch = drafter.batched(slots=2, max_context=20)
    with pytest.raises(ValueError, match="slot"):
        batch.reset(2)
    g = torch.Generator().manual_seed(0)
    tokens, feats = torch.randint(0, 97, (40,), generator=g), torch.randn(40, 2, 32, generator=g)
    greedy = [SamplingConfig()] * 2
    batch.reset(0)
    batch.reset(1)
    batch.propose_batch(
        [0, 1], [tokens[:5], tokens[:3]], [2, 2], samplings=greedy, generators=[None] * 2, target_hiddens=[feats[:4], feats[:2]]
    )
    before = list(batch.cache.lengths)
    state = [k.clone() for k in batch.cache.k]
    bad_calls = {
        "contexts\\[1\\].*at most 20.*got 24": ([tokens[:7], tokens[:25]], [feats[4:6], feats[2:24]]),
        "target_hiddens\\[0\\]: expected \\[rows, 2, 32\\]": ([tokens[:7], tokens[:4]], [feats[4:6, :1], feats[2:3]]),
        "target_hiddens\\[1\\]: the drafter holds features of 2 rows": ([tokens[:7], tokens[:9]], [feats[4:6], feats[4:5]]),
        "target_hiddens\\[0\\]: 9 feature rows for a context of 7": ([tokens[:7], tokens[:4]], [feats[:9], feats[2:3]]),
    }
    for match, (contexts, hiddens) in bad_calls.items():
        with pytest.raises(ValueError, match=match):
            batch.propose_batch([0, 1], contexts, [2, 2], samplings=greedy, generators=[None] * 2, target_hiddens=hiddens)
        assert batch.cache.lengths == before
        assert all(torch.equal(a, b) for a, b in zip(batch.cache.k, state))
    with pytest.raises(ValueError, match="slots: expected distinct"):
        batch.propose_batch([0, 0], [tokens[:7]] * 2, [2, 2], samplings=greedy, generators=[None] * 2, target_hiddens=[None] * 2)


def drafter_model(arch, target):
    return random_block_model(fixture_config(arch, target, num_layers=1, target_layer_ids=[0, 1]), target, seed=1)
