#include "kv/kv_layout.h"

#include <algorithm>
#include <array>
#include <limits>
#include <sstream>

#include "core/check.h"

namespace fathom {

namespace {

struct LayoutName {
  KvLayout layout;
  std::string_view name;
};
constexpr std::array<LayoutName, 5> kLayoutNames = {{
    {KvLayout::kDepthIndexed, "depth-indexed"},
    {KvLayout::kLastExited, "last-exited"},
    {KvLayout::kShared, "shared"},
    {KvLayout::kFirstThenShared, "first-then-shared"},
    {KvLayout::kHybrid, "hybrid"},
}};

// Shape errors, or Ok. Only the counts; reads_from is checked by CheckReadsFrom.
Status CheckCounts(const KvModelShape& s) {
  std::ostringstream os;
  if (s.n_prelude < 0 || s.n_core < 0 || s.n_coda < 0) {
    os << "KV layer table: negative layer count (prelude " << s.n_prelude << ", core "
       << s.n_core << ", coda " << s.n_coda << ")";
    return Status::Error(os.str());
  }
  if (s.num_layers() == 0) return Status::Error("KV layer table: the model has no layers");
  if (s.max_depth < 0 || (s.n_core > 0 && s.max_depth < 1)) {
    os << "KV layer table: max_depth must be >= 1 for a model with " << s.n_core
       << " core layers (got " << s.max_depth << ")";
    return Status::Error(os.str());
  }
  // Slots of the largest layout (hybrid) must fit an int32 id.
  const int64_t slots = int64_t{s.n_prelude} + int64_t{s.n_coda} +
                        (int64_t{s.max_depth} + 1) * int64_t{s.n_core};
  if (slots > std::numeric_limits<int32_t>::max()) {
    os << "KV layer table: " << slots << " physical layers do not fit an int32 id";
    return Status::Error(os.str());
  }
  return Status::Ok();
}

// Sets *cross to whether reads_from is a non-identity map.
Status CheckReadsFrom(const KvModelShape& s, bool* cross) {
  *cross = false;
  if (s.reads_from.empty()) return Status::Ok();
  const int32_t n = s.num_layers();
  std::ostringstream os;
  if (static_cast<int64_t>(s.reads_from.size()) != n) {
    os << "KV layer table: reads_from has " << s.reads_from.size() << " entries, the model has "
       << n << " layers";
    return Status::Error(os.str());
  }
  for (int32_t i = 0; i < n; ++i) {
    const int32_t t = s.reads_from[i];
    if (t < 0 || t >= n) {
      os << "KV layer table: reads_from[" << i << "] = " << t << " is not a layer (0.." << n - 1
         << ")";
      return Status::Error(os.str());
    }
    if (t != i) *cross = true;
  }
  if (*cross && s.max_depth > 0) {
    os << "KV layer table: cross-layer KV sharing (reads_from) is only supported for "
          "non-looped models, but max_depth = "
       << s.max_depth;
    return Status::Error(os.str());
  }
  return Status::Ok();
}

}  // namespace

Result<KvLayout> ParseKvLayout(std::string_view name) {
  std::string names;
  for (const LayoutName& l : kLayoutNames) {
    if (l.name == name) return l.layout;
    if (!names.empty()) names.append(", ");
    names.append(l.name);
  }
  std::string msg = "unknown KV layout \"";
  msg.append(name).append("\"; expected one of: ").append(names);
  return Status::Error(std::move(msg));
}

std::string_view KvLayoutName(KvLayout layout) {
  for (const LayoutName& l : kLayoutNames) {
    if (l.layout == layout) return l.name;
  }
  FATHOM_CHECK_MSG(false, "bad KvLayout " << static_cast<int>(layout));
}

Result<KvLayerTable> KvLayerTable::Build(const KvModelShape& shape, KvLayout layout,
                                         int32_t shared_after) {
  FATHOM_RETURN_IF_ERROR(CheckCounts(shape));
  bool cross = false;
  FATHOM_RETURN_IF_ERROR(CheckReadsFrom(shape, &cross));
  const int32_t R = shape.max_depth, C = shape.n_core;
  if (layout == KvLayout::kFirstThenShared &&
      (shared_after < 1 || (C > 0 && shared_after > R))) {
    std::ostringstream os;
    os << "KV layer table: first-then-shared needs 1 <= shared_after <= max_depth (" << R
       << "), got " << shared_after;
    return Status::Error(os.str());
  }

  KvLayerTable t;
  t.shape_ = shape;
  t.layout_ = layout;
  t.shared_after_ = layout == KvLayout::kFirstThenShared ? shared_after : 1;
  t.cross_layer_ = cross;
  const int32_t L = shape.num_layers();
  t.reads_from_.resize(L);
  for (int32_t i = 0; i < L; ++i) t.reads_from_[i] = cross ? shape.reads_from[i] : i;

  // A layer produces KV iff some layer reads it (all layers, without cross-layer sharing).
  std::vector<uint8_t> produces(L, cross ? 0 : 1);
  for (int32_t i = 0; i < L; ++i) produces[t.reads_from_[i]] = 1;

  // The layout as data: per phase and step, which group of C core slots a core layer uses
  // (CoreSlot = core_base + group * C + j), and the depth index that group stores (what a
  // hole mask compares exit depths against). Nothing after Build switches on the layout.
  t.core_group_[0].assign(R, 0);
  t.core_group_[1].assign(R, 0);
  t.mask_step_.assign(R, 0);
  for (int32_t r = 0; r < R; ++r) {
    int32_t prompt = r, decode = r;
    switch (layout) {
      case KvLayout::kDepthIndexed:
      case KvLayout::kLastExited: break;
      case KvLayout::kShared: prompt = decode = 0; break;
      case KvLayout::kFirstThenShared: prompt = decode = std::min(r, shared_after - 1); break;
      case KvLayout::kHybrid: decode = R; break;  // one shared group after the R depth groups
    }
    t.core_group_[0][r] = prompt;
    t.core_group_[1][r] = decode;
    t.mask_step_[r] = prompt;
  }
  t.core_groups_ = 0;
  for (const auto& groups : t.core_group_)
    for (int32_t g : groups) t.core_groups_ = std::max(t.core_groups_, g + 1);
  // Slots in layer order: producing prelude layers, the core groups, producing coda layers.
  t.layer_slot_.assign(L, -1);
  int32_t next = 0;
  for (int32_t i = 0; i < shape.n_prelude; ++i) {
    if (produces[i]) t.layer_slot_[i] = next++;
  }
  t.core_base_ = next;
  next += t.core_groups_ * C;
  for (int32_t i = shape.n_prelude + C; i < L; ++i) {
    if (produces[i]) t.layer_slot_[i] = next++;
  }
  t.num_physical_ = next;

  t.stores_prompt_.assign(next, 1);
  t.stores_decode_.assign(next, 1);
  if (layout == KvLayout::kHybrid) {
    for (int32_t p = t.core_base_; p < t.core_base_ + R * C; ++p) t.stores_decode_[p] = 0;
    for (int32_t p = t.core_base_ + R * C; p < t.core_base_ + (R + 1) * C; ++p) {
      t.stores_prompt_[p] = 0;
    }
  }
  return t;
}

int32_t KvLayerTable::CoreSlot(int32_t j, int32_t step, TokenPhase phase) const {
  FATHOM_CHECK_MSG(step >= 0 && step < shape_.max_depth, "step=" << step << " max_depth=" << shape_.max_depth);
  const int32_t group = core_group_[phase == TokenPhase::kPrompt ? 0 : 1][static_cast<size_t>(step)];
  return core_base_ + group * shape_.n_core + j;
}

int32_t KvLayerTable::MaskStep(int32_t step) const {
  FATHOM_CHECK_MSG(step >= 0 && step < shape_.max_depth, "step=" << step << " max_depth=" << shape_.max_depth);
  return mask_step_[static_cast<size_t>(step)];
}

int32_t KvLayerTable::WriteLayer(int32_t layer, int32_t step, TokenPhase phase) const {
  FATHOM_CHECK_MSG(layer >= 0 && layer < num_layers(),
                   "layer=" << layer << " num_layers=" << num_layers());
  if (!IsCore(layer)) return layer_slot_[layer];
  FATHOM_CHECK_MSG(step >= 0 && step < shape_.max_depth,
                   "step=" << step << " max_depth=" << shape_.max_depth);
  return CoreSlot(layer - shape_.n_prelude, step, phase);
}

int32_t KvLayerTable::ReadsFrom(int32_t layer) const {
  FATHOM_CHECK_MSG(layer >= 0 && layer < num_layers(),
                   "layer=" << layer << " num_layers=" << num_layers());
  return reads_from_[layer];
}

void KvLayerTable::ReadSegments(int32_t layer, int32_t step, TokenPhase phase,
                                int64_t prompt_len, int64_t n_keys,
                                std::vector<KvSegment>* out) const {
  FATHOM_CHECK(out != nullptr);
  FATHOM_CHECK_MSG(prompt_len >= 0 && n_keys >= 0,
                   "prompt_len=" << prompt_len << " n_keys=" << n_keys);
  // A prompt query sees prompt keys only (causal); more is a caller bug.
  FATHOM_CHECK_MSG(phase == TokenPhase::kDecode || n_keys <= prompt_len,
                   "prompt query with n_keys=" << n_keys << " > prompt_len=" << prompt_len);
  const int32_t target = ReadsFrom(layer);
  if (!IsCore(layer)) {
    if (n_keys > 0) out->push_back({layer_slot_[target], 0, n_keys});
    return;
  }
  FATHOM_CHECK_MSG(step >= 0 && step < shape_.max_depth,
                   "step=" << step << " max_depth=" << shape_.max_depth);
  const int32_t j = layer - shape_.n_prelude;
  if (layout_ != KvLayout::kHybrid) {
    if (n_keys > 0) out->push_back({CoreSlot(j, step, phase), 0, n_keys});
    return;
  }
  // Hybrid: prompt keys from the depth-`step` slot, decode keys from the shared slot.
  const int64_t prompt_end = std::min(n_keys, prompt_len);
  if (prompt_end > 0) out->push_back({CoreSlot(j, step, TokenPhase::kPrompt), 0, prompt_end});
  if (n_keys > prompt_len) {
    out->push_back({CoreSlot(j, step, TokenPhase::kDecode), prompt_len, n_keys});
  }
}

void KvLayerTable::ExitCopies(int32_t steps_run,
                              std::vector<std::pair<int32_t, int32_t>>* out) const {
  FATHOM_CHECK(out != nullptr);
  FATHOM_CHECK_MSG(steps_run >= 1 && steps_run <= shape_.max_depth,
                   "steps_run=" << steps_run << " max_depth=" << shape_.max_depth);
  if (layout_ != KvLayout::kLastExited) return;
  for (int32_t j = 0; j < shape_.n_core; ++j) {
    const int32_t from = CoreSlot(j, steps_run - 1, TokenPhase::kDecode);
    for (int32_t s = steps_run; s < shape_.max_depth; ++s) {
      out->emplace_back(from, CoreSlot(j, s, TokenPhase::kDecode));
    }
  }
}

void KvLayerTable::PromptExitCopies(int32_t steps_run,
                                    std::vector<std::pair<int32_t, int32_t>>* out) const {
  FATHOM_CHECK(out != nullptr);
  FATHOM_CHECK_MSG(steps_run >= 1 && steps_run <= shape_.max_depth,
                   "steps_run=" << steps_run << " max_depth=" << shape_.max_depth);
  if (layout_ != KvLayout::kLastExited && layout_ != KvLayout::kHybrid) return;
  for (int32_t j = 0; j < shape_.n_core; ++j) {
    const int32_t from = CoreSlot(j, steps_run - 1, TokenPhase::kPrompt);
    for (int32_t s = steps_run; s < shape_.max_depth; ++s) {
      out->emplace_back(from, CoreSlot(j, s, TokenPhase::kPrompt));
    }
  }
}

bool KvLayerTable::HasHoles() const {
  if (shape_.n_core == 0) return false;
  return layout_ == KvLayout::kDepthIndexed ||
         (layout_ == KvLayout::kFirstThenShared && shared_after_ > 1);
}

bool KvLayerTable::StoresPhase(int32_t physical_layer, TokenPhase phase) const {
  FATHOM_CHECK_MSG(physical_layer >= 0 && physical_layer < num_physical_,
                   "physical_layer=" << physical_layer << " num_physical=" << num_physical_);
  return (phase == TokenPhase::kPrompt ? stores_prompt_ : stores_decode_)[physical_layer] != 0;
}

int32_t KvLayerTable::LayersPerToken(TokenPhase phase) const {
  const std::vector<uint8_t>& stores =
      phase == TokenPhase::kPrompt ? stores_prompt_ : stores_decode_;
  return static_cast<int32_t>(std::count(stores.begin(), stores.end(), uint8_t{1}));
}

std::string KvLayerTable::Describe() const {
  std::ostringstream os;
  const KvModelShape& s = shape_;
  os << "KV layout " << KvLayoutName(layout_);
  if (layout_ == KvLayout::kFirstThenShared) os << " (shared_after " << shared_after_ << ")";
  if (cross_layer_) os << ", cross-layer";
  os << ": " << s.n_prelude << " prelude + " << s.n_core << " core x " << s.max_depth
     << " steps + " << s.n_coda << " coda layers -> " << num_physical_
     << " physical KV layers\n";
  os << "  per token: prompt " << LayersPerToken(TokenPhase::kPrompt) << ", decode "
     << LayersPerToken(TokenPhase::kDecode) << " physical layers; holes: "
     << (HasHoles() ? "yes (masked by exit depth)" : "no")
     << "; exit copies: " << (layout_ == KvLayout::kLastExited ? "yes" : "no") << "\n";
  auto non_core = [&](int32_t i, const char* stage) {
    os << "  layer " << i << " " << stage << ": writes ";
    if (layer_slot_[i] < 0) os << "none"; else os << layer_slot_[i];
    os << ", reads " << layer_slot_[reads_from_[i]];
    if (reads_from_[i] != i) os << " (layer " << reads_from_[i] << ")";
    os << "\n";
  };
  for (int32_t i = 0; i < s.n_prelude; ++i) non_core(i, "prelude");
  if (layout_ == KvLayout::kHybrid && s.n_core > 0) {
    os << "  core queries read prompt keys from the prompt slot of their step, decode keys "
          "from the decode slot\n";
  }
  for (int32_t r = 0; r < (s.n_core > 0 ? s.max_depth : 0); ++r) {
    os << "  core layers " << s.n_prelude << ".." << s.n_prelude + s.n_core - 1 << " step " << r
       << ": writes";
    for (int32_t j = 0; j < s.n_core; ++j) os << " " << CoreSlot(j, r, TokenPhase::kPrompt);
    if (layout_ == KvLayout::kHybrid) {
      os << " (prompt),";
      for (int32_t j = 0; j < s.n_core; ++j) os << " " << CoreSlot(j, r, TokenPhase::kDecode);
      os << " (decode)";
    }
    os << "\n";
  }
  for (int32_t i = s.n_prelude + s.n_core; i < s.num_layers(); ++i) non_core(i, "coda");
  return os.str();
}

}  // namespace fathom
