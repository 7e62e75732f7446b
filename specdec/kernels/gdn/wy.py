"""WY / UT form of the gated delta rule over a whole draft tree, relative to the committed state.

With gamma_i the path-cumulative log decay (gamma_i = g_i + gamma_parent(i)), D_ij = exp(gamma_i -
gamma_j) on ancestor-or-self pairs and 0 elsewhere, and A = strict_ancestor(diag(beta) (K K^T) * D):

    (I + A) V' = diag(beta) (V - diag(exp(gamma)) K S0)        (V' = the corrected values u)
    O = diag(exp(gamma)) Q S0 + ((Q K^T) * D) V'

I + A is unit lower triangular in topological order, and its inverse only links ancestors to
descendants, so every node's output comes out of one solve. Derivation: README.md in this folder.

Two Triton kernels, one program per (value head, dv tile) each; no state is written:
- dense (trees up to 64 nodes, what ``method="wy"`` runs there): the whole tree is one tile.
  (I + A)^-1 = prod_s (I + (-A)^(2^s)) by repeated squaring, as A is nilpotent of order
  depth + 1; then U = T rhs (one step of iterative refinement) and O, all as ``tl.dot``.
- blocked (any N): walks the nodes in blocks of 16 rows and solves block by block (forward
  substitution); the corrected values of earlier blocks go through a small scratch buffer.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .meta import TreeMeta

__all__ = ["gdn_tree_wy_torch", "gdn_tree_wy", "gdn_tree_wy_dense", "gdn_tree_wy_auto"]

_INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"


def _ancestor_mask(meta: TreeMeta) -> torch.Tensor:
    """[B, N, N] bool, ancestor-or-self."""
    return meta.ancestors.bool()


def _path_decay(gamma: torch.Tensor, anc: torch.Tensor) -> torch.Tensor:
    """exp(gamma_i - gamma_j) on ancestor-or-self pairs, 0 elsewhere: [B, Hv, N, N].

    The mask is applied before exp: across branches gamma_i - gamma_j can be large and positive.
    """
    anc = anc[:, None]  # [B, 1, N, N]
    diff = gamma[..., :, None] - gamma[..., None, :]
    return torch.where(anc, torch.exp(torch.where(anc, diff, 0.0)), 0.0)


def gdn_tree_wy_torch(
    q,
    k,
    v,
    g,
    beta,
    meta: TreeMeta,
    initial_state,
    *,
    use_qk_l2norm: bool,
    scale: float | None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Dense PyTorch version of the tree WY form on batched ``[B, N, ...]`` tensors.

    Returns outputs ``[B, N, Hv, dv]`` in ``dtype``. The CPU fallback of ``method="wy"``.
    """
    from .naive import _prepare

    hv = v.shape[2]
    qf, kf, vf, gf, bf = _prepare(q, k, v, g, beta, hv, use_qk_l2norm, scale, dtype)
    qf, kf, vf = (t.transpose(1, 2) for t in (qf, kf, vf))  # [B, Hv, N, d]
    gf, bf = gf.transpose(1, 2), bf.transpose(1, 2)  # [B, Hv, N]
    s0 = initial_state.to(dtype)  # [B, Hv, dk, dv]
    anc = _ancestor_mask(meta)  # [B, N, N]
    n = anc.shape[-1]
    gamma = torch.einsum("bij,bhj->bhi", anc.to(dtype), gf)  # [B, Hv, N]
    decay = _path_decay(gamma, anc)  # [B, Hv, N, N]
    strict = anc & ~torch.eye(n, dtype=torch.bool, device=anc.device)
    a = torch.where(strict[:, None], bf[..., None] * (kf @ kf.transpose(-1, -2)) * decay, 0.0)
    eye = torch.eye(n, dtype=dtype, device=anc.device)
    rhs = bf[..., None] * (vf - gamma.exp()[..., None] * (kf @ s0))  # [B, Hv, N, dv]
    v_new = torch.linalg.solve_triangular(eye + a, rhs, upper=False, unitriangular=True)
    o = gamma.exp()[..., None] * (qf @ s0) + ((qf @ kf.transpose(-1, -2)) * decay) @ v_new
    return o.transpose(1, 2)  # [B, N, Hv, dv]


@triton.jit
def _inv_norm(base, rows, mask_r, offs_k, mask_k, stride_row, L2NORM: tl.constexpr):
    # [BC] factor that l2-normalises each row over dk (ones when normalisation is off)
    x = tl.load(base + rows[:, None] * stride_row + offs_k[None, :], mask=mask_r[:, None] & mask_k[None, :], other=0.0).to(
        tl.float32
    )
    if L2NORM:
        return tl.rsqrt(tl.sum(x * x, axis=1) + 1e-6)
    else:
        return tl.sum(x * 0.0, axis=1) + 1.0


@triton.jit
def _dot_state(
    base,
    rows,
    mask_r,
    row_scale,
    s0_base,
    offs_v,
    mask_v,
    stride_row,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # [BC, BV] = (row_scale * X[rows]) @ S0[:, tile], in dk chunks: a full-dk fp32 dot operand
    # would hold BK values per thread and spill
    acc = tl.zeros([rows.shape[0], offs_v.shape[0]], dtype=tl.float32)
    for k0 in range(0, BK, BKC):
        offs = k0 + tl.arange(0, BKC)
        mk = offs < DK
        x = tl.load(base + rows[:, None] * stride_row + offs[None, :], mask=mask_r[:, None] & mk[None, :], other=0.0).to(
            tl.float32
        )
        s = tl.load(s0_base + offs[:, None] * DV + offs_v[None, :], mask=mk[:, None] & mask_v[None, :], other=0.0)
        acc += tl.dot(x * row_scale[:, None], s, input_precision=PRECISION)
    return acc


@triton.jit
def _dot_rows(
    base_a,
    rows_a,
    mask_a,
    scale_a,
    base_b,
    rows_b,
    mask_b,
    scale_b,
    stride_row,
    DK: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # [BC, BC] = (scale_a * A[rows_a]) @ (scale_b * B[rows_b])^T, in dk chunks
    acc = tl.zeros([rows_a.shape[0], rows_b.shape[0]], dtype=tl.float32)
    for k0 in range(0, BK, BKC):
        offs = k0 + tl.arange(0, BKC)
        mk = offs < DK
        a = tl.load(base_a + rows_a[:, None] * stride_row + offs[None, :], mask=mask_a[:, None] & mk[None, :], other=0.0).to(
            tl.float32
        )
        b = tl.load(base_b + rows_b[:, None] * stride_row + offs[None, :], mask=mask_b[:, None] & mk[None, :], other=0.0).to(
            tl.float32
        )
        acc += tl.dot(a * scale_a[:, None], tl.trans(b * scale_b[:, None]), input_precision=PRECISION)
    return acc


@triton.jit
def _path_gamma(anc_ptr, rows, mask_r, offs_n, mask_n, g_all, N):
    # gamma_i = sum of g over the ancestors-or-self of i
    a = tl.load(anc_ptr + rows[:, None] * N + offs_n[None, :], mask=mask_r[:, None] & mask_n[None, :], other=0)
    return tl.sum(tl.where(a != 0, g_all[None, :], 0.0), axis=1)


@triton.jit
def _gdn_wy_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    s0_ptr,
    anc_ptr,
    vnew_ptr,
    out_ptr,
    scale,
    N,
    N_PAD,
    HK: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BK: tl.constexpr,
    BKC: tl.constexpr,
    BV: tl.constexpr,
    BC: tl.constexpr,
    BN: tl.constexpr,
    L2NORM: tl.constexpr,
    PRECISION: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = i_bh // HV
    h = i_bh % HV
    hk = h // (HV // HK)
    offs_k = tl.arange(0, BK)
    offs_v = i_v * BV + tl.arange(0, BV)
    offs_n = tl.arange(0, BN)
    offs_c = tl.arange(0, BC)
    mask_k = offs_k < DK
    mask_v = offs_v < DV
    mask_n = offs_n < N
    s0_base = s0_ptr + i_bh * DK * DV
    g_all = tl.load(g_ptr + (b * N + offs_n) * HV + h, mask=mask_n, other=0.0).to(tl.float32)  # [BN]
    anc_b = anc_ptr + b * N * N
    q_base = q_ptr + (b * N * HK + hk) * DK
    k_base = k_ptr + (b * N * HK + hk) * DK
    v_base = v_ptr + (b * N * HV + h) * DV
    vnew_base = vnew_ptr + i_bh * N_PAD * DV
    eye = offs_c[:, None] == offs_c[None, :]
    for ib in range(tl.cdiv(N, BC)):
        rows = ib * BC + offs_c
        mask_r = rows < N
        rk_b = _inv_norm(k_base, rows, mask_r, offs_k, mask_k, HK * DK, L2NORM)  # [BC]
        rq_b = _inv_norm(q_base, rows, mask_r, offs_k, mask_k, HK * DK, L2NORM) * scale  # [BC]
        v_b = tl.load(v_base + rows[:, None] * (HV * DV) + offs_v[None, :], mask=mask_r[:, None] & mask_v[None, :], other=0.0).to(
            tl.float32
        )  # [BC, BV]
        beta_b = tl.load(beta_ptr + (b * N + rows) * HV + h, mask=mask_r, other=0.0).to(tl.float32)  # [BC]
        gam_b = _path_gamma(anc_b, rows, mask_r, offs_n, mask_n, g_all, N)  # [BC]
        ks0 = _dot_state(k_base, rows, mask_r, rk_b, s0_base, offs_v, mask_v, HK * DK, DK, DV, BK, BKC, PRECISION)
        rhs = beta_b[:, None] * (v_b - tl.exp(gam_b)[:, None] * ks0)  # [BC, BV]
        qs0 = _dot_state(q_base, rows, mask_r, rq_b, s0_base, offs_v, mask_v, HK * DK, DK, DV, BK, BKC, PRECISION)
        o = tl.exp(gam_b)[:, None] * qs0  # [BC, BV]
        for ic in range(ib):
            cols = ic * BC + offs_c
            mask_c = cols < N
            rk_c = _inv_norm(k_base, cols, mask_c, offs_k, mask_k, HK * DK, L2NORM)
            gam_c = _path_gamma(anc_b, cols, mask_c, offs_n, mask_n, g_all, N)
            m = tl.load(anc_b + rows[:, None] * N + cols[None, :], mask=mask_r[:, None] & mask_c[None, :], other=0) != 0
            # mask before exp: off-path gamma differences may be large and positive
            d = tl.where(m, tl.exp(tl.where(m, gam_b[:, None] - gam_c[None, :], 0.0)), 0.0)  # [BC, BC]
            vnew_c = tl.load(vnew_base + cols[:, None] * DV + offs_v[None, :], mask=mask_v[None, :], other=0.0)
            kk = _dot_rows(k_base, rows, mask_r, rk_b, k_base, cols, mask_c, rk_c, HK * DK, DK, BK, BKC, PRECISION)
            rhs -= tl.dot(beta_b[:, None] * kk * d, vnew_c, input_precision=PRECISION)
            qk = _dot_rows(q_base, rows, mask_r, rq_b, k_base, cols, mask_c, rk_c, HK * DK, DK, BK, BKC, PRECISION)
            o += tl.dot(qk * d, vnew_c, input_precision=PRECISION)
        m = tl.load(anc_b + rows[:, None] * N + rows[None, :], mask=mask_r[:, None] & mask_r[None, :], other=0) != 0
        d = tl.where(m, tl.exp(tl.where(m, gam_b[:, None] - gam_b[None, :], 0.0)), 0.0)
        kk = _dot_rows(k_base, rows, mask_r, rk_b, k_base, rows, mask_r, rk_b, HK * DK, DK, BK, BKC, PRECISION)
        a = tl.where(eye, 0.0, beta_b[:, None] * kk * d)
        # (I + a)^-1 by forward substitution, one row at a time: a is strictly lower triangular
        tinv = eye.to(tl.float32)
        for i in tl.static_range(1, BC):
            a_i = tl.sum(tl.where(offs_c[:, None] == i, a, 0.0), axis=0)  # [BC] row i of a
            t_i = tl.sum(a_i[:, None] * tinv, axis=0)  # [BC] sum_j a[i, j] tinv[j, :]
            tinv = tl.where(offs_c[:, None] == i, tinv - t_i[None, :], tinv)
        vnew_b = tl.dot(tinv, rhs, input_precision=PRECISION)  # [BC, BV]
        tl.store(vnew_base + rows[:, None] * DV + offs_v[None, :], vnew_b, mask=mask_v[None, :])
        qk = _dot_rows(q_base, rows, mask_r, rq_b, k_base, rows, mask_r, rk_b, HK * DK, DK, BK, BKC, PRECISION)
        o += tl.dot(qk * d, vnew_b, input_precision=PRECISION)
        tl.store(
            out_ptr + ((b * N + rows[:, None]) * HV + h) * DV + offs_v[None, :],
            o.to(out_ptr.dtype.element_ty),
            mask=mask_r[:, None] & mask_v[None, :],
        )
        # later blocks read this block's corrected values, written by other threads of the program
        tl.debug_barrier()


@triton.jit
def _tree_decay(gam_i, gam_j, anc):
    # D_ij = exp(gamma_i - gamma_j) on ancestor-or-self pairs, 0 elsewhere. The mask goes in before
    # the exp: across branches gamma_i - gamma_j can be large and positive, and inf * 0 = NaN
    return tl.where(anc, tl.exp(tl.where(anc, gam_i[:, None] - gam_j[None, :], 0.0)), 0.0)


@triton.jit
def _unit_lower_inverse(a, eye, max_depth, NSQ: tl.constexpr, PRECISION: tl.constexpr):
    # (I + A)^-1 = sum_m (-A)^m = prod_s (I + (-A)^(2^s)). A only links a node to its proper
    # ancestors, so (-A)^m links nodes whose depths differ by at least m: (-A)^(d + 1) = 0 for a tree
    # of depth d, and the factors with 2^s <= d suffice (2 squarings for depth 7, 6 for a 64-chain)
    steps = 0
    for s in tl.static_range(1, NSQ):
        steps += (max_depth >= (1 << s)).to(tl.int32)
    x = -a
    t = eye + x
    # a runtime loop: unrolled, the NSQ - 1 guarded squarings keep their operands live and spill
    for _ in range(steps):
        x = tl.dot(x, x, input_precision=PRECISION)
        t = t + tl.dot(t, x, input_precision=PRECISION)
    return t


@triton.jit
def _gram_chunked(
    a_ptr,
    a_rows,
    b_ptr,
    b_rows,
    mask_n,
    DK: tl.constexpr,
    BN: tl.constexpr,
    BKC: tl.constexpr,
    KPRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # [BN, BN] = A[rows] @ B[rows]^T of the raw rows (a_rows, b_rows: [BN] int32 row offsets) and
    # the rows' squared norms, in dk chunks: [BN, dk] pointer tiles held across the kernel spill
    acc = tl.zeros([BN, BN], dtype=tl.float32)
    sa = tl.zeros([BN], dtype=tl.float32)
    sb = tl.zeros([BN], dtype=tl.float32)
    for k0 in range(0, DK, BKC):
        offs = k0 + tl.arange(0, BKC)
        m = mask_n[:, None] & (offs < DK)[None, :]
        xa = tl.load(a_ptr + a_rows[:, None] + offs[None, :], mask=m, other=0.0)
        xb = tl.load(b_ptr + b_rows[:, None] + offs[None, :], mask=m, other=0.0)
        fa = xa.to(tl.float32)
        fb = xb.to(tl.float32)
        sa += tl.sum(fa * fa, axis=1)
        sb += tl.sum(fb * fb, axis=1)
        if UPCAST:
            acc = tl.dot(fa, tl.trans(fb), acc, input_precision=KPRECISION)
        else:
            acc = tl.dot(xa, tl.trans(xb), acc, input_precision=KPRECISION)
    return acc, sa, sb


@triton.jit
def _dot_state_chunked(
    x_ptr,
    x_rows,
    mask_n,
    s0_base,
    offs_v,
    mask_v,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BN: tl.constexpr,
    BV: tl.constexpr,
    BKC: tl.constexpr,
    PRECISION: tl.constexpr,
):
    # [BN, BV] = X[rows] @ S0[:, tile] in dk chunks, X re-read from cache: a full-dk fp32 operand
    # (and its tf32 hi/lo split) would spill
    acc = tl.zeros([BN, BV], dtype=tl.float32)
    for k0 in range(0, DK, BKC):
        offs = k0 + tl.arange(0, BKC)
        mk = offs < DK
        x = tl.load(x_ptr + x_rows[:, None] + offs[None, :], mask=mask_n[:, None] & mk[None, :], other=0.0).to(tl.float32)
        s = tl.load(s0_base + offs[:, None] * DV + offs_v[None, :], mask=mk[:, None] & mask_v[None, :], other=0.0)
        acc = tl.dot(x, s, acc, input_precision=PRECISION)
    return acc


@triton.jit
def _gdn_wy_dense_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    s0_ptr,
    anc_ptr,
    out_ptr,
    scale,
    N,
    HK: tl.constexpr,
    HV: tl.constexpr,
    DK: tl.constexpr,
    DV: tl.constexpr,
    BN: tl.constexpr,
    BKC: tl.constexpr,
    BV: tl.constexpr,
    NSQ: tl.constexpr,
    L2NORM: tl.constexpr,
    PRECISION: tl.constexpr,
    INV_PRECISION: tl.constexpr,
    REFINE: tl.constexpr,
    KPRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    b = i_bh // HV
    h = i_bh % HV
    hk = h // (HV // HK)
    rows = tl.arange(0, BN)
    offs_v = i_v * BV + tl.arange(0, BV)
    mask_n = rows < N
    mask_v = offs_v < DV
    mask_nn = mask_n[:, None] & mask_n[None, :]
    qk_rows = (b * N * HK + hk) * DK + rows * (HK * DK)  # [BN] row offsets into q and k
    anc_ptrs = anc_ptr + (b * N + rows[:, None]) * N + rows[None, :]
    # Gram matrix of the raw rows: bf16 x bf16 products are exact in the fp32 accumulator, so it
    # needs no tf32 splitting; the l2 norms become row/column scales
    kk, sk, _ = _gram_chunked(k_ptr, qk_rows, k_ptr, qk_rows, mask_n, DK, BN, BKC, KPRECISION, UPCAST)
    if L2NORM:
        rk = tl.rsqrt(sk + 1e-6)  # [BN]
    else:
        rk = tl.full([BN], 1.0, dtype=tl.float32)
    kk = kk * rk[:, None] * rk[None, :]  # [BN, BN]
    g_n = tl.load(g_ptr + (b * N + rows) * HV + h, mask=mask_n, other=0.0).to(tl.float32)  # [BN]
    beta_n = tl.load(beta_ptr + (b * N + rows) * HV + h, mask=mask_n, other=0.0).to(tl.float32)  # [BN]
    anc = tl.load(anc_ptrs, mask=mask_nn, other=0) != 0  # [BN, BN] ancestor-or-self
    gamma = tl.sum(tl.where(anc, g_n[None, :], 0.0), axis=1)  # [BN] path-cumulative log decay
    max_depth = tl.max(tl.sum(anc.to(tl.int32), axis=1), axis=0) - 1
    eye = rows[:, None] == rows[None, :]
    # strictly lower: the decay is 0 off the ancestors
    a = tl.where(eye, 0.0, beta_n[:, None] * kk * _tree_decay(gamma, gamma, anc))
    t = _unit_lower_inverse(a, eye.to(tl.float32), max_depth, NSQ, INV_PRECISION)  # [BN, BN]
    # the dv tile: rhs = beta (V - e^gamma K S0), U = T rhs, O = e^gamma Q S0 + (QK * D) U
    s0_base = s0_ptr + i_bh * DK * DV
    ks0 = (
        _dot_state_chunked(k_ptr, qk_rows, mask_n, s0_base, offs_v, mask_v, DK, DV, BN, BV, BKC, PRECISION) * rk[:, None]
    )  # [BN, BV]
    v_n = tl.load(
        v_ptr + ((b * N + rows[:, None]) * HV + h) * DV + offs_v[None, :], mask=mask_n[:, None] & mask_v[None, :], other=0.0
    ).to(tl.float32)  # [BN, BV]
    eg = tl.exp(gamma)
    rhs = beta_n[:, None] * (v_n - eg[:, None] * ks0)
    u = tl.dot(t, rhs, input_precision=INV_PRECISION)  # corrected values, [BN, BV]
    # the mask is re-read from cache: live across the inverse it would spill
    anc = tl.load(anc_ptrs, mask=mask_nn, other=0) != 0
    d = _tree_decay(gamma, gamma, anc)  # [BN, BN]
    if REFINE:
        # one step of iterative refinement: with T from tf32 products, U = T rhs is off by
        # ~1e-3; the residual rhs - (I + A) U in PRECISION brings that to ~1e-6
        a = tl.where(eye, 0.0, beta_n[:, None] * kk * d)
        r = rhs - u - tl.dot(a, u, input_precision=PRECISION)
        u = u + tl.dot(t, r, input_precision=INV_PRECISION)
    qk, sq, _ = _gram_chunked(q_ptr, qk_rows, k_ptr, qk_rows, mask_n, DK, BN, BKC, KPRECISION, UPCAST)
    if L2NORM:
        rq = tl.rsqrt(sq + 1e-6) * scale
    else:
        rq = tl.full([BN], 1.0, dtype=tl.float32) * scale
    p = qk * rq[:, None] * rk[None, :] * d  # (Q K^T) * D
    qs0 = _dot_state_chunked(q_ptr, qk_rows, mask_n, s0_base, offs_v, mask_v, DK, DV, BN, BV, BKC, PRECISION) * rq[:, None]
    o = eg[:, None] * qs0 + tl.dot(p, u, input_precision=PRECISION)
    tl.store(
        out_ptr + ((b * N + rows[:, None]) * HV + h) * DV + offs_v[None, :],
        o.to(out_ptr.dtype.element_ty),
        mask=mask_n[:, None] & mask_v[None, :],
    )


# the dense kernel keeps the whole tree in one tile. 128-row tiles spill registers and were slower
# than the path kernel (H200, triton 3.6); some of their configs also gave wrong outputs there, so
# trees above 64 nodes go to the blocked kernel
DENSE_MAX_NODES = 64


def gdn_tree_wy_dense(
    q,
    k,
    v,
    g,
    beta,
    meta: TreeMeta,
    initial_state,
    out,
    *,
    use_qk_l2norm: bool,
    scale: float,
    block_v: int | None = None,
    num_warps: int = 4,
    precision: str = "tf32x3",
    refine: bool = True,
    block_kc: int = 32,
) -> torch.Tensor:
    """Launches the dense tree WY kernel (N <= 64) on checked, batched, contiguous tensors; fills ``out``.

    One program per (value head, dv tile) holds the whole tree: Gram matrices, the unit-lower inverse
    by repeated squaring of the nilpotent A, then the GEMMs of the tile. No scratch, one launch.
    ``precision`` is the Triton ``input_precision`` of the fp32 dots with the state and of the
    output: ``"tf32x3"`` (default, ~fp32 accurate on tensor cores), ``"tf32"`` or ``"ieee"``.
    ``refine``: the inverse in plain tf32 (3xTF32 there spills registers) plus one step of iterative
    refinement of U with a 3xTF32 residual; ``False`` runs the inverse in ``precision`` too.
    Defaults (H200 sweep): 4 warps; dv tiles of 32 for 33-64 nodes (192 programs), 64 below.
    """
    bsz, n, hk, dk = k.shape
    hv, dv = v.shape[-2:]
    if n > DENSE_MAX_NODES:
        raise ValueError(f"q: the dense WY kernel takes at most {DENSE_MAX_NODES} nodes, got N = {n}")
    if precision not in ("tf32x3", "tf32", "ieee"):
        raise ValueError(f"precision: expected 'tf32x3', 'tf32' or 'ieee', got {precision!r}")
    bn = max(16, triton.next_power_of_2(n))
    bk = max(16, triton.next_power_of_2(dk))
    if block_v is None:
        block_v = 32 if bn >= 64 else 64
    bv = max(16, min(triton.next_power_of_2(dv), block_v))
    nsq = max(1, (bn - 1).bit_length())
    grid = (triton.cdiv(dv, bv), bsz * hv)
    # the interpreter computes every dot in fp32 whatever the precision; the refinement still runs
    prec = "ieee" if _INTERPRET else precision
    inv_prec = "ieee" if _INTERPRET else ("tf32" if refine else precision)
    _gdn_wy_dense_kernel[grid](
        q,
        k,
        v,
        g,
        beta,
        initial_state,
        meta.ancestors,
        out,
        scale,
        n,
        HK=hk,
        HV=hv,
        DK=dk,
        DV=dv,
        BN=bn,
        BKC=min(bk, block_kc),
        BV=bv,
        NSQ=nsq,
        L2NORM=use_qk_l2norm,
        PRECISION=prec,
        INV_PRECISION=inv_prec,
        REFINE=refine,
        # 16-bit q/k: native products are exact; fp32 q/k need the fp32 precision
        KPRECISION=prec if k.dtype == torch.float32 else "tf32",
        UPCAST=_INTERPRET,
        num_warps=num_warps,
    )
    return out


def gdn_tree_wy_auto(q, k, v, g, beta, meta: TreeMeta, initial_state, out, *, use_qk_l2norm: bool, scale: float) -> torch.Tensor:
    """``method="wy"`` on Triton: the dense kernel for trees up to 64 nodes, the blocked one beyond."""
    if k.shape[1] <= DENSE_MAX_NODES:
        return gdn_tree_wy_dense(q, k, v, g, beta, meta, initial_state, out, use_qk_l2norm=use_qk_l2norm, scale=scale)
    return gdn_tree_wy(q, k, v, g, beta, meta, initial_state, out, use_qk_l2norm=use_qk_l2norm, scale=scale)


def gdn_tree_wy(
    q,
    k,
    v,
    g,
    beta,
    meta: TreeMeta,
    initial_state,
    out,
    *,
    use_qk_l2norm: bool,
    scale: float,
    block_v: int | None = 64,
    num_warps: int = 8,
    precision: str = "ieee",
) -> torch.Tensor:
    """Launches the tree WY kernel on checked, batched, contiguous ``[B, N, ...]`` tensors; fills ``out``."""
    bsz, n, hk, dk = k.shape
    hv, dv = v.shape[-2:]
    bc = 16
    bk = max(16, triton.next_power_of_2(dk))
    bv = max(16, min(triton.next_power_of_2(dv), block_v if block_v is not None else 32))
    bn = max(16, triton.next_power_of_2(n))
    n_pad = triton.cdiv(n, bc) * bc
    # padded rows of the last block are stored too (as zeros-derived values), so size the scratch to n_pad
    vnew = torch.empty((bsz, hv, n_pad, dv), device=k.device, dtype=torch.float32)
    grid = (triton.cdiv(dv, bv), bsz * hv)
    _gdn_wy_kernel[grid](
        q,
        k,
        v,
        g,
        beta,
        initial_state,
        meta.ancestors,
        vnew,
        out,
        scale,
        n,
        n_pad,
        HK=hk,
        HV=hv,
        DK=dk,
        DV=dv,
        BK=bk,
        BKC=min(bk, 16 if precision == "ieee" else 32),
        BV=bv,
        BC=bc,
        BN=bn,
        L2NORM=use_qk_l2norm,
        PRECISION="ieee" if _INTERPRET else precision,
        num_warps=num_warps,
    )
    return out
