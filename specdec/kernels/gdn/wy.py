"""WY / UT form of the gated delta rule over a whole draft tree, relative to the committed state.

With gamma_i the path-cumulative log decay (gamma_i = g_i + gamma_parent(i)), D_ij = exp(gamma_i -
gamma_j) on ancestor-or-self pairs and 0 elsewhere, and A = strict_ancestor(diag(beta) (K K^T) * D):

    (I + A) V' = diag(beta) (V - diag(exp(gamma)) K S0)        (V' = the corrected values u)
    O = diag(exp(gamma)) Q S0 + ((Q K^T) * D) V'

I + A is unit lower triangular in topological order, and its inverse only links ancestors to
descendants, so every node's output comes out of one solve. Derivation: README.md in this folder.
The Triton kernel runs one program per (value head, dv tile), walks the nodes in blocks of 16 rows
and solves block by block (forward substitution); the corrected values of earlier blocks go
through a small scratch buffer. No state is written.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .meta import TreeMeta

__all__ = ["gdn_tree_wy_torch", "gdn_tree_wy"]

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


def gdn_tree_wy_torch(q, k, v, g, beta, meta: TreeMeta, initial_state, *, use_qk_l2norm: bool,
                      scale: float | None, dtype: torch.dtype = torch.float32) -> torch.Tensor:
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
    x = tl.load(base + rows[:, None] * stride_row + offs_k[None, :], mask=mask_r[:, None] & mask_k[None, :],
                other=0.0).to(tl.float32)
    if L2NORM:
        return tl.rsqrt(tl.sum(x * x, axis=1) + 1e-6)
    else:
        return tl.sum(x * 0.0, axis=1) + 1.0


@triton.jit
def _dot_state(base, rows, mask_r, row_scale, s0_base, offs_v, mask_v, stride_row,
               DK: tl.constexpr, DV: tl.constexpr, BK: tl.constexpr, BKC: tl.constexpr, PRECISION: tl.constexpr):
    # [BC, BV] = (row_scale * X[rows]) @ S0[:, tile], in dk chunks: a full-dk fp32 dot operand
    # would hold BK values per thread and spill
    acc = tl.zeros([rows.shape[0], offs_v.shape[0]], dtype=tl.float32)
    for k0 in range(0, BK, BKC):
        offs = k0 + tl.arange(0, BKC)
        mk = offs < DK
        x = tl.load(base + rows[:, None] * stride_row + offs[None, :], mask=mask_r[:, None] & mk[None, :],
                    other=0.0).to(tl.float32)
        s = tl.load(s0_base + offs[:, None] * DV + offs_v[None, :], mask=mk[:, None] & mask_v[None, :], other=0.0)
        acc += tl.dot(x * row_scale[:, None], s, input_precision=PRECISION)
    return acc


@triton.jit
def _dot_rows(base_a, rows_a, mask_a, scale_a, base_b, rows_b, mask_b, scale_b, stride_row,
              DK: tl.constexpr, BK: tl.constexpr, BKC: tl.constexpr, PRECISION: tl.constexpr):
    # [BC, BC] = (scale_a * A[rows_a]) @ (scale_b * B[rows_b])^T, in dk chunks
    acc = tl.zeros([rows_a.shape[0], rows_b.shape[0]], dtype=tl.float32)
    for k0 in range(0, BK, BKC):
        offs = k0 + tl.arange(0, BKC)
        mk = offs < DK
        a = tl.load(base_a + rows_a[:, None] * stride_row + offs[None, :], mask=mask_a[:, None] & mk[None, :],
                    other=0.0).to(tl.float32)
        b = tl.load(base_b + rows_b[:, None] * stride_row + offs[None, :], mask=mask_b[:, None] & mk[None, :],
                    other=0.0).to(tl.float32)
        acc += tl.dot(a * scale_a[:, None], tl.trans(b * scale_b[:, None]), input_precision=PRECISION)
    return acc


@triton.jit
def _path_gamma(anc_ptr, rows, mask_r, offs_n, mask_n, g_all, N):
    # gamma_i = sum of g over the ancestors-or-self of i
    a = tl.load(anc_ptr + rows[:, None] * N + offs_n[None, :], mask=mask_r[:, None] & mask_n[None, :], other=0)
    return tl.sum(tl.where(a != 0, g_all[None, :], 0.0), axis=1)


@triton.jit
def _gdn_wy_kernel(
    q_ptr, k_ptr, v_ptr, g_ptr, beta_ptr, s0_ptr, anc_ptr, vnew_ptr, out_ptr,
    scale, N, N_PAD,
    HK: tl.constexpr, HV: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
    BK: tl.constexpr, BKC: tl.constexpr, BV: tl.constexpr, BC: tl.constexpr, BN: tl.constexpr,
    L2NORM: tl.constexpr, PRECISION: tl.constexpr,
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
        v_b = tl.load(v_base + rows[:, None] * (HV * DV) + offs_v[None, :],
                      mask=mask_r[:, None] & mask_v[None, :], other=0.0).to(tl.float32)  # [BC, BV]
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
            m = tl.load(anc_b + rows[:, None] * N + cols[None, :], mask=mask_r[:, None] & mask_c[None, :],
                        other=0) != 0
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
        tl.store(out_ptr + ((b * N + rows[:, None]) * HV + h) * DV + offs_v[None, :],
                 o.to(out_ptr.dtype.element_ty), mask=mask_r[:, None] & mask_v[None, :])
        # later blocks read this block's corrected values, written by other threads of the program
        tl.debug_barrier()


def gdn_tree_wy(q, k, v, g, beta, meta: TreeMeta, initial_state, out, *, use_qk_l2norm: bool, scale: float,
                block_v: int | None = 64, num_warps: int = 8, precision: str = "ieee") -> torch.Tensor:
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
        q, k, v, g, beta, initial_state, meta.ancestors, vnew, out,
        scale, n, n_pad,
        HK=hk, HV=hv, DK=dk, DV=dv, BK=bk, BKC=min(bk, 16 if precision == "ieee" else 32), BV=bv, BC=bc, BN=bn,
        L2NORM=use_qk_l2norm, PRECISION="ieee" if _INTERPRET else precision,
        num_warps=num_warps,
    )
    return out
