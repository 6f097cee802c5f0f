// Token sampling from one row of logits: greedy (temperature 0), or temperature with
// optional top-k and top-p (nucleus) filtering, driven by a seeded generator so that a seed
// reproduces a run.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace fathom {

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 0;        // 0 = off
  float top_p = 1.f;        // 1 = off
};

class Sampler {
 public:
  explicit Sampler(uint64_t seed) : rng_(seed) {}
  int32_t Sample(const float* logits, int64_t vocab, const SamplingParams& p);

 private:
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> scratch_;  // (logit, id) candidates
  std::vector<double> weights_;                     // their unnormalized probabilities
};

int32_t Argmax(const float* x, int64_t n);

// Reference: the probabilities the sampler draws from after temperature, top-k and top-p
// (sorted by probability, ties by id; renormalized), in double. For tests.
// Indexed by token id: [vocab], 0 for filtered-out tokens; greedy gives a one-hot vector.
std::vector<double> SamplingDistributionReference(const float* logits, int64_t vocab,
                                                  const SamplingParams& p);

}  // namespace fathom
