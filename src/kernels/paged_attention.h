// Attention with per-row KV addressing over a paged KV cache.
//
// Every query row carries its own key list: one or more segments, each a range of key
// positions [begin, end) of one sequence in one physical KV layer, found through that
// sequence's block table for that layer. So one call serves rows of different sequences,
// positions and loop depths, under every KV layout (hybrid rows read two segments: prompt
// keys from their depth slot, decode keys from the shared slot). A segment may mask the
// keys of tokens that never ran the query's loop step (the depth-indexed layout's holes),
// so a slot nothing wrote is never read.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/attention.h"

namespace fathom {

// Where the pool's blocks live: block b's K rows start at k_base + b * block_stride
// (elements of `dtype`), row t of a block at + t * row_stride; V likewise from v_base.
// dtype kF32 or kBF16: bf16 K/V are widened to f32 as they are read (a 16-bit shift, exact),
// and the arithmetic is f32 as for f32 K/V. kI8: a row is n_kv_heads * head_dim int8 values
// and then n_kv_heads f32 scales (kv/block_pool.h); the values are widened to f32 exactly, a
// score is (q . k) * the attention scale * k's scale for its head, and a probability is
// multiplied by v's scale before it weighs v (so the stored value is k_i * scale, v alike).
struct PagedKvView {
  const void* k_base = nullptr;
  const void* v_base = nullptr;
  int64_t block_stride = 0;
  int64_t row_stride = 0;  // n_kv_heads * head_dim (+ 4 * n_kv_heads for kI8's scales)
  int32_t block_size = 16;
  DType dtype = DType::kF32;
};

struct KeySegment {
  const int32_t* block_table = nullptr;  // position p -> block block_table[p / block_size]
  int64_t begin = 0, end = 0;            // key positions [begin, end)
  // Optional hole mask: key p is used only if key_steps[p] > min_step, where key_steps[p]
  // is the number of loop steps token p ran and min_step the query's 0-based step.
  const int16_t* key_steps = nullptr;
  int16_t min_step = 0;
};

struct PagedAttentionRow {
  const float* q = nullptr;  // [n_heads, head_dim]
  float* out = nullptr;      // [n_heads, head_dim]; zeros if no key is visible
  int32_t seg_begin = 0, seg_end = 0;  // indices into the segment array
  // Optional [n_heads]: 0 = a pruned head (L2A), neither computed nor read: its output is
  // zeros. Null: every head. Rows with a head mask always take the per-row path.
  const uint8_t* head_keep = nullptr;
};

// How PagedAttention may group a call's rows.
enum class RowGrouping {
  // Runs of 4+ consecutive rows with the same keys (a prompt's rows) attend as one tile where
  // the CPU has AVX-512F: the fast path for prompts. A row's bits then depend on the run it
  // falls into (tile or per-row kernel: both within 1e-5 of the reference, not the same bits).
  kTiles,
  // Every row through the per-row kernel: a row's bits never depend on the call's other rows,
  // so however a schedule cuts a prompt into calls, each row gets the bits it gets alone
  // (batch-invariant mode, LoadOptions::batch_invariant).
  kRowByRow,
};

void PagedAttention(const AttentionShape& s, const PagedKvView& kv, const PagedAttentionRow* rows,
                    int64_t n_rows, const KeySegment* segments,
                    RowGrouping grouping = RowGrouping::kTiles);
// Scalar reference (double math on the stored values, bf16 widened exactly), same contract.
void PagedAttentionReference(const AttentionShape& s, const PagedKvView& kv,
                             const PagedAttentionRow* rows, int64_t n_rows,
                             const KeySegment* segments);

namespace internal {
// The pieces PagedAttention combines, exposed for tests and benchmarks.
// Per-row path only: every row streams all of its keys, 16 lanes a register where the CPU
// has AVX-512F/BW/VL (and SetPagedAttentionAvx512RowsForTesting did not turn that off), else 8
// (AVX2).
void PagedAttentionRowwise(const AttentionShape& s, const PagedKvView& kv,
                           const PagedAttentionRow* rows, int64_t n_rows,
                           const KeySegment* segments);
// Whether the tiled prefill path can run here (AVX-512F).
bool PagedAttentionTilesSupported();
// Rows [0, n_rows) as one tile against KV head kvh: the rows must have the same number of
// segments and, segment by segment, the same block_table, begin, key_steps and min_step
// (ends may differ), n_rows * (n_heads / n_kv_heads) <= kMaxTileQueries, positions < 2^31.
// Requires PagedAttentionTilesSupported().
inline constexpr int64_t kMaxTileQueries = 64;
void PagedAttentionTile(const AttentionShape& s, const PagedKvView& kv,
                        const PagedAttentionRow* rows, int64_t n_rows, const KeySegment* segments,
                        int64_t kvh);
// Whether the per-row path can run on 16 lanes here (AVX-512F/BW/VL), and a switch that keeps
// it on 8 (false) so that tests can run both on one CPU. The two give different bits (another
// summation order); each is independent of the batch.
bool PagedAttentionAvx512RowsSupported();
void SetPagedAttentionAvx512RowsForTesting(bool enabled);
}  // namespace internal

}  // namespace fathom
