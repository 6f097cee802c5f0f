// BlockPool: the KV cache's memory, preallocated once and handed out in fixed-size blocks.
//
// One block holds block_size token rows of ONE physical KV layer:
//   K [block_size, row_floats] f32, then V [block_size, row_floats] f32
// (row_floats = n_kv_heads * head_dim). Blocks live in one 64-byte-aligned buffer; block b
// starts at k_base() + b * block_stride_floats() (K) and v_base() + b * block_stride_floats()
// (V), so a kernel given block ids can address rows without calling the pool. Each half is
// padded to 64 bytes (no padding when block_size * row_floats is a multiple of 16, e.g. the
// default block_size 16), so every block starts on a cache line.
//
// Block contents are undefined until written. Allocate is all-or-nothing; freeing a block
// twice or a foreign id is a bug (FATHOM_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace fathom {

class BlockPool {
 public:
  static constexpr int32_t kDefaultBlockSize = 16;

  BlockPool(int64_t num_blocks, int32_t block_size, int64_t row_floats);

  // Bytes of one block (K and V, padding included), and how many blocks fit `bytes`.
  static size_t BytesPerBlock(int32_t block_size, int64_t row_floats);
  static int64_t BlocksForBudget(size_t bytes, int32_t block_size, int64_t row_floats);

  // Appends n free block ids to *out, or returns false and changes nothing if fewer than
  // n are free.
  bool Allocate(int64_t n, std::vector<int32_t>* out);
  void Free(std::span<const int32_t> blocks);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  bool is_used(int32_t block) const;
  int32_t block_size() const { return block_size_; }
  int64_t row_floats() const { return row_floats_; }
  size_t bytes_per_block() const { return static_cast<size_t>(stride_) * sizeof(float); }

  float* k_base() { return data_.get(); }
  float* v_base() { return data_.get() + half_; }
  const float* k_base() const { return data_.get(); }
  const float* v_base() const { return data_.get() + half_; }
  int64_t block_stride_floats() const { return stride_; }
  // The first row of a block's K / V; row t of the block is t * row_floats() further.
  float* k(int32_t block) { return k_base() + Offset(block); }
  float* v(int32_t block) { return v_base() + Offset(block); }
  const float* k(int32_t block) const { return k_base() + Offset(block); }
  const float* v(int32_t block) const { return v_base() + Offset(block); }

 private:
  struct AlignedDelete {
    void operator()(float* p) const;
  };
  int64_t Offset(int32_t block) const;

  int64_t num_blocks_;
  int32_t block_size_;
  int64_t row_floats_;
  int64_t half_;    // floats of K (or V) of one block, padded to 64 bytes
  int64_t stride_;  // 2 * half_
  std::unique_ptr<float[], AlignedDelete> data_;
  std::vector<int32_t> free_;    // stack of free ids; the lowest id is handed out first
  std::vector<uint8_t> in_use_;  // [num_blocks]
};

}  // namespace fathom
