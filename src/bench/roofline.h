// The roofline of one decode step: the least time the machine's measured bandwidth and
// compute peaks allow for the bytes it must read and the operations it must run, so that a
// measured step can be reported as a fraction of what the hardware could do
// (time = max(bytes / bandwidth, sum of operations / peak of their arithmetic)).
//
// A decode step of `batch` sequences, each at `context` cached positions on average, runs
// one token per sequence through the prelude, `loops` core steps and the coda (every token at
// full depth). It reads every matmul weight once (whatever the batch) and every attention
// execution's K/V; it runs 2 operations per weight per token in the layers and the LM head,
// and 4 x n_heads x head_dim x context in each attention execution (QK^T and PV).
// Norms, RoPE, activations and sampling are left out: small next to these at decode.
#pragma once

#include <cstdint>

#include "core/compute_peak.h"
#include "model/model_spec.h"

namespace fathom::bench {

struct DecodeStepWork {
  double weight_bytes = 0;     // matmul weights streamed per step (the model's own count)
  double kv_bytes = 0;         // K and V read by all attention executions of the step
  double layer_ops = 0;        // matmuls of the layers (+ Huginn's adapter, Ouro's exit gate)
  double head_ops = 0;         // the LM head
  double attention_ops = 0;    // QK^T and PV
};

// `weight_bytes`: Model's prelude + loops x core step + coda weight bytes (so quantized
// formats count their own bytes); `kv_value_bytes`: bytes per stored K or V element.
DecodeStepWork CountDecodeStep(const ModelSpec& spec, int32_t loops, int64_t batch, double context,
                               double weight_bytes, double kv_value_bytes);

struct Roofline {
  double memory_s = 0;   // (weights + K/V) / bandwidth
  double compute_s = 0;  // each part's operations over its arithmetic's peak, summed
  double seconds() const { return memory_s > compute_s ? memory_s : compute_s; }
  bool compute_bound() const { return compute_s > memory_s; }
};

// Layers and LM head each run in their own arithmetic (a quantized format keeps the head in
// the checkpoint's dtype); attention runs in f32 FMA. A peak of 0 (the CPU lacks that
// instruction) makes that part's compute time 0: pass the arithmetic the kernels really use.
Roofline DecodeRoofline(const DecodeStepWork& w, Arithmetic layers, Arithmetic head, double bandwidth_gbs,
                        const ComputePeak& peak);

}  // namespace fathom::bench
