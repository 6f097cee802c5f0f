// BlockPool: the KV cache's memory, preallocated once and handed out in fixed-size blocks.
//
// One block holds block_size token rows of ONE physical KV layer:
//   K [block_size, row_floats], then V [block_size, row_floats]
// (row_floats = n_kv_heads * head_dim values per row) in the pool's element type: f32, or
// bf16 (half the bytes, so a byte budget holds twice the blocks; rows are rounded to
// nearest even when written), or int8 (a quarter of f32's bytes, plus the scales): a row is
// then [row_floats int8][heads f32 scales], head h's values x quantized symmetrically as
// round(x / s) with s = max |x| / 127 over that head's head_dim values (per token and head,
// so one outlier costs only its own head's row). Rows are row_stride() elements apart (the
// scales included). Blocks live in one 64-byte-aligned buffer; block b starts at
// k_data() + b * block_stride() (K) and v_data() + b * block_stride() (V), in elements, so
// a kernel given block ids can address rows without calling the pool. Each half is padded
// to 64 bytes (no padding when block_size * row_floats fills whole cache lines, e.g. the
// default block_size 16), so every block starts on a cache line.
//
// Block contents are undefined until written. Allocate is all-or-nothing; freeing a block
// twice or a foreign id is a bug (FATHOM_CHECK).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace fathom {

// The KV dtypes' flag spelling ("f32", "bf16", "int8"), and its parse (nullopt for anything
// else).
std::string_view KvDtypeName(DType t);
std::optional<DType> ParseKvDtype(std::string_view name);

class BlockPool {
 public:
  static constexpr int32_t kDefaultBlockSize = 16;

  // dtype: kF32, kBF16 or kI8 (the engine's EngineOptions::kv_dtype; f32 here so the
  // storage tests stay in floats). heads: the KV heads a row holds (row_floats / heads values
  // each), which only kI8 uses: one scale per head.
  BlockPool(int64_t num_blocks, int32_t block_size, int64_t row_floats, DType dtype = DType::kF32,
            int64_t heads = 1);

  // Bytes of one block (K and V, padding included), and how many blocks fit `bytes`.
  static size_t BytesPerBlock(int32_t block_size, int64_t row_floats, DType dtype,
                              int64_t heads = 1);
  static int64_t BlocksForBudget(size_t bytes, int32_t block_size, int64_t row_floats, DType dtype,
                                 int64_t heads = 1);
  // Elements (of dtype) from one row to the next: row_floats, plus kI8's 4 * heads scale bytes.
  static int64_t RowElems(int64_t row_floats, DType dtype, int64_t heads);

  // Appends n free block ids to *out, or returns false and changes nothing if fewer than
  // n are free.
  bool Allocate(int64_t n, std::vector<int32_t>* out);
  void Free(std::span<const int32_t> blocks);

  int64_t num_blocks() const { return num_blocks_; }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  int64_t num_used() const { return num_blocks_ - num_free(); }
  bool is_used(int32_t block) const;
  int32_t block_size() const { return block_size_; }
  int64_t row_floats() const { return row_floats_; }  // values per row, whatever the dtype
  int64_t row_stride() const { return row_elems_; }   // elements from a row to the next
  size_t row_bytes() const { return static_cast<size_t>(row_elems_) * DTypeSize(dtype_); }
  int64_t heads() const { return heads_; }
  DType dtype() const { return dtype_; }
  size_t bytes_per_block() const { return static_cast<size_t>(stride_) * DTypeSize(dtype_); }
  size_t bytes_total() const { return static_cast<size_t>(num_blocks_) * bytes_per_block(); }

  // The buffer's K and V bases (elements of dtype()), for kernels.
  void* k_data() { return data_.get(); }
  void* v_data() { return data_.get() + half_ * DTypeSize(dtype_); }
  const void* k_data() const { return data_.get(); }
  const void* v_data() const { return data_.get() + half_ * DTypeSize(dtype_); }
  int64_t block_stride() const { return stride_; }  // elements from one block to the next

  // Row t of a block's K (or V when `value`): stores row_floats values of src, rounded to
  // the pool's dtype, int8 with its scales (src == nullptr: zeros); reads them back as f32.
  void WriteRow(int32_t block, int32_t t, bool value, const float* src);
  void ReadRow(int32_t block, int32_t t, bool value, float* dst) const;
  // Copies K and V of row t_from of block `from` to row t_to of block `to`, bit for bit.
  void CopyRow(int32_t from, int32_t t_from, int32_t to, int32_t t_to);

  // f32 pools only (CHECK): the same addresses as float pointers; row t of a block is
  // t * row_floats() further.
  float* k_base() { return F32(k_data()); }
  float* v_base() { return F32(v_data()); }
  const float* k_base() const { return F32(k_data()); }
  const float* v_base() const { return F32(v_data()); }
  float* k(int32_t block) { return k_base() + Offset(block); }
  float* v(int32_t block) { return v_base() + Offset(block); }
  const float* k(int32_t block) const { return k_base() + Offset(block); }
  const float* v(int32_t block) const { return v_base() + Offset(block); }

 private:
  struct AlignedDelete {
    void operator()(std::byte* p) const;
  };
  int64_t Offset(int32_t block) const;  // elements
  std::byte* RowBytes(int32_t block, int32_t t, bool value) const;
  float* F32(void* p) const;
  const float* F32(const void* p) const;

  int64_t num_blocks_;
  int32_t block_size_;
  int64_t row_floats_;
  DType dtype_;
  int64_t heads_;
  int64_t row_elems_;  // row_stride()
  int64_t half_;    // elements of K (or V) of one block, padded to 64 bytes
  int64_t stride_;  // 2 * half_
  std::unique_ptr<std::byte[], AlignedDelete> data_;
  std::vector<int32_t> free_;    // stack of free ids; the lowest id is handed out first
  std::vector<uint8_t> in_use_;  // [num_blocks]
};

}  // namespace fathom
