#include "kv/kv_manager.h"

#include <algorithm>

#include "core/check.h"

namespace fathom {

KvManager::KvManager(const KvLayerTable& table, int64_t num_blocks, int32_t block_size,
                     int64_t row_floats, DType dtype, int64_t heads)
    : table_(table), pool_(num_blocks, block_size, row_floats, dtype, heads) {
  for (int32_t p = 0; p < table_.num_physical_layers(); ++p)
    ++layers_by_phase_[table_.StoresPhase(p, TokenPhase::kPrompt)][table_.StoresPhase(p, TokenPhase::kDecode)];
}

const KvManager::Seq& KvManager::Get(SeqId s) const {
  const auto it = seqs_.find(s);
  FATHOM_CHECK_MSG(it != seqs_.end(), "unknown or released sequence " << s);
  return it->second;
}

KvManager::Seq& KvManager::Get(SeqId s) {
  const auto it = seqs_.find(s);
  FATHOM_CHECK_MSG(it != seqs_.end(), "unknown or released sequence " << s);
  return it->second;
}

KvManager::SeqId KvManager::AddSequence(int64_t prompt_len, int64_t max_len) {
  FATHOM_CHECK_MSG(prompt_len >= 0, "prompt_len=" << prompt_len);
  const SeqId id = next_id_++;
  Seq& q = seqs_[id];
  q.prompt_len = prompt_len;
  q.blocks.resize(static_cast<size_t>(table_.num_physical_layers()));
  const int64_t bs = block_size();
  for (std::vector<int32_t>& blocks : q.blocks) blocks.reserve(static_cast<size_t>((max_len + bs - 1) / bs));
  return id;
}

KvManager::BlockRange KvManager::Needed(int32_t p, int64_t prompt_len, int64_t len) const {
  return NeededFor(table_.StoresPhase(p, TokenPhase::kPrompt), table_.StoresPhase(p, TokenPhase::kDecode),
                   prompt_len, len);
}

KvManager::BlockRange KvManager::NeededFor(bool prompt, bool decode, int64_t prompt_len, int64_t len) const {
  // Positions stored among [0, len): prompt positions [0, prompt_len) and/or decode
  // positions [prompt_len, len).
  const int64_t lo = prompt ? 0 : prompt_len;
  const int64_t hi = decode ? len : std::min(len, prompt_len);
  if (hi <= lo) return {};
  const int64_t bs = block_size();
  return {lo / bs, (hi + bs - 1) / bs};
}

int64_t KvManager::BlocksFor(int64_t prompt_len, int64_t len) const {
  int64_t n = 0;
  for (const bool prompt : {false, true})
    for (const bool decode : {false, true}) {
      const int64_t layers = layers_by_phase_[prompt][decode];
      if (layers == 0) continue;
      const BlockRange r = NeededFor(prompt, decode, prompt_len, len);
      n += layers * (r.end - r.begin);
    }
  return n;
}

int64_t KvManager::BlocksNeeded(SeqId s, int64_t new_len) const {
  const Seq& q = Get(s);
  if (new_len <= q.length) return 0;
  return BlocksFor(q.prompt_len, new_len) - BlocksFor(q.prompt_len, q.length);
}

bool KvManager::Grow(SeqId s, int64_t new_len) {
  Seq& q = Get(s);
  if (new_len <= q.length) return true;
  std::vector<int32_t>& fresh = fresh_;  // reused: a growing sequence allocates no memory here
  fresh.clear();
  if (!pool_.Allocate(BlocksNeeded(s, new_len), &fresh)) return false;
  // A layer's stored range only extends at its end (its start, 0 or prompt_len, is
  // fixed), so the new blocks are [old end, new end), or the whole new range if the
  // layer stored nothing yet.
  const int64_t bs = block_size();
  const size_t n_table = static_cast<size_t>((new_len + bs - 1) / bs);
  size_t next = 0;
  for (int32_t p = 0; p < table_.num_physical_layers(); ++p) {
    const BlockRange before = Needed(p, q.prompt_len, q.length);
    const BlockRange after = Needed(p, q.prompt_len, new_len);
    std::vector<int32_t>& blocks = q.blocks[p];
    blocks.resize(n_table, -1);
    const int64_t start = before.end > before.begin ? before.end : after.begin;
    for (int64_t b = start; b < after.end; ++b) blocks[b] = fresh[next++];
  }
  FATHOM_CHECK_MSG(next == fresh.size(), "placed " << next << " of " << fresh.size());
  q.length = new_len;
  return true;
}

void KvManager::Release(SeqId s) {
  std::vector<int32_t> held;
  for (const std::vector<int32_t>& blocks : Get(s).blocks) {
    for (const int32_t b : blocks) {
      if (b >= 0) held.push_back(b);
    }
  }
  pool_.Free(held);
  seqs_.erase(s);
}

int64_t KvManager::RowOffset(const Seq& q, int32_t p, int64_t pos) const {
  FATHOM_CHECK_MSG(p >= 0 && p < table_.num_physical_layers(),
                   "physical_layer=" << p << " num_physical=" << table_.num_physical_layers());
  FATHOM_CHECK_MSG(pos >= 0 && pos < q.length, "pos=" << pos << " length=" << q.length);
  const int64_t bs = block_size();
  const int32_t block = q.blocks[p][pos / bs];
  FATHOM_CHECK_MSG(block >= 0, "physical layer " << p << " stores no position " << pos
                                                 << " (prompt_len " << q.prompt_len << ")");
  return int64_t{block} * pool_.block_stride() + (pos % bs) * row_floats();
}

float* KvManager::K(SeqId s, int32_t physical_layer, int64_t pos) {
  return pool_.k_base() + RowOffset(Get(s), physical_layer, pos);
}
float* KvManager::V(SeqId s, int32_t physical_layer, int64_t pos) {
  return pool_.v_base() + RowOffset(Get(s), physical_layer, pos);
}
const float* KvManager::K(SeqId s, int32_t physical_layer, int64_t pos) const {
  return pool_.k_base() + RowOffset(Get(s), physical_layer, pos);
}
const float* KvManager::V(SeqId s, int32_t physical_layer, int64_t pos) const {
  return pool_.v_base() + RowOffset(Get(s), physical_layer, pos);
}

const int32_t* KvManager::BlockTable(SeqId s, int32_t physical_layer) const {
  const Seq& q = Get(s);
  FATHOM_CHECK_MSG(physical_layer >= 0 && physical_layer < table_.num_physical_layers(),
                   "physical_layer=" << physical_layer);
  return q.blocks[physical_layer].data();
}

int64_t KvManager::num_table_blocks(SeqId s) const {
  const int64_t bs = block_size();
  return (Get(s).length + bs - 1) / bs;
}

void KvManager::CopyRow(SeqId s, int64_t pos, int32_t from_layer, int32_t to_layer) {
  const Seq& q = Get(s);
  RowOffset(q, from_layer, pos);  // for its checks: both rows are allocated
  RowOffset(q, to_layer, pos);
  const int64_t bs = block_size();
  const auto t = static_cast<int32_t>(pos % bs);
  pool_.CopyRow(q.blocks[from_layer][pos / bs], t, q.blocks[to_layer][pos / bs], t);
}

size_t KvManager::BytesPerToken(TokenPhase phase) const {
  return static_cast<size_t>(table_.LayersPerToken(phase)) * 2 * pool_.row_bytes();
}

}  // namespace fathom
