// Rotary position embeddings.
//  kNeox (Llama/Qwen/Ouro, HF `rotate_half`): pairs (i, i + head_dim/2).
//  kInterleaved (Huginn, complex-like): pairs (2i, 2i+1).
// Frequencies: inv_freq[i] = theta^(-2i/head_dim), angle = pos * inv_freq[i], in f32 math as
// the PyTorch models compute them (Huginn rotates in fp32 too); optionally scaled by
// config.json's rope_scaling (RopeScaling).
#pragma once

#include <cstdint>
#include <vector>

namespace fathom {

enum class RopeStyle { kNeox, kInterleaved };

// Frequency scaling for contexts past the pretraining length. kLlama3 (rope_type "llama3",
// Llama 3.1 / 3.2), as transformers' _compute_llama3_parameters: with wavelength
// w = 2 pi / inv_freq, L = original_max_positions, frequencies with w < L / high_freq_factor
// are kept, those with w > L / low_freq_factor divided by `factor`, and those between blended,
// (1 - s) inv_freq / factor + s inv_freq with s = (L / w - low_freq_factor) /
// (high_freq_factor - low_freq_factor). The attention scale is unchanged.
struct RopeScaling {
  enum class Kind { kNone, kLlama3 } kind = Kind::kNone;
  double factor = 1, low_freq_factor = 1, high_freq_factor = 4;
  int64_t original_max_positions = 8192;
};

// inv_freq [head_dim / 2] in f32 math as PyTorch computes it, scaling included.
std::vector<float> RopeInvFrequencies(int64_t head_dim, float theta,
                                      const RopeScaling& scaling = {});

class RopeTable {
 public:
  RopeTable() = default;
  RopeTable(int64_t head_dim, float theta, int64_t max_positions, const RopeScaling& scaling = {});
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
// Reference computing the angles itself in double from theta (and the scaling's rule).
void ApplyRopeReference(float theta, RopeStyle style, const int32_t* pos, int64_t rows,
                        int64_t n_heads, int64_t head_dim, float* x,
                        const RopeScaling& scaling = {});

}  // namespace fathom
