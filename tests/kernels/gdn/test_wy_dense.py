"""Dense tree-WY kernel (one tile holds the whole tree): against the float64 per-path reference.

* hostile trees (chains deeper than one squaring covers, stars, forests, padded batches), grouped
  heads, dk/dv that are not powers of two, N = 1, fp32 and bf16 inputs, with and without refinement;
* the blocked kernel still behind ``method="wy"`` for trees above the dense limit;
* mutation tests: decay left out of the mask, mask applied after the exp, causal instead of
  ancestor topology, one squaring too few in the inverse (and the refinement step repairing it).
"""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from test_gdn_tree import assert_matches, make_inputs, make_parents

from specdec.kernels import gdn
from specdec.kernels.gdn import wy as wy_mod


def _run_dense(q, k, v, g, beta, parents, s0, *, refine=True, use_qk_l2norm=True, scale=None, block_v=64):
    meta = parents if isinstance(parents, gdn.TreeMeta) else gdn.build_tree_meta(parents)
    batched = q.ndim == 4
    qb, kb, vb, gb, bb, sb = (t if batched else t[None] for t in (q, k, v, g, beta, s0))
    out = torch.full(vb.shape, float("nan"), dtype=q.dtype)
    sc = q.shape[-1] ** -0.5 if scale is None else scale
    wy_mod.gdn_tree_wy_dense(
        *(t.contiguous() for t in (qb, kb, vb, gb, bb)),
        meta,
        sb.contiguous(),
        out,
        use_qk_l2norm=use_qk_l2norm,
        scale=sc,
        refine=refine,
        block_v=block_v,
    )
    return out if batched else out[0]


DENSE_CASES = [
    # kind, N, Hk, Hv, dk, dv
    ("chain", 19, 1, 1, 16, 16),  # depth 18: four squarings
    ("star", 9, 1, 2, 16, 16),  # depth 1: no squaring
    ("forest", 11, 1, 3, 12, 20),  # dk, dv not powers of two
    ("deep", 17, 2, 4, 16, 16),  # BN = 32, grouped heads
    ("random", 6, 1, 2, 16, 16),
    ("best_first", 13, 2, 2, 24, 16),
    ("chain", 1, 1, 1, 16, 16),
]


@pytest.mark.parametrize("refine", [True, False])
@pytest.mark.parametrize("case", DENSE_CASES, ids=lambda c: "{}-N{}-Hk{}-Hv{}-dk{}-dv{}".format(*c))
def test_dense_matches_naive(case, refine):
    kind, n, hk, hv, dk, dv = case
    parents = make_parents(kind, n, seed=n + hv)
    q, k, v, g, beta, s0 = make_inputs(n, hk, hv, dk, dv, seed=3 * n + hk)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    assert_matches(_run_dense(q, k, v, g, beta, parents, s0, refine=refine), ref)


def test_dense_dv_tiles_no_l2norm_and_scale():
    # two dv tiles (block_v 16 < dv 32) and the un-normalised branch with an explicit scale
    n = 10
    parents = make_parents("random", n, seed=4)
    q, k, v, g, beta, s0 = make_inputs(n, 1, 2, 16, 32, seed=8)
    q, k = 0.3 * q, 0.3 * k  # keeps the unnormalised delta rule stable
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, use_qk_l2norm=False, scale=0.7, dtype=torch.float64)
    out = _run_dense(q, k, v, g, beta, parents, s0, use_qk_l2norm=False, scale=0.7, block_v=16)
    assert_matches(out, ref)


def test_dense_bf16_batched_ragged_and_public_api():
    n = 7
    parents = torch.stack([make_parents("best_first", n, 1), torch.tensor([-1, 0, 1, 0, -1, -1, -1])])
    q, k, v, g, beta, s0 = make_inputs(n, 1, 2, 16, 16, seed=5, batch=2, dtype=torch.bfloat16)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    out = gdn.gdn_tree(q, k, v, g, beta, parents, s0, method="wy", backend="triton")  # the dense kernel
    assert out.dtype == torch.bfloat16
    assert_matches(out, ref, tol=1e-2)
    # fp32 outputs from bf16 inputs: only the kernel's own error
    o32 = torch.empty(v.shape, dtype=torch.float32)
    meta = gdn.build_tree_meta(parents)
    wy_mod.gdn_tree_wy_dense(q, k, v, g, beta, meta, s0, o32, use_qk_l2norm=True, scale=16**-0.5)
    assert_matches(o32, gdn.naive_gdn_tree(q.float(), k.float(), v.float(), g, beta, parents, s0, dtype=torch.float64))


def test_wy_above_dense_limit_uses_blocked_kernel(monkeypatch):
    # a tree above the dense limit goes to the blocked kernel (limit lowered to keep this small)
    monkeypatch.setattr(wy_mod, "DENSE_MAX_NODES", 8)
    calls = []
    blocked = wy_mod.gdn_tree_wy
    monkeypatch.setattr(wy_mod, "gdn_tree_wy", lambda *a, **kw: calls.append(1) or blocked(*a, **kw))
    n = 18
    parents = make_parents("best_first", n, seed=3)
    q, k, v, g, beta, s0 = make_inputs(n, 1, 1, 16, 16, seed=6)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    assert_matches(gdn.gdn_tree(q, k, v, g, beta, parents, s0, method="wy", backend="triton"), ref)
    assert calls == [1]


def test_dense_rejects_too_many_nodes():
    n = wy_mod.DENSE_MAX_NODES + 1
    q, k, v, g, beta, s0 = make_inputs(n, 1, 1, 16, 16, seed=0)
    meta = gdn.build_tree_meta(torch.arange(n) - 1)
    with pytest.raises(ValueError, match="at most"):
        wy_mod.gdn_tree_wy_dense(
            q[None],
            k[None],
            v[None],
            g[None],
            beta[None],
            meta,
            s0[None],
            torch.empty(1, n, 1, 16),
            use_qk_l2norm=True,
            scale=0.25,
        )
    with pytest.raises(ValueError, match="precision"):
        wy_mod.gdn_tree_wy_dense(
            q[None, :4],
            k[None, :4],
            v[None, :4],
            g[None, :4],
            beta[None, :4],
            gdn.build_tree_meta(torch.arange(4) - 1),
            s0[None],
            torch.empty(1, 4, 1, 16),
            use_qk_l2norm=True,
            scale=0.25,
            precision="fp64",
        )


# mutation tests: each guard, broken on purpose, must be caught by the same comparison
@triton.jit
def _decay_without_exp(gam_i, gam_j, anc):
    return tl.where(anc, 1.0, 0.0) + 0.0 * gam_i[:, None] + 0.0 * gam_j[None, :]


@triton.jit
def _decay_mask_after_exp(gam_i, gam_j, anc):
    return tl.exp(gam_i[:, None] - gam_j[None, :]) * anc.to(tl.float32)


@triton.jit
def _inverse_one_squaring_short(a, eye, max_depth, NSQ: tl.constexpr, PRECISION: tl.constexpr):
    steps = 0
    for s in tl.static_range(1, NSQ):
        steps += (max_depth >= (1 << s)).to(tl.int32)
    x = -a
    t = eye + x
    for _ in range(steps - 1):
        x = tl.dot(x, x, input_precision=PRECISION)
        t = t + tl.dot(t, x, input_precision=PRECISION)
    return t


def _forest_problem():
    parents = make_parents("forest", 10, seed=2)
    q, k, v, g, beta, s0 = make_inputs(10, 1, 2, 16, 16, seed=9)
    return parents, (q, k, v, g, beta, s0)


def test_mutation_dense_decay_left_out(monkeypatch):
    parents, args = _forest_problem()
    ref = gdn.naive_gdn_tree(*args[:5], parents, args[5], dtype=torch.float64)
    assert_matches(_run_dense(*args[:5], parents, args[5]), ref)
    monkeypatch.setattr(wy_mod, "_tree_decay", _decay_without_exp)
    with pytest.raises(AssertionError):
        assert_matches(_run_dense(*args[:5], parents, args[5]), ref)


def test_mutation_dense_mask_after_exp():
    # strong decays: across branches gamma_i - gamma_j reaches +100, exp overflows, inf * 0 = NaN
    parents = torch.tensor([-1, 0, 1, 2, 0, 4, -1, 6])
    q, k, v, g, beta, s0 = make_inputs(8, 1, 1, 16, 16, seed=1)
    g = torch.full_like(g, -50.0)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    assert_matches(_run_dense(q, k, v, g, beta, parents, s0), ref)
    mp = pytest.MonkeyPatch()
    try:
        mp.setattr(wy_mod, "_tree_decay", _decay_mask_after_exp)
        with pytest.raises(AssertionError, match="non-finite"):
            assert_matches(_run_dense(q, k, v, g, beta, parents, s0), ref)
    finally:
        mp.undo()


def test_mutation_dense_causal_topology():
    parents, args = _forest_problem()
    ref = gdn.naive_gdn_tree(*args[:5], parents, args[5], dtype=torch.float64)
    causal = gdn.build_tree_meta(torch.arange(parents.shape[0]) - 1)
    with pytest.raises(AssertionError):
        assert_matches(_run_dense(*args[:5], causal, args[5]), ref)


def test_mutation_one_squaring_short_and_refinement_repairs_it(monkeypatch):
    # chain of depth 11: the series needs (-A)^m up to m = 11, i.e. squarings for 2, 4 and 8.
    # One fewer stops at m = 7 and must fail; one refinement step squares the truncation
    # (I - T (I + A) = (-A)^8 -> its square = 0 for depth 11), so with refinement it is exact again
    n = 12
    parents = make_parents("chain", n, seed=0)
    q, k, v, g, beta, s0 = make_inputs(n, 1, 1, 16, 16, seed=2)
    # weak decay, large beta, nearly parallel keys: A_ij ~ 1, so its high powers matter
    g = 0.01 * g
    beta = 0.5 + 0.5 * beta
    k = k[:1] + 0.3 * k
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    assert_matches(_run_dense(q, k, v, g, beta, parents, s0, refine=False), ref)
    monkeypatch.setattr(wy_mod, "_unit_lower_inverse", _inverse_one_squaring_short)
    with pytest.raises(AssertionError):
        assert_matches(_run_dense(q, k, v, g, beta, parents, s0, refine=False), ref)
    assert_matches(_run_dense(q, k, v, g, beta, parents, s0, refine=True), ref)
