// The lookahead exit gate's one opt-in flag, `--lookahead`, declared here once for every
// command that runs exit policies (generate, generate --requests, serve, and bench
// offline, online, k-sweep and serve), and the minimum exit depth that follows from it.
//
// Off by default everywhere (EngineOptions::lookahead): the engine executes each plan
// synchronously, so the gate would cost every signal exit one more core step and hide
// nothing; it exists for an asynchronous backend that builds plan N+1 while plan N runs.
#pragma once

#include <cstdint>
#include <string>

#include "exec/exit_spec.h"
#include "flags.h"

namespace fathom::cli {

inline void DeclareLookahead(FlagSet& flags, bool* lookahead) {
  flags.Bool("--lookahead", lookahead,
             "exit decided after loop step r takes effect after step r+1 (minimum depth 2; default off)");
}

// The --min-depth flag of the benchmarks: its default follows --lookahead.
inline std::string MinDepthHelp() {
  return "minimum exit depth (default " + std::to_string(MinExitDepth(false)) + ", or " +
         std::to_string(MinExitDepth(true)) + " with --lookahead)";
}

// After parsing: the default when --min-depth was not given, else an error message when
// the given depth is one the gate cannot produce (empty when fine).
inline std::string ResolveMinDepth(const FlagSet& flags, bool lookahead, int64_t* min_depth) {
  const int32_t lo = MinExitDepth(lookahead);
  if (!flags.Seen("--min-depth")) *min_depth = lo;
  if (*min_depth < lo)
    return "--min-depth: " + std::to_string(*min_depth) + " is below " + std::to_string(lo) +
           ", the lookahead gate's minimum exit depth";
  return "";
}

}  // namespace fathom::cli
