"""GDN state recompute along tree paths: path / WY kernels and the tree conv against references.

* every node's output and the committed state of the Triton path and WY kernels (and the dense
  torch WY) against the float64 per-path recurrence, on hostile trees and grouped heads;
* the reference itself against transformers' torch_recurrent_gated_delta_rule / causal conv on
  chains (a chain-shaped tree is the chain recurrence, bit for bit in float32);
* mutation tests: decay left out of the ancestor mask, causal instead of ancestor mask, a conv
  window in index order instead of along ancestors: the same comparisons must fail;
* bad input raises before any kernel runs.
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3_next import modeling_qwen3_next as hf

from specdec.kernels import gdn
from specdec.kernels.gdn import conv as conv_mod
from specdec.kernels.gdn import wy as wy_mod

KINDS = ["chain", "star", "forest", "deep", "random", "best_first"]


def make_parents(kind: str, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)

    def randint(lo: int, hi: int) -> int:  # inclusive
        return int(torch.randint(lo, hi + 1, (1,), generator=gen))

    if kind == "chain":
        parents = list(range(-1, n - 1))
    elif kind == "star":
        parents = [-1] + [0] * (n - 1)
    elif kind == "forest":
        roots = min(n, max(2, n // 3))
        parents = [-1] * roots + [randint(0, i - 1) for i in range(roots, n)]
    elif kind == "deep":
        # a long spine with twigs hanging off its start: deep and unbalanced
        spine = max(1, (2 * n) // 3)
        parents = list(range(-1, spine - 1)) + [randint(0, max(0, spine // 3)) for _ in range(n - spine)]
    elif kind == "random":
        parents = [randint(-1, i - 1) for i in range(n)]
    elif kind == "best_first":
        # children of recent nodes, as a best-first expansion produces
        parents = [-1] + [randint(max(0, i - 3), i - 1) for i in range(1, n)]
    else:
        raise AssertionError(kind)
    return torch.tensor(parents, dtype=torch.int64)


def make_inputs(n: int, hk: int, hv: int, dk: int, dv: int, seed: int, batch: int | None = None, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    lead = (n,) if batch is None else (batch, n)

    def rnd(*shape):
        return torch.randn(*shape, generator=gen)

    q = rnd(*lead, hk, dk).to(dtype)
    k = rnd(*lead, hk, dk).to(dtype)
    v = rnd(*lead, hv, dv).to(dtype)
    # log decays spread over [-3, 0] so off-path gamma differences are large
    g = -3.0 * torch.rand(*lead, hv, generator=gen)
    beta = torch.rand(*lead, hv, generator=gen)
    s0 = rnd(*((batch,) if batch is not None else ()), hv, dk, dv)
    return q, k, v, g, beta, s0


def assert_matches(actual: torch.Tensor, expected: torch.Tensor, tol: float = 2e-5) -> None:
    """Max abs error relative to the reference's scale; fp32 kernels land near 1e-6."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert torch.isfinite(actual).all(), "non-finite output"
    err = (actual.double() - expected.double()).abs().max().item()
    scale = max(1.0, expected.double().abs().max().item())
    assert err <= tol * scale, f"max abs error {err:.3e} > {tol:.1e} * {scale:.2f}"


def some_path(parents: torch.Tensor, leaf: int) -> list[int]:
    path = [leaf]
    while int(parents[path[-1]]) >= 0:
        path.append(int(parents[path[-1]]))
    return path[::-1]


@pytest.mark.parametrize("kind", KINDS)
def test_tree_meta_covers_every_node_once(kind):
    for n in (1, 2, 7, 13):
        parents = make_parents(kind, n, seed=n)
        meta = gdn.build_tree_meta(parents)
        depth = [len(some_path(parents, i)) - 1 for i in range(n)]
        assert meta.depth[0].tolist() == depth
        for i in range(n):
            path = some_path(parents, i)
            assert meta.paths[0, i, : len(path)].tolist() == path
            assert (meta.paths[0, i, len(path) :] == -1).all()
            assert meta.ancestors[0, i].nonzero().flatten().tolist() == sorted(path)
        # each node is emitted by exactly one leaf program, at its own depth on that leaf's path
        emitted = []
        for slot in range(n):
            leaf = int(meta.leaf_slots[0, slot])
            if leaf < 0:
                continue
            path = some_path(parents, leaf)
            emitted += path[int(meta.emit_from[0, slot]) :]
        assert sorted(emitted) == list(range(n))


@pytest.mark.parametrize("hk,hv", [(1, 1), (2, 4), (1, 3), (2, 6)], ids=lambda x: str(x))
def test_naive_chain_equals_transformers_recurrence(hk, hv):
    n, dk, dv = 11, 16, 8
    q, k, v, g, beta, s0 = make_inputs(n, hk, hv, dk, dv, seed=hv)
    o_ref, s_ref = hf.torch_recurrent_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], s0[None], True, True)
    chain = make_parents("chain", n, 0)
    o = gdn.naive_gdn_tree(q, k, v, g, beta, chain, s0)
    assert torch.equal(o, o_ref[0])
    s = gdn.naive_gdn_tree_commit(k, v, g, beta, list(range(n)), s0)
    assert torch.equal(s, s_ref[0])
    # every root-to-leaf path of a tree is the chain recurrence on that path's tokens
    parents = make_parents("random", n, seed=3)
    o_tree, states = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, return_states=True)
    for leaf in (n - 1, n - 2):
        path = torch.tensor(some_path(parents, leaf))
        o_p, s_p = hf.torch_recurrent_gated_delta_rule(
            q[None, path], k[None, path], v[None, path], g[None, path], beta[None, path], s0[None], True, True
        )
        assert torch.equal(o_tree[path], o_p[0])
        assert torch.equal(states[leaf], s_p[0])
        assert torch.equal(gdn.gdn_tree_commit(k, v, g, beta, path, s0, backend="torch"), s_p[0])


def test_naive_padding_nodes_leave_state_unchanged():
    # beta = 0 and g = 0: the node changes nothing, as pad nodes must
    q, k, v, g, beta, s0 = make_inputs(3, 1, 2, 8, 8, seed=1)
    g[1], beta[1] = 0.0, 0.0
    _, states = gdn.naive_gdn_tree(q, k, v, g, beta, torch.tensor([-1, 0, 1]), s0, return_states=True)
    assert torch.equal(states[1], states[0])


TRITON_CASES = [
    # kind, n, hk, hv, dk, dv
    ("chain", 9, 1, 1, 16, 16),
    ("star", 7, 1, 2, 16, 16),
    ("forest", 11, 1, 3, 16, 16),
    ("deep", 12, 2, 2, 16, 16),
    ("random", 5, 1, 3, 16, 32),
    ("best_first", 12, 1, 2, 24, 20),
    ("random", 17, 1, 1, 16, 16),
]


def _case_id(case):
    return "{}-N{}-Hk{}-Hv{}-dk{}-dv{}".format(*case)


@pytest.mark.parametrize("method", ["path", "wy"])
@pytest.mark.parametrize("case", TRITON_CASES, ids=_case_id)
def test_triton_matches_naive(method, case):
    kind, n, hk, hv, dk, dv = case
    parents = make_parents(kind, n, seed=n + hv)
    q, k, v, g, beta, s0 = make_inputs(n, hk, hv, dk, dv, seed=n * 7 + hv)
    ref, states = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64, return_states=True)
    out = torch.full_like(v, float("nan"))
    o = gdn.gdn_tree(q, k, v, g, beta, parents, s0, method=method, backend="triton", out=out)
    assert o is out
    assert_matches(o, ref)
    if method == "path":
        leaf = n - 1
        path = some_path(parents, leaf)
        s = gdn.gdn_tree_commit(k, v, g, beta, path, s0, parents=parents, backend="triton")
        assert_matches(s, states[leaf])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("hk,hv", [(1, 1), (2, 4), (1, 3)], ids=lambda x: str(x))
def test_torch_wy_matches_naive(kind, hk, hv):
    n = 13
    parents = make_parents(kind, n, seed=hv)
    q, k, v, g, beta, s0 = make_inputs(n, hk, hv, 12, 10, seed=hk + hv)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    assert_matches(gdn.gdn_tree(q, k, v, g, beta, parents, s0, method="wy", backend="torch"), ref)
    args64 = [t.double() for t in (q, k, v, g, beta)]
    ref64 = gdn.naive_gdn_tree(*args64, parents, s0.double(), dtype=torch.float64)
    o64 = gdn.gdn_tree(*args64, parents, s0.double(), method="wy", backend="torch")
    assert_matches(o64, ref64, tol=1e-12)


@pytest.mark.parametrize("method", ["path", "wy"])
def test_triton_batched_ragged_trees(method):
    # two requests with different trees in one call; the second is padded with extra roots
    n = 7
    parents = torch.stack([make_parents("random", n, 1), torch.tensor([-1, 0, 1, 0, -1, -1, -1])])
    q, k, v, g, beta, s0 = make_inputs(n, 1, 2, 16, 16, seed=5, batch=2)
    ref, states = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64, return_states=True)
    meta = gdn.build_tree_meta(parents)
    assert_matches(gdn.gdn_tree(q, k, v, g, beta, meta, s0, method=method, backend="triton"), ref)
    for b in range(2):
        assert_matches(gdn.gdn_tree(q[b], k[b], v[b], g[b], beta[b], parents[b], s0[b], method=method, backend="triton"), ref[b])
    if method == "path":
        p0 = some_path(parents[0], 6)
        width = max(len(p0), 3) + 1
        paths = torch.tensor([p0 + [-1] * (width - len(p0)), [0, 1, 2] + [-1] * (width - 3)])
        new = s0.clone()
        gdn.gdn_tree_commit(k, v, g, beta, paths, new, parents=parents, backend="triton", out=new)
        for b in range(2):
            last = int(paths[b][paths[b] >= 0][-1])
            assert_matches(new[b], states[b, last])


def test_triton_bf16_inputs_and_commit_edge_cases():
    n = 6
    parents = make_parents("random", n, seed=2)
    q, k, v, g, beta, s0 = make_inputs(n, 1, 2, 16, 16, seed=4, dtype=torch.bfloat16)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    for method in ("path", "wy"):
        o = gdn.gdn_tree(q, k, v, g, beta, parents, s0, method=method, backend="triton")
        assert o.dtype == torch.bfloat16
        assert_matches(o, ref, tol=1e-2)
    # empty accepted path: the state is unchanged, bit for bit
    assert torch.equal(gdn.gdn_tree_commit(k, v, g, beta, [], s0, backend="triton"), s0)
    assert torch.equal(gdn.gdn_tree_commit(k, v, g, beta, [], s0, backend="torch"), s0)


def conv_inputs(n, c, s, w, seed, bias=True):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, c, generator=gen)
    state = torch.randn(c, s, generator=gen)
    weight = torch.randn(c, w, generator=gen)
    b = torch.randn(c, generator=gen) if bias else None
    return x, state, weight, b


def per_path_conv(x, parents, state, weight, bias, activation="silu"):
    """Independent reference: transformers' conv update on each node's materialised path."""
    out = []
    for i in range(x.shape[0]):
        path = some_path(parents, i)
        st = state[None].clone()
        y = hf.causal_conv1d_update(x[path].t()[None], st, weight, bias, activation)
        out.append(y[0, :, -1])
    return torch.stack(out)


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("kind", ["chain", "random", "forest", "deep"])
def test_tree_conv_matches_per_path_conv(backend, kind):
    n, c, w = 9, 20, 4
    parents = make_parents(kind, n, seed=11)
    for s in (w - 1, w):
        x, state, weight, bias = conv_inputs(n, c, s, w, seed=s)
        ref = per_path_conv(x, parents, state, weight, bias)
        y = gdn.tree_causal_conv(x, parents, state, weight, bias, "silu", backend=backend)
        assert_matches(y, ref, tol=1e-6)
    if kind == "chain":
        # a chain is transformers' multi-token conv with the cache prepended
        seq = torch.cat([state, x.t()], dim=1)[None]
        y_hf = hf.causal_conv1d_fn(seq, weight, bias, activation="silu")[0, :, -n:].t()
        assert_matches(gdn.tree_causal_conv(x, parents, state, weight, bias, backend=backend), y_hf, tol=1e-6)


def test_conv_state_commit_equals_transformers_update():
    n, c, w = 8, 6, 4
    parents = make_parents("random", n, seed=1)
    for s in (w - 1, w, w + 2):
        x, state, weight, _ = conv_inputs(n, c, s, w, seed=s, bias=False)
        for leaf in range(n):
            path = some_path(parents, leaf)
            st = state[None].clone()
            hf.causal_conv1d_update(x[path].t()[None], st, weight, None, "silu")
            assert torch.equal(gdn.conv_state_commit(x, path, state), st[0])
        assert torch.equal(gdn.conv_state_commit(x, [], state), state)
    # batched, padded paths
    xb = torch.stack([x, x.flip(0)])
    sb = torch.stack([state, state + 1])
    new = gdn.conv_state_commit(xb, torch.tensor([[0, 1, 2], [3, -1, -1]]), sb)
    assert torch.equal(new[0], gdn.conv_state_commit(x, [0, 1, 2], state))
    assert torch.equal(new[1], gdn.conv_state_commit(x.flip(0), [3], state + 1))


# mutation tests: each guard, broken on purpose, must be caught by the same comparisons
def _tree_problem(n=10, hv=2):
    parents = make_parents("forest", n, seed=2)
    q, k, v, g, beta, s0 = make_inputs(n, 1, hv, 16, 16, seed=9)
    ref = gdn.naive_gdn_tree(q, k, v, g, beta, parents, s0, dtype=torch.float64)
    return parents, (q, k, v, g, beta), s0, ref


def _causal_meta(n: int) -> gdn.TreeMeta:
    # the chain's topology: every earlier node counts as an ancestor
    return gdn.build_tree_meta(torch.arange(n) - 1)


def test_mutation_decay_left_out_of_ancestor_mask(monkeypatch):
    parents, (q, k, v, g, beta), s0, ref = _tree_problem()
    assert_matches(gdn.gdn_tree(q, k, v, g, beta, parents, s0, method="wy", backend="torch"), ref)
    monkeypatch.setattr(
        wy_mod, "_path_decay", lambda gamma, anc: anc[:, None].to(gamma.dtype).expand(*gamma.shape, anc.shape[-1])
    )
    with pytest.raises(AssertionError):
        assert_matches(gdn.gdn_tree(q, k, v, g, beta, parents, s0, method="wy", backend="torch"), ref)


def test_mutation_causal_instead_of_ancestor_mask(monkeypatch):
    parents, (q, k, v, g, beta), s0, ref = _tree_problem()
    n = parents.shape[0]
    causal = _causal_meta(n)
    # torch WY with the causal mask
    monkeypatch.setattr(wy_mod, "_ancestor_mask", lambda meta: causal.ancestors.bool())
    with pytest.raises(AssertionError):
        assert_matches(gdn.gdn_tree(q, k, v, g, beta, parents, s0, method="wy", backend="torch"), ref)
    monkeypatch.undo()
    # Triton kernels fed the causal topology
    for method in ("wy", "path"):
        with pytest.raises(AssertionError):
            assert_matches(gdn.gdn_tree(q, k, v, g, beta, causal, s0, method=method, backend="triton"), ref)


def test_mutation_conv_window_not_following_ancestors(monkeypatch):
    n, c, w = 9, 12, 4
    parents = make_parents("random", n, seed=11)
    x, state, weight, bias = conv_inputs(n, c, w, w, seed=3)
    ref = per_path_conv(x, parents, state, weight, bias)
    index_order = conv_mod._tap_index(torch.arange(n)[None] - 1, w)
    monkeypatch.setattr(conv_mod, "_tap_index", lambda par, width: index_order)
    with pytest.raises(AssertionError):
        assert_matches(gdn.tree_causal_conv(x, parents, state, weight, bias, backend="torch"), ref, tol=1e-6)
    monkeypatch.undo()
    with pytest.raises(AssertionError):
        assert_matches(gdn.tree_causal_conv(x, torch.arange(n) - 1, state, weight, bias, backend="triton"), ref, tol=1e-6)


def test_mutation_grouped_heads_convention():
    # value head h must read key head h // (Hv // Hk); h % Hk is a plausible bug and must fail
    n, hk, hv = 5, 2, 4
    q, k, v, g, beta, s0 = make_inputs(n, hk, hv, 16, 16, seed=8)
    chain = make_parents("chain", n, 0)
    o_ref, _ = hf.torch_recurrent_gated_delta_rule(q[None], k[None], v[None], g[None], beta[None], s0[None], True, True)
    assert_matches(gdn.gdn_tree(q, k, v, g, beta, chain, s0, method="path", backend="triton"), o_ref[0])
    modulo = torch.tensor([h % hk for h in range(hv)])
    wrong = gdn.naive_gdn_tree(q[:, modulo], k[:, modulo], v, g, beta, chain, s0)
    with pytest.raises(AssertionError):
        assert_matches(wrong, o_ref[0])


def test_bad_input_raises_clear_errors():
    n = 4
    q, k, v, g, beta, s0 = make_inputs(n, 1, 2, 8, 8, seed=0)
    par = torch.tensor([-1, 0, 1, 1])

    def call(**kw):
        args = dict(q=q, k=k, v=v, g=g, beta=beta, parents=par, initial_state=s0)
        args.update(kw)
        return gdn.gdn_tree(**args, backend="torch")

    with pytest.raises(ValueError, match=r"q: expected shape \(4, 1, 8\)"):
        call(q=q[:, :, :4])
    with pytest.raises(ValueError, match="v: expected shape"):
        call(v=v[:3])
    with pytest.raises(ValueError, match="g: expected shape"):
        call(g=g[:, :1])
    with pytest.raises(ValueError, match="beta: expected shape"):
        call(beta=beta[None])
    with pytest.raises(ValueError, match="initial_state: expected shape"):
        call(initial_state=s0[:, :4])
    with pytest.raises(ValueError, match="multiple of Hk"):
        q2, k2 = torch.randn(n, 3, 8), torch.randn(n, 3, 8)
        call(q=q2, k=k2, initial_state=s0)
    with pytest.raises(TypeError, match="q: expected the dtype of k"):
        call(q=q.half())
    with pytest.raises(TypeError, match="v: expected the dtype of k"):
        call(v=v.double())
    with pytest.raises(TypeError, match="initial_state: expected torch.float32"):
        call(initial_state=s0.half())
    with pytest.raises(TypeError, match="g: expected a floating dtype"):
        call(g=g.long())
    with pytest.raises(ValueError, match=r"parents: expected topological order .* parents\[2\] = 2"):
        call(parents=torch.tensor([-1, 0, 2, 1]))
    with pytest.raises(ValueError, match=r"parents\[0\] = -2"):
        call(parents=torch.tensor([-2, 0, 1, 1]))
    with pytest.raises(ValueError, match=r"parents: expected shape \[4\]"):
        call(parents=torch.tensor([-1, 0, 1]))
    with pytest.raises(TypeError, match="parents: expected an integer dtype"):
        call(parents=par.float())
    with pytest.raises(ValueError, match="method"):
        gdn.gdn_tree(q, k, v, g, beta, par, s0, method="chunk")
    with pytest.raises(ValueError, match="backend"):
        gdn.gdn_tree(q, k, v, g, beta, par, s0, backend="cuda")
    with pytest.raises(TypeError, match="initial_state: the Triton kernels take torch.float32"):
        gdn.gdn_tree(q, k, v, g, beta, par, s0.double(), backend="triton")
    # commit paths
    with pytest.raises(ValueError, match="path: expected node indices in"):
        gdn.gdn_tree_commit(k, v, g, beta, [0, 4], s0)
    with pytest.raises(ValueError, match="strictly increasing"):
        gdn.gdn_tree_commit(k, v, g, beta, [1, 0], s0)
    with pytest.raises(ValueError, match="root-to-node path"):
        gdn.gdn_tree_commit(k, v, g, beta, [0, 2, 3], s0, parents=par, backend="triton")
    with pytest.raises(ValueError, match="padding only after"):
        gdn.gdn_tree_commit(k[None], v[None], g[None], beta[None], torch.tensor([[-1, 0]]), s0[None])
    # conv
    x, state, weight, _ = conv_inputs(n, 6, 3, 4, seed=0, bias=False)
    with pytest.raises(ValueError, match="weight: expected shape"):
        gdn.tree_causal_conv(x, par, state, weight[:5])
    with pytest.raises(ValueError, match="conv_state: expected shape"):
        gdn.tree_causal_conv(x, par, state[:, :2], weight)
    with pytest.raises(ValueError, match="parents: expected shape"):
        gdn.tree_causal_conv(x, par[:3], state, weight)
    with pytest.raises(ValueError, match="activation"):
        gdn.tree_causal_conv(x, par, state, weight, activation="gelu")
    with pytest.raises(ValueError, match="parents: expected topological order"):
        gdn.tree_causal_conv(x, torch.tensor([0, 0, 1, 1]), state, weight)
    for name, args in (("conv_state", (x, par, state.to("meta"), weight)), ("weight", (x, par, state, weight.to("meta")))):
        with pytest.raises(ValueError, match=rf"{name}: expected device cpu \(the device of x\), got meta"):
            gdn.tree_causal_conv(*args)


def test_tree_causal_conv_takes_any_strides_and_refuses_a_state_of_another_dtype():
    """A transposed x and a strided bias: the Triton kernel writes and reads them as the reference does."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 5, generator=g).t()  # [N = 5, C = 6], dense but transposed
    xb = torch.randn(2, 6, 5, generator=g).transpose(1, 2)  # [B, N, C] from [B, C, N]
    par = torch.tensor([-1, 0, 0, 1, -1])
    state, weight = torch.randn(6, 4, generator=g), torch.randn(6, 4, generator=g)
    bias = torch.randn(12, generator=g)[::2]
    for inputs, parents, st in ((x, par, state), (xb, torch.stack([par, par]), torch.stack([state, state]))):
        ref = gdn.tree_causal_conv(inputs, parents, st, weight, bias, backend="torch")
        assert_matches(gdn.tree_causal_conv(inputs, parents, st, weight, bias, backend="triton"), ref, tol=1e-6)
    with pytest.raises(TypeError, match=r"conv_state: expected the dtype of x \(torch.float32\), got torch.bfloat16"):
        gdn.tree_causal_conv(x, par, state.bfloat16(), weight, backend="torch")


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_gdn_out_of_another_shape_or_dtype_is_refused_on_both_backends(backend):
    q, k, v, g_, beta, s0 = (torch.randn(*shape) for shape in ((3, 2, 4), (3, 2, 4), (3, 2, 5), (3, 2), (3, 2), (2, 4, 5)))
    beta = beta.sigmoid()
    g_ = -g_.abs()
    par = torch.tensor([-1, 0, 0])
    with pytest.raises(ValueError, match=r"out: expected shape \(3, 2, 5\), dtype torch.float32"):
        gdn.gdn_tree(q, k, v, g_, beta, par, s0, backend=backend, out=torch.zeros(2, 5, 2, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"out: expected shape \(2, 4, 5\), dtype torch.float32"):
        gdn.gdn_tree_commit(k, v, g_, beta, [0, 1], s0, backend=backend, out=torch.zeros(2, 4, 5, dtype=torch.float16))


def test_a_triton_backend_off_cuda_without_the_interpreter_is_refused_naming_it(monkeypatch):
    from specdec.kernels.backend import use_triton

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(ValueError, match=r"backend: 'triton' needs a CUDA tensor \(or TRITON_INTERPRET=1\), got device cpu"):
        use_triton("triton", torch.device("cpu"))
    assert use_triton("auto", torch.device("cpu")) is False
