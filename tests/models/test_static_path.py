"""The static path (the fixed-shape bodies CUDA graphs capture, run eagerly) against the eager forward.

At equal shapes (rows = bucket, cache filled to ``max_seq_len`` so both attend over the same slots) the
static path must give exactly (``torch.equal``, float32) the eager logits, taps, committed K/V and GDN
states: decode, chain verify, tree verify and commit, for dense and hybrid targets. With padding (fewer
rows than the bucket, attention over the whole cache) the rounding may differ; generation must not.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import specdec as sd
from specdec.contracts import Tree, VerifyPlan
from specdec.models import StaticGraphs
from specdec.testing import tiny_hf_model

PREFIX = torch.tensor([[5, 9, 2, 7, 5, 9, 2, 7, 5, 11, 3]])  # 11 tokens: longer than any bucket, so prefilled eagerly
HYBRID_LAYERS = ("linear_attention", "full_attention", "linear_attention")
_HF: dict = {}


def _hf(family: str):
    if family not in _HF:
        kw = dict(num_layers=3, layer_types=HYBRID_LAYERS) if family == "qwen3_5_text" else {}
        _HF[family] = tiny_hf_model(family, seed=5, **kw)
    return _HF[family]


def _pair(family: str, rows: int):
    """(eager, static) targets with the same weights, the prefix committed, room for exactly ``rows`` more."""
    targets = []
    for static in (False, True):
        t = sd.load_target(_hf(family), dtype=torch.float32, device="cpu", max_seq_len=PREFIX.shape[1] + rows, progress=False)
        if static:
            t.enable_static_path((1, 4))
        t(PREFIX)
        t.commit(PREFIX.shape[1])
        targets.append(t)
    return targets


def _plans():
    root = torch.tensor([4])
    return {
        "decode": (1, VerifyPlan.chain(root, torch.zeros(0, dtype=torch.long), prefix_len=11), 1),
        "chain": (4, VerifyPlan.chain(root, torch.tensor([8, 15, 16]), prefix_len=11), 3),
        "tree": (
            4,
            VerifyPlan.for_tree(root, Tree(tokens=[8, 15, 16], parents=[-1, -1, 1]), prefix_len=11),
            torch.tensor([0, 2, 3]),
        ),
    }


def _state(target):
    kv = [c[:, :, : target.length].clone() for c in target.k_caches + target.v_caches]
    if isinstance(target, sd.HybridTarget):
        kv += [target.recurrent_states.clone(), target.conv_states.clone()]
    return kv


@pytest.mark.parametrize("family", ["qwen3", "qwen3_5_text"])
@pytest.mark.parametrize("step", ["decode", "chain", "tree"])
def test_static_path_equals_eager_forward_and_commit(family, step):
    rows, plan, accepted = _plans()[step]
    eager, static = _pair(family, rows)
    taps = (0, 2)
    a = eager.run_plan(plan, hidden_layers=taps)
    b = static.run_plan(plan, hidden_layers=taps)
    assert torch.equal(a.logits, b.logits)
    assert all(torch.equal(x, y) for x, y in zip(a.hidden, b.hidden))
    eager.commit(accepted)
    static.commit(accepted)
    assert eager.length == static.length == 11 + (accepted if isinstance(accepted, int) else accepted.numel())
    assert all(torch.equal(x, y) for x, y in zip(_state(eager), _state(static)))


def test_static_path_is_what_runs():
    """Guard for the test above: the static target really runs the fixed-shape body (it would pass vacuously otherwise)."""
    _, static = _pair("qwen3", 4)
    calls = []
    real = static.static_body
    static._graph_body = lambda *a, **k: calls.append(a[0].shape) or real(*a, **k)
    static.run_plan(_plans()["chain"][1])
    assert calls == [torch.Size([1, 4])]


@pytest.mark.parametrize("family", ["llama", "qwen3_5_text"])
def test_padded_static_path_generates_what_eager_ar_does(family):
    hf = _hf(family)
    eager = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=96, progress=False)
    static = sd.load_target(hf, dtype=torch.float32, device="cpu", max_seq_len=96, progress=False)
    static.enable_static_path((1, 2, 4, 8))
    want = sd.generate(eager, PREFIX, 30).tokens
    for drafter, verifier in (
        (sd.NGramDrafter(max_ngram=2), sd.ChainVerifier()),
        (sd.NGramDrafter(max_ngram=2, max_paths=3, depth=3), sd.TreeVerifier(budget=4)),  # trees through the buckets
    ):
        got = sd.generate(static, PREFIX, 30, drafter=drafter, verifier=verifier, num_draft_tokens=4)
        assert torch.equal(got.tokens, want)


def test_static_graphs_helper_runs_bodies_on_their_buffers():
    graphs = StaticGraphs("cpu", capture=False)
    buf = graphs.buffers(4, lambda: {"x": torch.zeros(4)})
    assert graphs.buffers(4, lambda: {"x": torch.ones(4)}) is buf  # made once per key
    buf["x"].copy_(torch.arange(4.0))
    graphs.set_length(7)
    assert torch.equal(graphs.run(4, lambda: buf["x"] + graphs.length), torch.tensor([7.0, 8.0, 9.0, 10.0]))
    with pytest.raises(ValueError, match="capture: CUDA graphs need a CUDA device"):
        StaticGraphs("cpu", capture=True)
    with pytest.raises(ValueError, match="buckets"):
        sd.load_target(_hf("llama"), device="cpu", max_seq_len=32, progress=False).enable_static_path((0, 4))


def test_replay_needs_a_captured_key():
    graphs = StaticGraphs("cpu", capture=False)
    graphs.run(4, lambda: torch.zeros(1))  # the static path runs bodies, it captures nothing
    with pytest.raises(ValueError, match="key: expected a key with a captured graph.*static path.*got 4"):
        graphs.replay(4)


def test_only_the_graphs_helper_captures_cuda_graphs():
    """Targets and drafters capture through :class:`StaticGraphs` alone: one warm-up/capture/pool policy."""
    root = Path(sd.__file__).resolve().parent
    helper = root / "models" / "graphs.py"
    capture = re.compile(r"\bcuda\.graph\(|\bCUDAGraph\(")
    assert capture.search(helper.read_text())  # the pattern finds the one capture there is
    others = sorted(
        f"{path.relative_to(root)}:{n}"
        for path in root.rglob("*.py")
        if path != helper
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if capture.search(line)
    )
    assert not others, f"CUDA graph capture outside specdec/models/graphs.py: {others}"
