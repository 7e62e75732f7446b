"""Weight views of the lean targets: the "q" view's weights, their swap in and out, and the targets' guards.

* ``q_view_weight``: the W12 8-bit view's values for plain weights, the same planes for W12 weights;
* ``WeightViews``: every ``nn.Linear`` weight swapped for the body only, the exact ``Parameter`` objects
  back afterwards (also when the body raises), tied weights sharing one view;
* dense and hybrid targets: a "q" forward differs from the exact one, cannot be committed, leaves no
  trace once discarded; the static path keys its buffers by view and gives the eager outputs;
* a W12 target's "q" view reads the same planes (no copy).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specdec as sd
from specdec.contracts import Tree, VerifyPlan
from specdec.formats import W12Tensor, convert
from specdec.models.weight_views import WEIGHT_VIEWS, WeightViews, q_view_weight
from specdec.testing import tiny_hf_model

PREFIX = torch.tensor([[5, 9, 2, 7, 5, 9, 2, 7, 5, 11, 3]])
FAMILIES = ["llama", "qwen3_5_text"]


def test_q_view_weight_of_a_float_weight_is_the_w12_view():
    w = torch.randn(6, 10, generator=torch.Generator().manual_seed(0))
    q = q_view_weight(w)
    assert q.dtype == torch.float32 and not isinstance(q, W12Tensor)
    assert torch.equal(q, W12Tensor.from_bf16(w.to(torch.bfloat16)).q_view().float())
    assert not torch.equal(q, w)
    wb = w.to(torch.bfloat16)
    qb = q_view_weight(wb)
    assert qb.dtype == torch.bfloat16 and torch.equal(qb, W12Tensor.from_bf16(wb).q_view())


def test_q_view_weight_of_a_w12_weight_shares_its_planes():
    w12 = W12Tensor.from_bf16(torch.randn(4, 32, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16))
    q = q_view_weight(w12)
    assert isinstance(q, W12Tensor) and q.linear_view == "q" and w12.linear_view == "exact"
    for name in W12Tensor._INNER:
        assert getattr(q, name).data_ptr() == getattr(w12, name).data_ptr(), name


@pytest.mark.parametrize("shape", [(3,), (2, 3, 4)])
def test_q_view_weight_rejects_a_non_matrix(shape):
    with pytest.raises(ValueError, match=r"weight: expected a 2-D \[N, K\] matrix, got shape"):
        q_view_weight(torch.zeros(shape))


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.a = nn.Linear(4, 4, bias=True)
        self.b = nn.Linear(4, 4, bias=False)
        self.tied = nn.Linear(4, 4, bias=False)
        self.tied.weight = self.b.weight
        self.norm = nn.LayerNorm(4)

    def forward(self, ids):
        h = self.norm(self.embed(ids))
        return self.tied(self.b(self.a(h)))


def test_weight_views_swap_only_linear_weights_and_restore_the_same_parameters():
    torch.manual_seed(0)
    toy = Toy()
    views = WeightViews(toy)
    exact = {name: p for name, p in toy.named_parameters(remove_duplicate=False)}
    ids = torch.tensor([1, 2, 3])
    want = toy(ids)
    with views.use("exact"):
        assert torch.equal(toy(ids), want)
    assert views.built == ()
    with views.use("q"):
        assert not torch.equal(toy(ids), want)
        inside = dict(toy.named_parameters(remove_duplicate=False))
        assert torch.equal(inside["a.weight"], q_view_weight(exact["a.weight"]))
        assert inside["tied.weight"] is inside["b.weight"]  # tied weights: one view
        for name in ("embed.weight", "a.bias", "norm.weight", "norm.bias"):
            assert inside[name] is exact[name], name
    after = dict(toy.named_parameters(remove_duplicate=False))
    assert all(after[name] is p for name, p in exact.items())
    assert views.built == ("q",)
    assert torch.equal(toy(ids), want)


def test_weight_views_restore_the_exact_weights_after_an_exception():
    toy = Toy()
    views = WeightViews(toy)
    exact = {name: p for name, p in toy.named_parameters(remove_duplicate=False)}
    with pytest.raises(KeyError, match="inside"):
        with views.use("q"):
            raise KeyError("inside")
    after = dict(toy.named_parameters(remove_duplicate=False))
    assert all(after[name] is p for name, p in exact.items())
    with views.use("q"):
        q_params = [sub.weight for sub in (toy.a, toy.b)]
    with views.use("q"):
        assert [toy.a.weight, toy.b.weight] == q_params  # built once, kept


def test_the_q_view_follows_weights_written_or_replaced_after_it_was_built():
    layer = nn.Sequential(nn.Linear(8, 4, bias=False), nn.Linear(4, 3, bias=False))
    views, x = WeightViews(layer), torch.randn(2, 8)

    def q_output():
        with views.use("q"):
            return layer(x)

    q_output()  # builds the view
    with torch.no_grad():
        layer[0].weight.mul_(2.0)  # written in place
    assert torch.equal(q_output(), q_of(layer, x))
    layer[1].weight = nn.Parameter(torch.randn(3, 4))  # replaced
    assert torch.equal(q_output(), q_of(layer, x))


def q_of(layer: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """The Q view's output built from scratch (a fresh WeightViews)."""
    with WeightViews(layer).use("q"):
        return layer(x)


def test_weight_views_reject_an_unknown_view():
    with pytest.raises(ValueError, match=r"view: expected one of \('exact', 'q'\), got 'int4'"):
        with WeightViews(Toy()).use("int4"):
            pass


_HF: dict = {}


def fresh_target(family: str, max_seq_len: int = 64, dtype=torch.float32):
    if family not in _HF:
        _HF[family] = tiny_hf_model(family, seed=5)
    return sd.load_target(_HF[family], dtype=dtype, device="cpu", max_seq_len=max_seq_len, progress=False)


def tree_plan(prefix_len: int) -> VerifyPlan:
    return VerifyPlan.for_tree(torch.tensor([4]), Tree(tokens=[7, 8, 9], parents=[-1, -1, 0]), prefix_len=prefix_len)


@pytest.mark.parametrize("family", FAMILIES)
def test_q_forward_cannot_be_committed_and_leaves_no_trace(family):
    target = fresh_target(family)
    assert target.weight_views == WEIGHT_VIEWS
    target(PREFIX)
    target.commit(PREFIX.shape[1])
    n = target.length
    exact = target.run_plan(tree_plan(n)).logits
    target.discard()
    q = target.run_plan(tree_plan(n), view="q").logits
    assert not torch.equal(q, exact)
    with pytest.raises(RuntimeError, match="'q' weight view"):
        target.commit(2)
    with pytest.raises(RuntimeError, match="'q' weight view"):
        target.commit(torch.tensor([0, 1]))
    assert target.length == n
    target.discard()
    again = target.run_plan(tree_plan(n)).logits
    assert torch.equal(again, exact)
    target.commit(torch.tensor([0, 1]))
    assert target.length == n + 2
    # the same rows committed by a target that never ran the "q" view: the same cache, bit for bit
    reference = fresh_target(family)
    reference(PREFIX)
    reference.commit(PREFIX.shape[1])
    reference.run_plan(tree_plan(n))
    reference.commit(torch.tensor([0, 1]))
    assert torch.equal(target(torch.tensor([[3]])).logits, reference(torch.tensor([[3]])).logits)


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_rejects_an_unknown_view(family):
    target = fresh_target(family)
    with pytest.raises(ValueError, match=r"view: expected one of \('exact', 'q'\)"):
        target(PREFIX, view="int4")
    with pytest.raises(ValueError, match=r"view: expected one of \('exact', 'q'\)"):
        target.run_plan(tree_plan(0), view="Q")


@pytest.mark.parametrize("family", FAMILIES)
def test_static_path_keys_by_view_and_gives_the_eager_outputs(family):
    rows = 4  # = the bucket, and the cache is full: the static and eager forwards attend over the same slots
    outs = {}
    for static in (False, True):
        target = fresh_target(family, max_seq_len=PREFIX.shape[1] + rows)
        if static:
            target.enable_static_path((1, rows))
            run, run_keys = target._graphs.run, []
            target._graphs.run = lambda key, body: run_keys.append(key) or run(key, body)
        target(PREFIX)
        target.commit(PREFIX.shape[1])
        plan = tree_plan(target.length)
        for view in ("exact", "q", "exact"):
            out = target.run_plan(plan, view=view).logits
            target.discard()
            outs.setdefault((static, view), out)
            assert torch.equal(out, outs[(static, view)])
        if static:
            # one set of static buffers (one CUDA graph) per view
            assert {key[-1] for key in run_keys} == {"exact", "q"}
    assert not torch.equal(outs[(True, "q")], outs[(True, "exact")])
    assert torch.equal(outs[(True, "exact")], outs[(False, "exact")])
    assert torch.equal(outs[(True, "q")], outs[(False, "q")])


def test_w12_target_q_view_reads_the_same_planes():
    target = fresh_target("llama", dtype=torch.bfloat16)
    convert(target)
    exact = {name: m.weight for name, m in target.named_modules() if isinstance(m, nn.Linear)}
    assert exact and all(isinstance(w, W12Tensor) for w in exact.values())
    with target._views.use("q"):
        for name, m in target.named_modules():
            if isinstance(m, nn.Linear):
                w = m.weight
                assert isinstance(w, W12Tensor) and w.linear_view == "q", name
                for inner in W12Tensor._INNER:
                    assert getattr(w, inner).data_ptr() == getattr(exact[name], inner).data_ptr(), (name, inner)
    target(PREFIX)
    target.commit(PREFIX.shape[1])
    plan = tree_plan(target.length)
    exact_logits = target.run_plan(plan).logits
    target.discard()
    q_logits = target.run_plan(plan, view="q").logits
    target.discard()
    assert not torch.equal(q_logits, exact_logits)
    assert all(m.weight is exact[name] for name, m in target.named_modules() if isinstance(m, nn.Linear))
