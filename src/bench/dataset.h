// Loaders for the real benchmark data files, for users who have them (the synthetic
// generators of workload.h stand in when they do not):
//   alpaca    Alpaca JSON: an array of {"instruction", "input" (may be empty), "output"}
//             (tatsu-lab/alpaca's alpaca_data.json); prompt = instruction, then a blank line
//             and the input when there is one; output = "output".
//   sharegpt  ShareGPT JSON: an array of {"conversations": [{"from", "value"}, ...]}
//             (ShareGPT_V3_unfiltered_cleaned_split.json); as in vLLM's benchmark, the first
//             turn is the prompt and the second the reference output; entries with fewer
//             than two turns are skipped.
//   arxiv     arXiv-summarization JSONL: one {"article", "abstract"} object per line
//             (ccdv/arxiv-summarization); prompt = article, output = abstract.
// Texts are tokenized with the model's tokenizer (prompt with its special tokens, e.g.
// Llama 3's bos; output without), and the benchmark filters of workload.h apply
// (prompt >= 4, output >= 4, prompt + output <= 16384). Entries are sampled in a seeded
// shuffled order, so the same (file, n, seed) gives the same requests. The output text is
// only measured: its length is replayed (EOS forced at the reference length).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/workload.h"
#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace fathom::bench {

struct DatasetRequest {
  std::vector<int32_t> prompt;  // token ids
  int64_t output = 0;           // reference output length in tokens
};

struct DatasetStats {
  int64_t entries = 0;   // usable entries in the file (well-formed, with both texts)
  int64_t filtered = 0;  // of those examined in sampling order, dropped by the filters
};

// n requests from `path`. Errors name the file and the entry (index or line) and field of
// a malformed entry, and say how many entries pass the filters when fewer than n do.
Result<std::vector<DatasetRequest>> LoadDataset(WorkloadKind kind, const std::string& path,
                                                const Tokenizer& tok, int64_t n, uint64_t seed,
                                                DatasetStats* stats = nullptr);

}  // namespace fathom::bench
