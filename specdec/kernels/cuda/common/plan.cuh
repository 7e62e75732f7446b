// A launch plan and the byte counts every planner uses.
#pragma once

#include "params.cuh"

namespace {

// Launch plan: row tiles per CTA, K splits (cluster size) and the dynamic shared memory. stream_k: a plan of
// tma_stream_k_kernel (grid_x persistent CTAs over row_blocks 64-row blocks; k_splits unused, 1).
// partial_tokens: the tokens of a partial tile (0: M; the wide kernel's 32 NB).
struct Plan {
  int rt_per_cta, k_splits, n_chunks, grid_x, smem_bytes;
  bool stream_k;
  int row_blocks;
  int partial_tokens;
};

int chunk_of(int kind) { return kind == kBf16 ? 32 : 64; }

int x_bytes(int kind, int M, int n_chunks, int splits) {
  const int per_cta = (n_chunks + splits - 1) / splits;
  return per_cta * chunk_of(kind) * M * 2;
}

int band_ptr_bytes(int kind, int K) { return kind == kW12 ? ((K + kEscapeTile - 1) / kEscapeTile + 1) * 4 : 0; }

double bytes_per_weight(int kind) { return kind == kBf16 ? 2.0 : kind == kW12 ? 1.5 : 1.0; }

}  // namespace
