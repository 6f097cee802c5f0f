#include "bench/roofline.h"

#include "bench/model_flops.h"

namespace fathom::bench {

DecodeStepWork CountDecodeStep(const ModelSpec& spec, int32_t loops, int64_t batch, double context,
                               double weight_bytes, double kv_value_bytes) {
  const StageFlops f = CountFlops(spec);
  const double rows = static_cast<double>(batch);
  const double head = 2.0 * static_cast<double>(spec.hidden) * static_cast<double>(spec.vocab);
  // Attention executions per token: every prelude and coda layer once, the core `loops` times.
  const double executions = spec.n_prelude + static_cast<double>(loops) * spec.n_core + spec.n_coda;
  DecodeStepWork w;
  w.weight_bytes = weight_bytes;
  w.kv_bytes = rows * executions * context * 2.0 * static_cast<double>(spec.kv_dim()) * kv_value_bytes;
  w.layer_ops = rows * (f.prelude + loops * f.core_step + f.coda - head);
  w.head_ops = rows * head;
  w.attention_ops = rows * executions * 4.0 * static_cast<double>(spec.q_dim()) * context;
  return w;
}

Roofline DecodeRoofline(const DecodeStepWork& w, Arithmetic layers, Arithmetic head, double bandwidth_gbs,
                        const ComputePeak& peak) {
  auto time = [](double ops, double gops) { return gops > 0 ? ops / (gops * 1e9) : 0.0; };
  Roofline r;
  r.memory_s = bandwidth_gbs > 0 ? (w.weight_bytes + w.kv_bytes) / (bandwidth_gbs * 1e9) : 0.0;
  r.compute_s = time(w.layer_ops, peak.of(layers)) + time(w.head_ops, peak.of(head)) +
                time(w.attention_ops, peak.of(Arithmetic::kF32Fma));
  return r;
}

}  // namespace fathom::bench
