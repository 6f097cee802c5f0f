// The KV cache of one sequence: one contiguous f32 buffer per physical KV layer,
// K and V each [capacity, n_kv_heads * head_dim].
//
// Physical KV layers (the depth-indexed layout, as the models were trained):
//   prelude layer i          -> i
//   core layer j, loop step r (0-based) -> n_prelude + r * n_core + j
//   coda layer i             -> n_prelude + loops * n_core + i
// (Ouro's reference indexes its cache ut * L + layer, Huginn's 2 + 4 * step + layer.)
// When a decode token exits the loop at step r < loops, CopyToDeeperSteps fills the
// slots it skipped with its last K/V ("last-exited"), so later tokens never read a slot
// nothing wrote. The paged pool and the other layouts of DESIGN.md §3 replace this
// structure in the batched runner (issue 3).
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_spec.h"

namespace fathom {

class SequenceKv {
 public:
  SequenceKv(const ModelSpec& spec, int32_t loops, int64_t capacity);

  int32_t loops() const { return loops_; }
  int64_t capacity() const { return capacity_; }
  int64_t row_floats() const { return row_; }  // n_kv_heads * head_dim
  int32_t num_kv_layers() const { return static_cast<int32_t>(k_.size()); }
  size_t bytes() const;

  // `layer` indexes spec.layers; `step` is the 0-based loop step (ignored outside the core).
  int32_t KvLayer(int32_t layer, int32_t step) const;

  float* k(int32_t kv_layer, int64_t pos) { return k_[kv_layer].data() + pos * row_; }
  float* v(int32_t kv_layer, int64_t pos) { return v_[kv_layer].data() + pos * row_; }
  const float* k(int32_t kv_layer) const { return k_[kv_layer].data(); }
  const float* v(int32_t kv_layer) const { return v_[kv_layer].data(); }

  // Token at `pos` exited after `steps_run` steps: copy its last core K/V into steps
  // steps_run .. loops-1.
  void CopyToDeeperSteps(int64_t pos, int32_t steps_run);

 private:
  int32_t n_prelude_, n_core_, loops_;
  int64_t capacity_, row_;
  std::vector<std::vector<float>> k_, v_;  // [kv_layer][capacity * row_]
};

}  // namespace fathom
