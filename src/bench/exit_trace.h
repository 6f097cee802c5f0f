// Exit depths recorded on a real checkpoint, replayed by the benchmarks (issue 5, item 2):
// instead of seeded random depths, the generated tokens of the benchmark's requests take
// their depths, in order, from what a trained model's exit gate actually did.
//
// The file is what `fathom generate --json` prints (one object per line with
// "exit_depths") or what `fathom generate --requests F --json` prints (an object whose
// "requests" array holds objects with "exit_depths"); several runs may be concatenated,
// one JSON value per line. The first depth of every record is dropped: that token came out
// of the prompt's last position, which ran every loop step, so it says nothing about the
// exit gate. The remaining depths, record after record, form one stream.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom::bench {

struct RecordedExitTrace {
  std::vector<int32_t> depths;  // the decode tokens' depths, in recorded order
  int64_t records = 0;          // records (generations) read
  double mean() const;
};

// Errors name the file, the line (and request index) and the field: unreadable file, a
// line that is not JSON, a record without "exit_depths", a depth outside
// [min_depth, r_max], or no decode-token depths at all. min_depth is the replaying
// engine's minimum exit depth (MinExitDepth: 1, or 2 under the lookahead gate), so a
// trace recorded without the gate, which may hold depth 1, cannot be replayed with it.
Result<RecordedExitTrace> LoadExitTrace(const std::string& path, int32_t min_depth, int32_t r_max);

// Depths for the decode tokens of requests with these output lengths: request i takes the
// next max(1, output_i - 1) depths of the stream (its first output token comes from
// prefill), wrapping around at the end, so consecutive requests replay consecutive parts
// of the recorded generation and every recorded depth is used before any repeats.
std::vector<std::vector<int32_t>> SliceExitTrace(const RecordedExitTrace& trace,
                                                 const std::vector<int64_t>& outputs);

}  // namespace fathom::bench
