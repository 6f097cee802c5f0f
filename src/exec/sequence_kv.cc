#include "exec/sequence_kv.h"

#include <algorithm>

#include "core/check.h"

namespace fathom {

SequenceKv::SequenceKv(const ModelSpec& spec, int32_t loops, int64_t capacity)
    : n_prelude_(spec.n_prelude),
      n_core_(spec.n_core),
      loops_(spec.loop.looped ? loops : 0),
      capacity_(capacity),
      row_(spec.kv_dim()) {
  const int32_t n = spec.n_prelude + loops_ * spec.n_core + spec.n_coda;
  const size_t floats = static_cast<size_t>(capacity * row_);
  k_.assign(static_cast<size_t>(n), std::vector<float>(floats));
  v_.assign(static_cast<size_t>(n), std::vector<float>(floats));
}

size_t SequenceKv::bytes() const { return k_.size() * 2 * static_cast<size_t>(capacity_ * row_) * 4; }

int32_t SequenceKv::KvLayer(int32_t layer, int32_t step) const {
  if (layer < n_prelude_) return layer;
  if (layer < n_prelude_ + n_core_) {
    FATHOM_CHECK_MSG(step >= 0 && step < loops_, "step=" << step << " loops=" << loops_);
    return n_prelude_ + step * n_core_ + (layer - n_prelude_);
  }
  return n_prelude_ + loops_ * n_core_ + (layer - n_prelude_ - n_core_);
}

void SequenceKv::CopyToDeeperSteps(int64_t pos, int32_t steps_run) {
  FATHOM_CHECK(steps_run >= 1 && steps_run <= loops_);
  for (int32_t j = 0; j < n_core_; ++j) {
    const int32_t from = n_prelude_ + (steps_run - 1) * n_core_ + j;
    for (int32_t s = steps_run; s < loops_; ++s) {
      const int32_t to = n_prelude_ + s * n_core_ + j;
      std::copy_n(k(from, pos), row_, k(to, pos));
      std::copy_n(v(from, pos), row_, v(to, pos));
    }
  }
}

}  // namespace fathom
