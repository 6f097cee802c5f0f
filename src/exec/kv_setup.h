// Builds the KV layer table and KV manager a model needs: the bridge between ModelSpec
// (model/) and the KV layer (kv/), which knows nothing of models.
#pragma once

#include <cstdint>
#include <memory>

#include "core/status.h"
#include "kv/kv_manager.h"
#include "model/model_spec.h"

namespace fathom {

// The stage shape of `spec` with loop steps 0..max_depth-1 (0 for a dense model).
KvModelShape KvShapeOf(const ModelSpec& spec, int32_t max_depth);

// A KV manager with `num_blocks` blocks of `block_size` token rows (kv_dim values) of
// `kv_dtype` (kF32, kBF16 or kI8: int8 with a scale per token and KV head).
Result<std::unique_ptr<KvManager>> MakeKvManager(const ModelSpec& spec, int32_t max_depth,
                                                 KvLayout layout, int32_t shared_after,
                                                 int64_t num_blocks, int32_t block_size,
                                                 DType kv_dtype);

}  // namespace fathom
