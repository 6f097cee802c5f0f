// KvManager: the paged KV cache of all sequences, over one KvLayerTable and one BlockPool.
// It owns memory and never schedules: the scheduler asks BlocksNeeded before admitting or
// growing a sequence, then calls Grow, which either succeeds or changes nothing.
//
// Per sequence and per physical layer p, a block table maps position t to
//   block = table[p][t / block_size], row t % block_size of that block,
// with -1 where p stores no position of that block's range. Which positions a layer stores
// comes from the table: prompt positions (t < prompt_len) are kPrompt, the rest kDecode,
// and StoresPhase(p, phase) says whether p holds them. So hybrid's depth core slots get
// blocks over [0, prompt_len) only and its shared slots over [prompt_len, length) only; a
// block straddling prompt_len is allocated whole for the layer that needs part of it
// (those unused rows are the only slack besides the last partial block).
//
// All tables of a sequence have ceil(length / block_size) entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_layout.h"

namespace fathom {

class KvManager {
 public:
  using SeqId = int32_t;

  // num_blocks blocks of block_size rows of row_floats (= kv_dim) values each, stored as
  // `dtype` (kF32, kBF16 or kI8, whose rows keep a scale for each of their `heads` KV heads).
  // The table is copied. Use BlockPool::BlocksForBudget (same dtype and heads) to size
  // num_blocks from bytes.
  KvManager(const KvLayerTable& table, int64_t num_blocks, int32_t block_size, int64_t row_floats,
            DType dtype = DType::kF32, int64_t heads = 1);

  // Registers a sequence whose first prompt_len positions are prompt tokens. Takes no
  // blocks yet. Ids are never reused. max_len, when the caller knows it (prompt +
  // max_tokens), reserves the block tables for that many positions so that Grow up to it
  // allocates no memory (the engine's steady decode loop; tests/alloc).
  SeqId AddSequence(int64_t prompt_len, int64_t max_len = 0);
  // Makes positions [0, new_len) writable in every physical layer that stores them.
  // All-or-nothing: returns false, changing nothing, if the pool lacks blocks.
  // new_len <= length(s) is a no-op (sequences never shrink).
  bool Grow(SeqId s, int64_t new_len);
  // Blocks Grow(s, new_len) would allocate.
  int64_t BlocksNeeded(SeqId s, int64_t new_len) const;
  // Blocks a sequence with this prompt length holds at length `len` (for admission
  // decisions before AddSequence).
  int64_t BlocksFor(int64_t prompt_len, int64_t len) const;
  // Frees all blocks of s; s becomes invalid.
  void Release(SeqId s);

  // Row `pos` of physical layer p: row_floats floats. CHECK-fails if not allocated, and
  // for a bf16 pool (whose rows are read and written through pool().ReadRow / WriteRow).
  float* K(SeqId s, int32_t physical_layer, int64_t pos);
  float* V(SeqId s, int32_t physical_layer, int64_t pos);
  const float* K(SeqId s, int32_t physical_layer, int64_t pos) const;
  const float* V(SeqId s, int32_t physical_layer, int64_t pos) const;
  // ceil(length / block_size) block ids (-1: not stored there); valid until the next Grow
  // or Release of s.
  const int32_t* BlockTable(SeqId s, int32_t physical_layer) const;
  int64_t num_table_blocks(SeqId s) const;

  int64_t length(SeqId s) const { return Get(s).length; }
  int64_t prompt_len(SeqId s) const { return Get(s).prompt_len; }
  bool contains(SeqId s) const { return seqs_.count(s) != 0; }
  int64_t num_sequences() const { return static_cast<int64_t>(seqs_.size()); }

  // Copies K and V of position pos from one physical layer to another (for ExitCopies).
  void CopyRow(SeqId s, int64_t pos, int32_t from_layer, int32_t to_layer);

  // Memory account. BytesPerToken = LayersPerToken(phase) * 2 * the pool's row_bytes()
  // (row_floats x 4 for f32, x 2 for bf16, x 1 plus 4 per head for int8): what one token adds
  // asymptotically; bytes_* count whole blocks (padding included).
  size_t BytesPerToken(TokenPhase phase) const;
  size_t bytes_total() const { return static_cast<size_t>(pool_.num_blocks()) * BlockBytes(); }
  size_t bytes_used() const { return static_cast<size_t>(pool_.num_used()) * BlockBytes(); }
  size_t bytes_free() const { return static_cast<size_t>(pool_.num_free()) * BlockBytes(); }

  int32_t block_size() const { return pool_.block_size(); }
  int64_t row_floats() const { return pool_.row_floats(); }
  DType dtype() const { return pool_.dtype(); }
  const BlockPool& pool() const { return pool_; }
  BlockPool& pool() { return pool_; }
  const KvLayerTable& table() const { return table_; }

 private:
  struct Seq {
    int64_t prompt_len = 0, length = 0;
    std::vector<std::vector<int32_t>> blocks;  // [physical layer][block index]
  };
  struct BlockRange {
    int64_t begin = 0, end = 0;  // block indices [begin, end)
  };

  const Seq& Get(SeqId s) const;
  Seq& Get(SeqId s);
  size_t BlockBytes() const { return pool_.bytes_per_block(); }
  // Blocks of physical layer p that positions [0, len) of a sequence need.
  BlockRange Needed(int32_t p, int64_t prompt_len, int64_t len) const;
  // The same for any layer that stores prompt positions iff `prompt` and decode positions
  // iff `decode` (Needed depends on nothing else about the layer).
  BlockRange NeededFor(bool prompt, bool decode, int64_t prompt_len, int64_t len) const;
  int64_t RowOffset(const Seq& q, int32_t p, int64_t pos) const;  // elements from the base

  KvLayerTable table_;
  // Physical layers by the phases they store, [stores prompt][stores decode]: BlocksFor is
  // a sum over these four kinds instead of over every layer (the scheduler and the budget
  // controller ask it for every request in flight, every step).
  int64_t layers_by_phase_[2][2] = {};
  BlockPool pool_;
  std::vector<int32_t> fresh_;  // Grow's newly allocated block ids, kept for its capacity
  std::unordered_map<SeqId, Seq> seqs_;
  SeqId next_id_ = 0;
};

}  // namespace fathom
