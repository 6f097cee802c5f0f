#include "core/dtype.h"

namespace fathom {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
  }
  return "?";
}

std::optional<DType> DTypeFromSafetensorsName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  return std::nullopt;
}

std::optional<DType> DTypeFromFlag(std::string_view name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  return std::nullopt;
}

void ConvertToF32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = BF16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const auto* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
  }
}

void ConvertFromF32(DType t, const float* src, void* dst, size_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F32ToBF16(src[i]);
      return;
    }
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (size_t i = 0; i < n; ++i) d[i] = F16FromF32(src[i]);
      return;
    }
  }
}

}  // namespace fathom
