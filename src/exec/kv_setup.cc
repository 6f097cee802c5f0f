#include "exec/kv_setup.h"

namespace fathom {

KvModelShape KvShapeOf(const ModelSpec& spec, int32_t max_depth) {
  KvModelShape shape;
  shape.n_prelude = spec.n_prelude;
  shape.n_core = spec.n_core;
  shape.n_coda = spec.n_coda;
  shape.max_depth = spec.loop.looped ? max_depth : 0;
  // Cross-layer KV (LCKV, CLA): the layer each layer's attention reads.
  for (size_t i = 0; i < spec.layers.size(); ++i)
    if (spec.layers[i].attn.kv_source >= 0 && spec.layers[i].attn.kv_source != static_cast<int32_t>(i)) {
      shape.reads_from.resize(spec.layers.size());
      for (size_t j = 0; j < spec.layers.size(); ++j) {
        const int32_t src = spec.layers[j].attn.kv_source;
        shape.reads_from[j] = src >= 0 ? src : static_cast<int32_t>(j);
      }
      break;
    }
  return shape;
}

Result<std::unique_ptr<KvManager>> MakeKvManager(const ModelSpec& spec, int32_t max_depth,
                                                 KvLayout layout, int32_t shared_after,
                                                 int64_t num_blocks, int32_t block_size,
                                                 DType kv_dtype) {
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table,
                          KvLayerTable::Build(KvShapeOf(spec, max_depth), layout, shared_after));
  return std::make_unique<KvManager>(table, num_blocks, block_size, spec.kv_dim(), kv_dtype,
                                     spec.n_kv_heads);
}

}  // namespace fathom
