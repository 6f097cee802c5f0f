#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>

#include "core/check.h"

namespace fathom {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kI8:
      return "I8";
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
    case DType::kI8:
      FATHOM_CHECK_MSG(false, "ConvertToF32: I8 values need their scales");
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
    case DType::kI8:
      FATHOM_CHECK_MSG(false, "ConvertFromF32: I8 values need their scales");
  }
}

void QuantizeI8Row(const float* src, int64_t n, int64_t heads, void* out) {
  auto* dst = static_cast<std::byte*>(out);
  auto* q = reinterpret_cast<int8_t*>(dst);
  const int64_t hd = n / heads;
  for (int64_t h = 0; h < heads; ++h) {
    const float* x = src + h * hd;
    float amax = 0;
    for (int64_t d = 0; d < hd; ++d) amax = std::max(amax, std::abs(x[d]));
    // max ignores NaN; a NaN or infinity in the row makes its scale NaN, so the row reads
    // back as NaN (as an f32 or bf16 cache would carry it) instead of as finite garbage.
    float scale = amax / 127.f;
    for (int64_t d = 0; d < hd; ++d)
      if (!std::isfinite(x[d])) scale = std::numeric_limits<float>::quiet_NaN();
    const bool scaled = scale > 0 && std::isfinite(scale);  // else zeros (no 0 / 0)
    for (int64_t d = 0; d < hd; ++d)
      q[h * hd + d] =
          scaled ? static_cast<int8_t>(std::clamp(std::nearbyint(x[d] / scale), -127.f, 127.f))
                 : int8_t{0};
    std::memcpy(dst + n + 4 * h, &scale, 4);
  }
}

void DequantizeI8Row(const void* in, int64_t n, int64_t heads, float* dst) {
  const auto* src = static_cast<const std::byte*>(in);
  const auto* q = reinterpret_cast<const int8_t*>(src);
  const int64_t hd = n / heads;
  for (int64_t h = 0; h < heads; ++h) {
    float scale;
    std::memcpy(&scale, src + n + 4 * h, 4);
    for (int64_t d = 0; d < hd; ++d) dst[h * hd + d] = static_cast<float>(q[h * hd + d]) * scale;
  }
}

}  // namespace fathom
