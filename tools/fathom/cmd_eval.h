// What `fathom eval` (cmd_eval.cc) and `fathom eval sweep` (cmd_eval_sweep.cc) share: the
// input and engine flags, and a result as JSON.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_flags.h"
#include "eval/perplexity.h"
#include "flags.h"

namespace fathom::cli {

struct EvalCommon {
  std::string model_dir, text_file, ids_file;
  LoadFlags load;
  int64_t context = 0, batch = PerplexityOptions{}.batch, threads = 0;
  bool no_special = false;
  // The engine options that change what a token computes or what it costs in KV.
  EngineFlags engine{kFlagLayout | kFlagSharedAfter | kFlagLookahead | kFlagKvDtype};

  // --model, --text-file, --ids-file, --no-special, --context, --batch, the engine flags,
  // the load flags (--weights, --batch-invariant), --threads.
  void Declare(FlagSet& flags);
  // After parsing: errors for a missing or doubled input flag, or a bad load flag.
  Status CheckInput(const FlagSet& flags) const;
  // The ids to score; errors name the flag and the file.
  Result<std::vector<int32_t>> Ids() const;
  // PerplexityOptions with the engine flags, context and batch applied.
  Result<PerplexityOptions> Options() const;
  // The model loaded from --model with the load flags; errors name the flag or the checkpoint.
  Result<std::unique_ptr<Model>> LoadModel() const;
};

// Every number of a result with the settings that produced it.
nlohmann::json EvalResultJson(const PerplexityOptions& o, const PerplexityResult& r);

int RunEvalSweep(const std::vector<std::string>& args);  // cmd_eval_sweep.cc

}  // namespace fathom::cli
