#include "exec/kv_setup.h"

namespace fathom {

KvModelShape KvShapeOf(const ModelSpec& spec, int32_t max_depth) {
  KvModelShape shape;
  shape.n_prelude = spec.n_prelude;
  shape.n_core = spec.n_core;
  shape.n_coda = spec.n_coda;
  shape.max_depth = spec.loop.looped ? max_depth : 0;
  return shape;
}

Result<std::unique_ptr<KvManager>> MakeKvManager(const ModelSpec& spec, int32_t max_depth,
                                                 KvLayout layout, int32_t shared_after,
                                                 int64_t num_blocks, int32_t block_size) {
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table,
                          KvLayerTable::Build(KvShapeOf(spec, max_depth), layout, shared_after));
  return std::make_unique<KvManager>(table, num_blocks, block_size, spec.kv_dim());
}

}  // namespace fathom
