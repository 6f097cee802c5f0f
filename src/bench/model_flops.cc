#include "bench/model_flops.h"

namespace fathom::bench {

double LayerFlops(const ModelSpec& s) {
  const double e = static_cast<double>(s.hidden);
  const double attn = e * static_cast<double>(s.q_dim()) * 2 + e * static_cast<double>(s.kv_dim()) * 2;  // q, o; k, v
  const double mlp = 3 * e * static_cast<double>(s.intermediate);
  return 2 * (attn + mlp);
}

StageFlops CountFlops(const ModelSpec& s) {
  const double layer = LayerFlops(s);
  const double e = static_cast<double>(s.hidden);
  StageFlops f;
  f.prelude = layer * s.n_prelude;
  f.core_step = layer * s.n_core;
  if (s.loop.core_input == CoreInput::kAdapterOnConcat) f.core_step += 2 * e * 2 * e;
  if (!s.loop.exit_gate.empty()) f.core_step += 2 * e;
  f.coda = layer * s.n_coda + 2 * e * static_cast<double>(s.vocab);
  return f;
}

}  // namespace fathom::bench
