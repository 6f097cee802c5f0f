// `fathom generate --requests FILE`: many requests through the batched Engine.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace fathom::cli {

// One JSON request per line (blank lines skipped). Fields: id, prompt_ids (required),
// max_tokens, temperature, top_p, top_k, seed, loops, exit_threshold, exit_criterion
// (auto|hazard|latent-diff|kl), exit_depth, exit_trace, exit_mean, exit_min_depth,
// exit_seed, stop_ids, ignore_eos, init_seed. Errors name the line and the field.
Result<std::vector<RequestSpec>> ParseRequests(const std::string& text);

int RunGenerateRequests(const std::vector<std::string>& args);

}  // namespace fathom::cli
