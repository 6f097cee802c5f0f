// SwiGLU on a fused gate|up projection: out = silu(gate) * up.
#pragma once

#include <cstdint>

namespace fathom {

// gate_up: [rows, 2*inter] (first half gate, second half up); out: [rows, inter].
void SwiGlu(const float* gate_up, int64_t rows, int64_t inter, float* out);
void SwiGluReference(const float* gate_up, int64_t rows, int64_t inter, float* out);

}  // namespace fathom
