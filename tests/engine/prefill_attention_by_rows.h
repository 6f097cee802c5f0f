// For tests that compare the engine with Generate run alone, bit for bit.
#pragma once

#include "kernels/paged_attention.h"

namespace fathom::testing {

// The two cut a prompt at different points (Generate's prefill_chunk; the engine's prefill
// budget, shared by the requests in flight), and a run of 4 or more rows of one prompt goes
// through the tiled prefill attention kernel, fewer rows through the per-row one: both within
// 1e-5 of the reference, but not the same bits. So while this lives prompts attend row by row
// (the tiled kernel has its own tests against the reference); with tiles such tests' tokens
// agreed only while no near-tie of the tiny random models fell between the two kernels' bits.
class PrefillAttentionByRows {
 public:
  PrefillAttentionByRows() { internal::SetPagedAttentionTilesForTesting(false); }
  ~PrefillAttentionByRows() { internal::SetPagedAttentionTilesForTesting(true); }
  PrefillAttentionByRows(const PrefillAttentionByRows&) = delete;
  PrefillAttentionByRows& operator=(const PrefillAttentionByRows&) = delete;
};

}  // namespace fathom::testing
