// Rotary position embeddings.
//  kNeox (Llama/Qwen/Ouro, HF `rotate_half`): pairs (i, i + head_dim/2).
//  kInterleaved (Huginn, complex-like): pairs (2i, 2i+1).
// Frequencies: inv_freq[i] = theta^(-2i/head_dim), angle = pos * inv_freq[i], in f32 math as
// the PyTorch models compute them (Huginn rotates in fp32 too).
#pragma once

#include <cstdint>
#include <vector>

namespace fathom {

enum class RopeStyle { kNeox, kInterleaved };

class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int64_t head_dim, float theta, int64_t max_positions);
  int64_t head_dim() const { return head_dim_; }
  int64_t max_positions() const { return max_positions_; }
  const float* cos(int64_t pos) const { return cos_.data() + pos * (head_dim_ / 2); }  // [head_dim/2]
  const float* sin(int64_t pos) const { return sin_.data() + pos * (head_dim_ / 2); }

 private:
  int64_t head_dim_ = 0, max_positions_ = 0;
  std::vector<float> cos_, sin_;  // [max_positions, head_dim/2]
};

// x: [rows, n_heads, head_dim], rotated in place; row r is at position pos[r] (< max_positions).
void ApplyRope(const RopeTable& table, RopeStyle style, const int32_t* pos, int64_t rows,
               int64_t n_heads, float* x);
// Reference computing the angles itself in double from theta.
void ApplyRopeReference(float theta, RopeStyle style, const int32_t* pos, int64_t rows,
                        int64_t n_heads, int64_t head_dim, float* x);

}  // namespace fathom
