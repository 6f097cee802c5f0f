#include "core/tensor.h"

namespace fathom {

std::string ShapeToString(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

int64_t NumElements(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<float> TensorView::ToF32() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  ConvertToF32(dtype, data, out.data(), out.size());
  return out;
}

}  // namespace fathom
