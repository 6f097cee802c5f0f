// Causal attention with grouped KV heads over a KV cache.
//
// Each query row carries how many cached positions it sees (`n_visible[i]`: keys
// 0..n_visible[i]-1), so one call serves a prefill chunk (row i sees up to its own position)
// and decode rows alike. K and V are f32, [n_ctx, n_kv_heads, head_dim] with a row stride.
// Query head h reads KV head h / (n_heads / n_kv_heads).
#pragma once

#include <cstdint>

namespace fathom {

struct AttentionShape {
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
  float scale = 0.f;  // usually 1/sqrt(head_dim)
};

// q: [n_q, n_heads, head_dim]; out: [n_q, n_heads, head_dim].
// k, v: position p of head g at k + p * kv_row_stride + g * head_dim.
void Attention(const AttentionShape& s, const float* q, int64_t n_q, const int32_t* n_visible,
               const float* k, const float* v, int64_t kv_row_stride, float* out);
void AttentionReference(const AttentionShape& s, const float* q, int64_t n_q,
                        const int32_t* n_visible, const float* k, const float* v,
                        int64_t kv_row_stride, float* out);

}  // namespace fathom
