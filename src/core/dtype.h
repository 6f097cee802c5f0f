// Element types of checkpoint tensors and their conversions to and from f32.
// bf16: the top 16 bits of an f32 (round-to-nearest-even on the way down).
// f16: IEEE half; converted with F16C instructions (part of our x86-64-v3 baseline).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include <immintrin.h>

namespace fathom {

// kI8 is a KV cache storage type only (int8 values with an f32 scale per row and head beside
// them, kv/block_pool.h): no checkpoint tensor is read as it, and ConvertToF32 / ConvertFromF32
// refuse it (its values mean nothing without their scales).
enum class DType : uint8_t { kF32, kBF16, kF16, kI8 };

inline size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : t == DType::kI8 ? 1 : 2; }

// int8 rows of the KV cache (DType::kI8): n values of `heads` heads (n / heads each) and then
// `heads` f32 scales (unaligned), n + 4 * heads bytes. Head h's values x are stored as
// round(x / s) (to nearest, ties to even) with s = max |x| / 127, so each is within s / 2 of
// x; a head of zeros has s = 0 and stores zeros; a NaN or infinity makes its head's s NaN,
// so the head reads back as NaN. Dequantize: value * s.
void QuantizeI8Row(const float* src, int64_t n, int64_t heads, void* dst);
void DequantizeI8Row(const void* src, int64_t n, int64_t heads, float* dst);

// The safetensors spelling: "F32", "BF16", "F16" (and "I8", which no checkpoint is read as).
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromSafetensorsName(std::string_view name);
// The CLI / config spelling: "f32", "bf16", "f16".
std::optional<DType> DTypeFromFlag(std::string_view name);

inline float BF16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline uint16_t F32ToBF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

inline float F16ToF32(uint16_t h) { return _cvtsh_ss(h); }
inline uint16_t F16FromF32(float f) {
  // Not _cvtss_sh: clang's macro for it is a C99 compound literal (-Wpedantic).
  return static_cast<uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}

// Bulk conversions of n elements; `src` is raw bytes of type `t`.
void ConvertToF32(DType t, const void* src, float* dst, size_t n);
void ConvertFromF32(DType t, const float* src, void* dst, size_t n);

}  // namespace fathom
