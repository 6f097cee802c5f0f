// KV layouts (DESIGN.md §3): which physical KV layer a (layer, loop step, token phase)
// writes, and which physical layers and key ranges its attention reads. Every layout is
// just a different KvLayerTable; nothing else in fathom branches on the layout.
//
// Vocabulary. Layers 0..L-1 are n_prelude prelude layers, n_core core layers (run once
// per loop step r = 0..max_depth-1; steps are 0-based everywhere) and n_coda coda
// layers. A physical KV layer is one storage slot holding a K row and a V row
// (kv_dim f32 each) per token position. P = n_prelude, C = n_core, R = max_depth.
// Outside the core the step is ignored, and (without cross-layer sharing) every layout
// maps prelude layer i to slot i and coda layer i to the first slot after the core slots
// plus i. Physical layers are numbered 0..num_physical_layers()-1 in that order.
//
// Layouts (core slots; "reads" is the slot attention reads keys from):
//
//   depth-indexed      core layer j at step r -> P + r*C + j. Reads the same slot. What
//                      the models were trained with. A token that exits after s < R
//                      steps never writes steps s..R-1, so a deeper query finds holes
//                      there; the runner masks them using per-position exit depths
//                      (HasHoles() is true). Core slots: R*C.
//   last-exited        depth-indexed addressing; when a token exits after s steps its
//                      core KV at step s-1 is copied into steps s..R-1 (ExitCopies), so
//                      there are no holes: deeper queries read its last state.
//   shared             one slot per core layer for every step: P + j, overwritten each
//                      step, so a query reads every key's latest state. Core slots: C
//                      (R times less core KV than depth-indexed). Opt-in: Ouro collapses
//                      when the prompt shares slots too.
//   first-then-shared  slot P + min(r, S-1)*C + j, S = shared_after in [1, R]: the first
//                      S-1 steps are depth-indexed, steps >= S-1 share the last slot.
//                      S = 1 is shared, S = R is depth-indexed. Core slots: S*C. Holes
//                      as depth-indexed when S > 1 (a token exiting after s < S steps
//                      never writes slots s..S-1).
//   hybrid             prompt tokens are depth-indexed (P + r*C + j); decode tokens
//                      write one shared slot per core layer (P + R*C + j), which ends up
//                      holding their last-exited state. A core query at step r reads
//                      prompt positions [0, prompt_len) from the depth-r slot and decode
//                      positions [prompt_len, n) from the shared slot: two segments.
//                      Depth slots store prompt positions only, the shared slots decode
//                      positions only (StoresPhase). Core slots: (R+1)*C; a prompt
//                      token occupies P + R*C + coda slots, a decode token P + C + coda.
//                      Assumes prompt tokens run all R steps (as prefill does); a
//                      prompt token that exits early would leave depth-slot holes.
//   cross-layer        (LCKV, CLA, YOCO; KvModelShape::reads_from) layer i attends to
//                      the KV of layer reads_from[i], possibly a LATER layer (LCKV's top
//                      target: "0_1_2_3_4_16_16_..._16_17_..._21"). A layer produces KV
//                      iff some layer reads from it; others write nothing (WriteLayer
//                      returns -1) and get no slot. Slots are numbered densely over the
//                      producing layers in layer order. When reads_from[i] > i, position
//                      p's KV at the target is written after layer i ran for p, so a
//                      query can see only keys the target already holds; that mask (LCKV
//                      masks the diagonal) is the runner's. Only for non-looped models:
//                      Build rejects a non-identity reads_from when max_depth > 0. Any
//                      KvLayout may be named; with no core they all coincide.
//
// Chunked prefill under the slot-sharing layouts (shared, and first-then-shared at
// steps r >= S-1). A prefill chunk runs each loop step over all of its tokens, writing
// their K/V for step r before attending, so a prompt query at step r reads:
//   - tokens of the SAME chunk (itself included): their current step-r KV;
//   - tokens of EARLIER chunks: whatever their slot holds now, i.e. their FINAL KV (the
//     KV of their last loop step), because those chunks already finished every step.
// So results depend on the chunk size there: prefilling the whole prompt as one chunk
// makes every prompt query see step-r KV of all prompt tokens (exactly depth-indexed over
// the prompt); a chunk of one token makes the prompt behave like decode. Decode tokens
// likewise read earlier tokens' final KV and their own current-step KV. depth-indexed,
// last-exited and hybrid do not depend on chunking or batch composition: each slot only
// ever holds one step's KV of a given position.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fathom {

enum class KvLayout { kDepthIndexed, kLastExited, kShared, kFirstThenShared, kHybrid };

// "depth-indexed", "last-exited", "shared", "first-then-shared", "hybrid"; the error
// lists the accepted names.
Result<KvLayout> ParseKvLayout(std::string_view name);
std::string_view KvLayoutName(KvLayout layout);

struct KvModelShape {
  int32_t n_prelude = 0, n_core = 0, n_coda = 0;
  int32_t max_depth = 0;             // r_max; must be >= 1 when n_core > 0
  std::vector<int32_t> reads_from;   // size n_layers or empty (= identity); see cross-layer
  int32_t num_layers() const { return n_prelude + n_core + n_coda; }
};

enum class TokenPhase { kPrompt, kDecode };

// Key positions [begin, end) of one sequence, stored in physical layer physical_layer.
struct KvSegment {
  int32_t physical_layer;
  int64_t begin, end;
  bool operator==(const KvSegment&) const = default;
};

class KvLayerTable {
 public:
  // Errors (bad counts, max_depth missing for a core, shared_after outside [1, max_depth]
  // for first-then-shared, reads_from of the wrong size / out of range / combined with a
  // loop) are returned, naming the field. shared_after is ignored by other layouts.
  static Result<KvLayerTable> Build(const KvModelShape& shape, KvLayout layout,
                                    int32_t shared_after = 1);

  KvLayout layout() const { return layout_; }
  const KvModelShape& shape() const { return shape_; }
  int32_t shared_after() const { return shared_after_; }
  int32_t num_physical_layers() const { return num_physical_; }
  int32_t num_layers() const { return shape_.num_layers(); }
  bool cross_layer() const { return cross_layer_; }

  // The physical layer (layer, step, phase) writes; -1 if the layer produces no KV
  // (cross-layer). step is ignored outside the core.
  int32_t WriteLayer(int32_t layer, int32_t step, TokenPhase phase) const;
  // The layer whose KV `layer` attends to (identity unless cross-layer).
  int32_t ReadsFrom(int32_t layer) const;

  // Where the keys [0, n_keys) of a sequence with prompt_len prompt tokens live, for a
  // query at (layer, step, phase). Appends the non-empty segments in position order:
  // one (none when n_keys == 0), or for hybrid core queries up to two: the depth-`step`
  // slot for [0, min(n_keys, prompt_len)) and the shared slot for [prompt_len, n_keys).
  // (A prompt query has n_keys <= prompt_len, so it reads its depth slot only.)
  void ReadSegments(int32_t layer, int32_t step, TokenPhase phase, int64_t prompt_len,
                    int64_t n_keys, std::vector<KvSegment>* out) const;

  // A token that exited after steps_run steps (1 <= steps_run <= max_depth): the
  // (from_physical, to_physical) rows to copy, for each core layer j (outer) and each
  // step s in steps_run..max_depth-1 (inner), from step steps_run-1. Appends nothing
  // except under last-exited.
  void ExitCopies(int32_t steps_run, std::vector<std::pair<int32_t, int32_t>>* out) const;
  // The same for a prompt token prefilled at steps_run < max_depth loop steps (prompts
  // that follow the budget, EngineOptions::budget_prompts): last-exited copies as above;
  // hybrid, whose prompt keys live in per-depth slots that no mask guards, copies the
  // prompt's step steps_run-1 slot into its deeper ones (the last-exited rule); the
  // layouts with holes mask them, shared overwrites one slot: nothing.
  void PromptExitCopies(int32_t steps_run, std::vector<std::pair<int32_t, int32_t>>* out) const;

  // True if an early exit leaves slots unwritten that a deeper query would read, so the
  // runner must mask by exit depth: depth-indexed, and first-then-shared with S > 1.
  bool HasHoles() const;
  // The 0-based depth whose KV a core slot read at `step` holds (step, or min(step, S-1)
  // under first-then-shared): a key is visible to a query at `step` only if its token ran
  // more than MaskStep(step) steps. Meaningful where HasHoles().
  int32_t MaskStep(int32_t step) const;
  // Whether physical_layer stores positions of tokens of this phase. Always true except
  // hybrid core slots: depth slots store prompt positions only, shared slots decode only.
  bool StoresPhase(int32_t physical_layer, TokenPhase phase) const;
  // How many physical layers one token of this phase occupies (its KV bytes are this
  // times 2 * kv_dim * sizeof(float)).
  int32_t LayersPerToken(TokenPhase phase) const;

  // A printable table (layout, counts, the slot of every (layer, step, phase)).
  std::string Describe() const;

 private:
  KvLayerTable() = default;
  int32_t CoreSlot(int32_t j, int32_t step, TokenPhase phase) const;
  bool IsCore(int32_t layer) const {
    return layer >= shape_.n_prelude && layer < shape_.n_prelude + shape_.n_core;
  }

  KvModelShape shape_;
  KvLayout layout_ = KvLayout::kDepthIndexed;
  int32_t shared_after_ = 1;
  bool cross_layer_ = false;          // reads_from is not the identity
  int32_t core_base_ = 0;             // first core slot
  int32_t core_groups_ = 0;           // core slots / n_core: R, R, 1, S or R+1 (hybrid)
  std::vector<int32_t> core_group_[2];  // [prompt, decode][step]: group of C core slots
  std::vector<int32_t> mask_step_;      // [step]: the depth its slot stores (MaskStep)
  int32_t num_physical_ = 0;
  std::vector<int32_t> reads_from_;   // [L], identity filled in
  std::vector<int32_t> layer_slot_;   // [L] slot of prelude / coda layers, -1 for none
  std::vector<uint8_t> stores_prompt_, stores_decode_;  // [num_physical]
};

}  // namespace fathom
