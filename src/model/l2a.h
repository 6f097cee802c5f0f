// L2A gate checkpoints (docs/L2A_FORMAT.md): the `l2a` block of a dense model's config.json,
// read into ModelSpec::l2a and the per-layer router / LoRA tensor names.
#pragma once

#include "core/status.h"
#include "io/json_fields.h"
#include "model/model_spec.h"

namespace fathom {

// Reads config["l2a"] (which must exist) into spec.l2a and fills every layer's router and
// LoRA names. spec.layers must already hold the dense layers. Errors name the config file
// and the field.
Status ReadL2aConfig(const JsonFields& config, ModelSpec& spec);

// phi(b) = [b, sin(pi b), cos(pi b), ..., sin(K pi b), cos(K pi b)] (F = 2K + 1 values),
// computed in double.
void L2aBudgetFeatures(const L2aSpec& l2a, double b, double* phi);

struct LayerWeights;
// Doubles of scratch L2aRouterLogits needs: u [E + F] and the hidden layer [R].
int64_t L2aRouterScratch(const ModelSpec& spec);
// The router logits z [G] of one token at one layer: u = [h ; phi(b)] with h [E] the layer's
// normed input; z = fc2(silu(fc1 u)) or fc u. Double precision throughout, so a token's
// decisions depend on its own h and b only.
void L2aRouterLogits(const ModelSpec& spec, const LayerWeights& w, const float* h, double b, double* scratch,
                     double* z);

}  // namespace fathom
