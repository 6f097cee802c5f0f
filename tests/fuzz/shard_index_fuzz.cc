// model.safetensors.index.json as Checkpoint::Open reads it, beside two real shards
// (a.safetensors: x, y; b.safetensors: z). Errors, never crashes; a weight map may only
// name files in the model directory.
#include <cstdint>
#include <filesystem>

#include "fuzz_util.h"
#include "io/safetensors.h"

namespace {

const std::string& Dir() {
  static const std::string dir = [] {
    using namespace fathom;
    const std::string d = fuzz::TempDir() + "/sharded";
    std::filesystem::create_directories(d);
    auto t = [](const char* name) { return OwnedTensor{name, DType::kF32, {2}, std::vector<uint8_t>(8, 1)}; };
    if (!WriteSafetensors(d + "/a.safetensors", {t("x"), t("y")}).ok()) std::abort();
    if (!WriteSafetensors(d + "/b.safetensors", {t("z")}).ok()) std::abort();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  fuzz::WriteFile(Dir() + "/model.safetensors.index.json", fuzz::AsView(data, size));
  auto ck = Checkpoint::Open(Dir());
  if (!ck.ok()) return 0;
  for (const auto& [name, entry] : ck->tensors())
    FUZZ_CHECK(entry.file.rfind(Dir() + "/", 0) == 0, "%s from %s", name.c_str(), entry.file.c_str());
  return 0;
}
