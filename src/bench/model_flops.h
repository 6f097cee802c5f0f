// FLOPs per token of a model's stages, counted from its ModelSpec: 2 FLOPs per weight of
// every matrix a token multiplies by (attention projections, MLP, Huginn's adapter, Ouro's
// exit gate, the LM head). Attention over the context (QK^T and PV, which grow with the
// context) and norms/elementwise work are left out, as in the CDB paper's F_0/F_r ratio
// (Ouro-1.4B: 0.082, Huginn-0125: 1.18).
#pragma once

#include <cstdint>

#include "model/model_spec.h"

namespace fathom::bench {

struct StageFlops {
  double prelude = 0;  // all prelude layers
  double core_step = 0;  // one loop step: core layers (+ adapter, + exit gate)
  double coda = 0;     // coda layers and the LM head
  double f0() const { return prelude + coda; }  // F_0: everything outside the loop
  double fr() const { return core_step; }       // F_r
};

// Matmul FLOPs of one transformer block for one token.
double LayerFlops(const ModelSpec& spec);
StageFlops CountFlops(const ModelSpec& spec);

}  // namespace fathom::bench
