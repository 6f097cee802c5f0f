#include "kv/block_pool.h"

#include <limits>
#include <new>

#include "core/check.h"

namespace fathom {

namespace {

constexpr size_t kAlign = 64;
constexpr int64_t kAlignFloats = kAlign / sizeof(float);

int64_t HalfFloats(int32_t block_size, int64_t row_floats) {
  const int64_t floats = int64_t{block_size} * row_floats;
  return (floats + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
}

}  // namespace

void BlockPool::AlignedDelete::operator()(float* p) const {
  ::operator delete[](p, std::align_val_t{kAlign});
}

size_t BlockPool::BytesPerBlock(int32_t block_size, int64_t row_floats) {
  FATHOM_CHECK_MSG(block_size >= 1 && row_floats >= 1,
                   "block_size=" << block_size << " row_floats=" << row_floats);
  return static_cast<size_t>(2 * HalfFloats(block_size, row_floats)) * sizeof(float);
}

int64_t BlockPool::BlocksForBudget(size_t bytes, int32_t block_size, int64_t row_floats) {
  const size_t n = bytes / BytesPerBlock(block_size, row_floats);
  const size_t max_ids = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  return static_cast<int64_t>(n < max_ids ? n : max_ids);
}

BlockPool::BlockPool(int64_t num_blocks, int32_t block_size, int64_t row_floats)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      row_floats_(row_floats),
      half_(HalfFloats(block_size, row_floats)),
      stride_(2 * half_) {
  FATHOM_CHECK_MSG(num_blocks >= 0 && num_blocks <= std::numeric_limits<int32_t>::max(),
                   "num_blocks=" << num_blocks);
  FATHOM_CHECK_MSG(block_size >= 1 && row_floats >= 1,
                   "block_size=" << block_size << " row_floats=" << row_floats);
  const size_t floats = static_cast<size_t>(num_blocks * stride_);
  if (floats > 0) {
    data_.reset(static_cast<float*>(
        ::operator new[](floats * sizeof(float), std::align_val_t{kAlign})));
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

}  // namespace fathom
