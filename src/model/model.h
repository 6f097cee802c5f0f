// Model: a ModelSpec plus its weights, loaded from a Hugging Face model directory
// (config.json + model.safetensors or index-sharded safetensors).
//
// Loading checks the checkpoint against the family's declared tensors (family.h): a missing
// tensor, an unexpected one, or a wrong shape is an error naming the file, the tensor and
// expected versus found. Matmul weights are prepacked into memory fathom owns (matmul.h),
// in the checkpoint's dtype or, with LoadOptions::weights = kInt8 / kW8A8 / kInt4 (the LM
// head: LoadOptions::lm_head), quantized at load (int8 per output channel, or int4 per group
// of 32); norms and small vectors are converted to f32. The embedding table stays
// memory-mapped (a decode step touches one row of it). L2A gate checkpoints
// (docs/L2A_FORMAT.md) add per-layer routers, and their LoRA adapters are merged into the
// base weights here (W + alpha / r * B A, in f32).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "io/safetensors.h"
#include "kernels/matmul.h"
#include "kernels/rope.h"
#include "model/model_spec.h"

namespace fathom {

// An L2A LoRA adapter kept apart from its base weights (the checkpoint's lora.budget_ramp
// makes its share depend on each token's b, so it cannot be merged at load): the adapted
// part's outputs, columns [offset, offset + out) of its (fused) Linear, gain
// share(b) * B (A x). f32; alpha / r is folded into B.
struct LoraAdapter {
  Linear a;            // [r, in]
  Linear b;            // [out, r]
  int64_t offset = 0;  // where the adapted part starts in its Linear's output row
};

struct LayerWeights {
  // RMSNorm weights, f32 [E]; empty = the norm is absent in this block kind.
  std::vector<float> attn_in_norm, attn_out_norm, attn_post_norm;
  std::vector<float> mlp_in_norm, mlp_out_norm, mlp_post_norm;
  Linear qkv;                         // [q_dim + 2 kv_dim, E] (+ bias): rows q | k | v
  std::vector<float> q_norm, k_norm;  // [D] per-head RMSNorm (Qwen3); empty if absent
  std::vector<float> q_bias, k_bias;  // [H * D] additive q/k bias (Huginn); empty if absent
  Linear o;                           // [E, q_dim]
  Linear gate_up;                     // [2 I, E]: rows gate | up
  Linear down;                        // [E, I]
  // L2A router (docs/L2A_FORMAT.md), f32 copies run in double: fc1 [R, E+F] + bias [R] and
  // fc2 [G, R] + bias [G]; a linear router has fc1 [G, E+F] + bias [G] only. Empty: no gates.
  std::vector<float> router_fc1, router_fc1_bias, router_fc2, router_fc2_bias;
  // With head gates, o_proj split by query head: o_heads[h] = o_proj[:, h D, (h+1) D) [E, D],
  // so a pruned head's columns are never applied; `o` is then left empty.
  std::vector<Linear> o_heads;
  // L2A LoRA with a budget ramp, by the Linear it adds to (the o_proj adapters read the whole
  // attention output [H D], pruned heads zero). Empty otherwise (no LoRA, or merged into W).
  std::vector<LoraAdapter> qkv_lora, o_lora, gate_up_lora, down_lora;

  // Every matmul of the block (qkv, o or o_heads, gate_up, down, the LoRA adapters).
  std::vector<Linear*> linears();
};

struct ModelWeights {
  TensorView embed;                 // [V, E], memory-mapped, any dtype
  std::vector<LayerWeights> layers;  // as spec.layers
  std::vector<float> final_norm;    // [E]
  Linear lm_head;                   // [V, E]
  Linear adapter;                   // Huginn: [E, 2 E]
  std::vector<float> exit_gate;     // Ouro: [E]
  float exit_gate_bias = 0.f;
};

struct LoadOptions {
  // Format of the per-layer matmuls (qkv, o, gate_up, down) and of Huginn's adapter.
  WeightFormat weights = WeightFormat::kCheckpoint;
  // Format of the LM head, apart from the layers': its error lands directly on the logits,
  // so it stays in the checkpoint's dtype unless asked. It is a large share of a small
  // model's bytes per token (TinyLlama: 131 of 676 MB under int4 layers), which is why
  // llama.cpp's Q4_0 / Q8_0 files quantize it too (to Q6_K / Q8_0); kW8A8 or kInt8 here is
  // the like-for-like setting. A tied head gets its own quantized copy; the embedding always
  // stays in the checkpoint's dtype (read one row per token).
  WeightFormat lm_head = WeightFormat::kCheckpoint;
  // Run bf16 matmuls with activations split into two bf16 parts (see Linear): slower,
  // for reference checks of deep looped models in bf16.
  bool split_bf16_activations = false;
  // Every matmul, the LM head included, through the batch-invariant f32 kernel
  // (Linear::MakeBatchInvariant), and attention row by row (RowGrouping::kRowByRow, not the
  // tiled prompt kernel, whose bits depend on how a schedule cuts a prompt into calls):
  // batched generation then equals generating alone bit for bit, whatever else shares a step
  // (`--batch-invariant`). Off: oneDNN, faster at large M, whose per-M kernels can move a
  // row's logits in the last bits with the batch around it, and tiled prompt attention.
  bool batch_invariant = false;
};

class Model {
 public:
  static Result<std::unique_ptr<Model>> Load(const std::string& dir, const LoadOptions& opt = {});

  const ModelSpec& spec() const { return spec_; }
  const ModelWeights& weights() const { return weights_; }
  const RopeTable& rope() const { return rope_; }
  const std::string& dir() const { return dir_; }
  // Loaded with LoadOptions::batch_invariant: the runners then also keep every other
  // kernel's bits independent of the batch (attention row by row).
  bool batch_invariant() const { return batch_invariant_; }

  // Bytes of matmul weights streamed per token, by stage (for bandwidth accounting).
  size_t prelude_weight_bytes() const;
  size_t core_step_weight_bytes() const;  // one loop step, including the adapter
  size_t coda_weight_bytes() const;       // coda layers and the LM head

 private:
  std::string dir_;
  ModelSpec spec_;
  Checkpoint checkpoint_;  // keeps the mapping of `embed` alive
  ModelWeights weights_;
  RopeTable rope_;
  bool batch_invariant_ = false;
};

}  // namespace fathom
