// ModelSpec: everything fathom knows about a model's structure, as data.
//
// Every family (dense, LCKV, Ouro, Huginn) is described by the same stage structure:
//
//   h = embed(ids) * embed_scale                      [n, E]
//   h = prelude layers(h)                              (a dense model is all prelude)
//   if looped:                                         core layers x R loop steps
//     e = h; x = initial state (e | zero | random)
//     repeat R times:
//       u = core input (x, or adapter(cat[x, e]))
//       x = core layers(u)          each (layer, step) has its own KV layer
//       x = step_norm ? final_norm(x) : x              (Ouro feeds the normed state on)
//       exit signal of x            (Ouro: gate hazard on x; Huginn: latent change)
//     x = after_loop_norm ? final_norm(x) : x          (Huginn: ln_f before the coda)
//   h = coda layers(x)
//   h = before_head_norm ? final_norm(h) : h
//   logits = lm_head(h)                                [n, V]
//
// Each layer is one transformer block whose norm placement is data (BlockNorms), so the
// pre-norm (Llama/Qwen), sandwich (Ouro) and post-norm (Huginn) blocks are one code path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/rope.h"

namespace fathom {

// Tensor names of one block; an empty name means "absent". The block computes
//   x = attn_post(x + attn_out(attn(attn_in(x))))
//   x = mlp_post(x + mlp_out(mlp(mlp_in(x))))
// with absent norms as identity.
struct LayerNames {
  std::string attn_in_norm, attn_out_norm, attn_post_norm;
  std::string mlp_in_norm, mlp_out_norm, mlp_post_norm;
  std::vector<std::string> qkv;       // {q, k, v} or one fused {Wqkv}: rows q | k | v
  std::vector<std::string> qkv_bias;  // empty, or one per qkv entry
  std::string q_norm, k_norm;         // Qwen3: RMSNorm over head_dim, per head, before RoPE
  std::string qk_bias;                // Huginn: [2, 1, n_heads, head_dim] added to q and k
  std::string o_proj;
  std::vector<std::string> gate_up;   // {gate, up} or one fused {fc}: rows gate | up
  std::string down;
  // L2A (docs/L2A_FORMAT.md); empty without gates. Router: fc1 [R, E+F] (+ bias), fc2 [G, R]
  // (+ bias); a linear router (R = 0) has only fc1 [G, E+F] (+ bias).
  std::string router_fc1, router_fc1_bias, router_fc2, router_fc2_bias;
  // LoRA adapters merged at load: base weight name (one of the names above) -> A [r, in], B [out, r].
  struct Lora {
    std::string base, a, b;
  };
  std::vector<Lora> lora;
};

enum class StageKind { kPrelude, kCore, kCoda };

// What one layer's attention reads and writes, as data (identity for every family but
// LCKV / CLA-style cross-layer KV). Query at position p, key positions j:
//   keys of layer kv_source, j <= p (j < p with no_diag), and j > p - window if window > 0.
// A row with no visible key has a zero attention output.
struct LayerAttention {
  int32_t kv_source = -1;   // the layer whose KV this layer attends to; -1: its own
  bool produces_kv = true;  // some layer reads its KV: it has k_proj / v_proj and KV storage
  bool no_diag = false;     // masks its own position (LCKV: force_nodiag, or a later source)
  int64_t window = 0;       // > 0: sliding-window attention over this many positions
};

struct LayerSpec {
  StageKind stage = StageKind::kPrelude;
  int32_t index_in_stage = 0;
  LayerNames names;
  LayerAttention attn;
};

// LCKV's prompt-parallel processing. A layer group [begin, end) whose layers read the KV
// of a later layer of the group is cyclic: a prompt chunk of more than sequential_max
// tokens runs the group `passes` (m + b) times from the same input, the KV of zero_kv's
// layers (the later sources) for the chunk's positions zeroed first and rewritten by each
// pass; only the last pass's output and KV are kept. Other layers run once. Chunks of at
// most sequential_max tokens, and decode tokens, run token by token, which is exact.
struct IteratedGroup {
  int32_t begin = 0, end = 0;    // layers [begin, end)
  std::vector<int32_t> zero_kv;  // layers whose KV the group reads before writing it
};
struct PromptIteration {
  std::vector<IteratedGroup> groups;  // in layer order; empty: no cyclic group
  int32_t passes = 1;                 // m + b
  int64_t sequential_max = 0;         // chunks of at most this many tokens go token by token
  bool active() const { return !groups.empty(); }
};

enum class CoreInput {
  kState,            // u = x (Ouro)
  kAdapterOnConcat,  // u = adapter(cat[x, e]) with adapter [E, 2E] (Huginn)
};

enum class InitialState {
  kPreludeOutput,  // x0 = e (Ouro: the embeddings)
  kZero,           // Huginn, deterministic
  kRandom,         // Huginn "like-init": truncated normal * embed_scale, seeded
};

enum class ExitSignal {
  kNone,
  kGateHazard,   // Ouro: lambda = sigmoid(gate(x)); exit by cumulative probability >= q
  kLatentDiff,   // Huginn: ||x_r - x_{r-1}|| / ||x_r|| below a threshold (also KL on request)
};

struct LoopSpec {
  bool looped = false;
  int32_t default_loops = 0;  // total_ut_steps (Ouro), mean_recurrence (Huginn)
  int32_t max_loops = 0;      // the most a user may ask for
  CoreInput core_input = CoreInput::kState;
  InitialState initial_state = InitialState::kPreludeOutput;
  bool step_norm = false;        // final_norm after every loop step (Ouro)
  bool after_loop_norm = false;  // final_norm once after the loop (Huginn)
  ExitSignal exit_signal = ExitSignal::kNone;
  std::string adapter;                    // Huginn: transformer.adapter.weight
  std::string exit_gate, exit_gate_bias;  // Ouro: model.early_exit_gate.{weight,bias}
};

// L2A gates (docs/L2A_FORMAT.md): per token and layer, a router reading the layer's normed
// input and an embedding of the budget b decides whether the attention and MLP sub-layers
// run and which query heads are kept. Dense families only.
enum class SkippedKv {
  kCompute,  // a token that skips attention still writes its K/V; later tokens read them
  kMask,     // it writes none, and no later token sees its position at that layer
};
struct L2aSpec {
  bool enabled = false;
  bool gate_attention = false, gate_mlp = false, gate_heads = false;
  int32_t router_hidden = 0;    // R; 0: a linear router
  int32_t budget_features = 0;  // K: phi(b) has 2K + 1 entries
  SkippedKv skipped_kv = SkippedKv::kCompute;
  int32_t lora_rank = 0;        // 0: no LoRA
  double lora_alpha = 0;
  std::vector<std::string> lora_targets;  // q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
  // lora.budget_ramp [full, off]: a token at b runs with lora_share(b) of the LoRA (1 at
  // b <= full, 0 at b >= off, linear between), so the LoRA stays apart from the base weights.
  bool lora_ramp = false;
  double lora_ramp_full = 0, lora_ramp_off = 1;

  int64_t features() const { return 2 * int64_t{budget_features} + 1; }  // F
  // The share of the LoRA a token at budget b runs with (1 without a ramp).
  double lora_share(double b) const {
    if (!lora_ramp || b <= lora_ramp_full) return 1.0;
    if (b >= lora_ramp_off) return 0.0;
    return (lora_ramp_off - b) / (lora_ramp_off - lora_ramp_full);
  }
  // G: router outputs, in the order attention, mlp, heads 0 .. H-1 (those gated).
  int64_t outputs(int64_t n_heads) const {
    return (gate_attention ? 1 : 0) + (gate_mlp ? 1 : 0) + (gate_heads ? n_heads : 0);
  }
};

struct ModelSpec {
  std::string model_type;  // config.json model_type
  int64_t hidden = 0;      // E
  int64_t intermediate = 0;
  int64_t vocab = 0;       // V (rows of the embedding and LM head)
  int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float norm_eps = 1e-6f;
  float rope_theta = 10000.f;
  RopeStyle rope_style = RopeStyle::kNeox;
  RopeScaling rope_scaling;  // config.json's rope_scaling (none unless set)
  int64_t max_positions = 2048;
  float embed_scale = 1.f;
  bool tie_embeddings = false;
  int32_t bos_id = -1, eos_id = -1, pad_id = -1;  // from config.json; -1: none

  std::vector<LayerSpec> layers;  // prelude, then core, then coda, in execution order
  int32_t n_prelude = 0, n_core = 0, n_coda = 0;
  LoopSpec loop;
  PromptIteration prompt_iteration;  // LCKV; inactive for every other family
  L2aSpec l2a;                       // gates; disabled unless config.json has an `l2a` block
  bool before_head_norm = true;  // false for Ouro: its state is normed at the end of each step

  std::string embed_name, final_norm_name, lm_head_name;
  // Tensors a checkpoint may carry that fathom ignores (e.g. Huginn's freqs_cis buffer).
  std::vector<std::string> ignored_tensors;

  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
};

}  // namespace fathom
