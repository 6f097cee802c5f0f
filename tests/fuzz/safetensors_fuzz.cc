// A safetensors file (header length, JSON header, data) as Checkpoint::OpenFile reads it:
// every malformed file is an error, never a crash; an accepted one has every tensor's
// bytes inside the file and aligned for its type.
#include <cstdint>

#include "fuzz_util.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  const std::string path = fuzz::TempDir() + "/model.safetensors";
  fuzz::WriteFile(path, fuzz::AsView(data, size));
  auto ck = Checkpoint::OpenFile(path);
  if (!ck.ok()) return 0;
  for (const auto& [name, entry] : ck->tensors()) {
    const TensorView& v = entry.view;
    const size_t bytes = static_cast<size_t>(v.numel()) * DTypeSize(v.dtype);
    FUZZ_CHECK(reinterpret_cast<uintptr_t>(v.data) % DTypeSize(v.dtype) == 0, "%s misaligned", name.c_str());
    // Reading every byte lets ASan see a view past the mapping.
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < bytes; ++i) sink = sink ^ static_cast<const uint8_t*>(v.data)[i];
  }
  return 0;
}
