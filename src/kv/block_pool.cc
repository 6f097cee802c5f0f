#include "kv/block_pool.h"

#include <cstring>
#include <limits>
#include <new>

#include "core/check.h"

namespace fathom {

namespace {

constexpr size_t kAlign = 64;

void CheckFormat(int64_t row_floats, DType t, int64_t heads) {
  FATHOM_CHECK_MSG(t == DType::kF32 || t == DType::kBF16 || t == DType::kI8,
                   "KV dtype " << DTypeName(t));
  FATHOM_CHECK_MSG(heads >= 1 && row_floats % heads == 0,
                   "row_floats=" << row_floats << " is not a multiple of heads=" << heads);
}

// Elements of one block's K (or V), padded to whole cache lines.
int64_t HalfElems(int32_t block_size, int64_t row_elems, DType t) {
  const auto per_line = static_cast<int64_t>(kAlign / DTypeSize(t));
  const int64_t n = int64_t{block_size} * row_elems;
  return (n + per_line - 1) / per_line * per_line;
}

}  // namespace

std::string_view KvDtypeName(DType t) {
  return t == DType::kBF16 ? "bf16" : t == DType::kI8 ? "int8" : "f32";
}

std::optional<DType> ParseKvDtype(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "int8") return DType::kI8;
  return std::nullopt;
}

int64_t BlockPool::RowElems(int64_t row_floats, DType dtype, int64_t heads) {
  return row_floats + (dtype == DType::kI8 ? 4 * heads : 0);
}

void BlockPool::AlignedDelete::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t{kAlign});
}

size_t BlockPool::BytesPerBlock(int32_t block_size, int64_t row_floats, DType dtype,
                                int64_t heads) {
  FATHOM_CHECK_MSG(block_size >= 1 && row_floats >= 1,
                   "block_size=" << block_size << " row_floats=" << row_floats);
  CheckFormat(row_floats, dtype, heads);
  return static_cast<size_t>(2 * HalfElems(block_size, RowElems(row_floats, dtype, heads), dtype)) *
         DTypeSize(dtype);
}

int64_t BlockPool::BlocksForBudget(size_t bytes, int32_t block_size, int64_t row_floats,
                                   DType dtype, int64_t heads) {
  const size_t n = bytes / BytesPerBlock(block_size, row_floats, dtype, heads);
  const size_t max_ids = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  return static_cast<int64_t>(n < max_ids ? n : max_ids);
}

BlockPool::BlockPool(int64_t num_blocks, int32_t block_size, int64_t row_floats, DType dtype,
                     int64_t heads)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      row_floats_(row_floats),
      dtype_(dtype),
      heads_(heads),
      row_elems_(RowElems(row_floats, dtype, heads)),
      half_(HalfElems(block_size, row_elems_, dtype)),
      stride_(2 * half_) {
  FATHOM_CHECK_MSG(num_blocks >= 0 && num_blocks <= std::numeric_limits<int32_t>::max(),
                   "num_blocks=" << num_blocks);
  FATHOM_CHECK_MSG(block_size >= 1 && row_floats >= 1,
                   "block_size=" << block_size << " row_floats=" << row_floats);
  CheckFormat(row_floats, dtype, heads);
  const size_t bytes = bytes_total();
  if (bytes > 0) {
    data_.reset(static_cast<std::byte*>(::operator new[](bytes, std::align_val_t{kAlign})));
  }
  free_.resize(static_cast<size_t>(num_blocks));
  for (int64_t i = 0; i < num_blocks; ++i) {
    free_[static_cast<size_t>(i)] = static_cast<int32_t>(num_blocks - 1 - i);
  }
  in_use_.assign(static_cast<size_t>(num_blocks), 0);
}

bool BlockPool::Allocate(int64_t n, std::vector<int32_t>* out) {
  FATHOM_CHECK(out != nullptr);
  FATHOM_CHECK_MSG(n >= 0, "n=" << n);
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::Free(std::span<const int32_t> blocks) {
  for (const int32_t b : blocks) {
    FATHOM_CHECK_MSG(b >= 0 && b < num_blocks_, "freeing foreign block id " << b);
    FATHOM_CHECK_MSG(in_use_[b], "double free of block " << b);
    in_use_[b] = 0;
    free_.push_back(b);
  }
}

bool BlockPool::is_used(int32_t block) const {
  FATHOM_CHECK_MSG(block >= 0 && block < num_blocks_, "block=" << block);
  return in_use_[block] != 0;
}

int64_t BlockPool::Offset(int32_t block) const {
  FATHOM_CHECK_MSG(block >= 0 && block < num_blocks_,
                   "block=" << block << " num_blocks=" << num_blocks_);
  return int64_t{block} * stride_;
}

std::byte* BlockPool::RowBytes(int32_t block, int32_t t, bool value) const {
  FATHOM_CHECK_MSG(t >= 0 && t < block_size_, "row=" << t << " block_size=" << block_size_);
  const int64_t elem = (value ? half_ : 0) + Offset(block) + int64_t{t} * row_elems_;
  return data_.get() + static_cast<size_t>(elem) * DTypeSize(dtype_);
}

void BlockPool::WriteRow(int32_t block, int32_t t, bool value, const float* src) {
  std::byte* dst = RowBytes(block, t, value);
  const auto n = static_cast<size_t>(row_floats_);
  if (src == nullptr)
    std::memset(dst, 0, row_bytes());  // +0.0 in f32 and bf16, and int8 0 x scale 0
  else if (dtype_ == DType::kI8)
    QuantizeI8Row(src, row_floats_, heads_, dst);
  else
    ConvertFromF32(dtype_, src, dst, n);
}

void BlockPool::ReadRow(int32_t block, int32_t t, bool value, float* dst) const {
  if (dtype_ == DType::kI8)
    DequantizeI8Row(RowBytes(block, t, value), row_floats_, heads_, dst);
  else
    ConvertToF32(dtype_, RowBytes(block, t, value), dst, static_cast<size_t>(row_floats_));
}

void BlockPool::CopyRow(int32_t from, int32_t t_from, int32_t to, int32_t t_to) {
  const size_t n = row_bytes();
  for (const bool value : {false, true})
    std::memmove(RowBytes(to, t_to, value), RowBytes(from, t_from, value), n);
}

float* BlockPool::F32(void* p) const {
  FATHOM_CHECK_MSG(dtype_ == DType::kF32, "float access to a " << DTypeName(dtype_) << " KV pool");
  return static_cast<float*>(p);
}

const float* BlockPool::F32(const void* p) const {
  FATHOM_CHECK_MSG(dtype_ == DType::kF32, "float access to a " << DTypeName(dtype_) << " KV pool");
  return static_cast<const float*>(p);
}

}  // namespace fathom
