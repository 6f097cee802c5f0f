// config.json as SpecFromConfigFile reads it, for every family (llama, qwen2, qwen3,
// lckv-llama, ouro, huginn_raven): errors name the field, never crash; an accepted spec's
// expected tensors can be listed.
#include <cstdint>

#include "fuzz_util.h"
#include "model/family.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  const std::string path = fuzz::TempDir() + "/config.json";
  fuzz::WriteFile(path, fuzz::AsView(data, size));
  auto spec = SpecFromConfigFile(path);
  if (!spec.ok()) return 0;
  FUZZ_CHECK(spec->hidden > 0 && spec->vocab > 0 && !spec->layers.empty(), "accepted an empty shape");
  const std::vector<ExpectedTensor> tensors = ExpectedTensors(*spec);
  FUZZ_CHECK(!tensors.empty(), "no tensors");
  return 0;
}
