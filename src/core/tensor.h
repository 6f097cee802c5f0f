// TensorView: a typed, shaped, non-owning view of contiguous row-major memory
// (typically a tensor inside a memory-mapped safetensors file).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fathom {

using Shape = std::vector<int64_t>;

std::string ShapeToString(const Shape& s);  // "[2048, 5632]"
int64_t NumElements(const Shape& s);

struct TensorView {
  DType dtype = DType::kF32;
  Shape shape;
  const void* data = nullptr;

  int64_t numel() const { return NumElements(shape); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  int64_t dim(size_t i) const { return shape.at(i); }
  // Copies (and converts) all elements to f32.
  std::vector<float> ToF32() const;
};

}  // namespace fathom
