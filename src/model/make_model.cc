#include "model/make_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include "io/json_fields.h"
#include "io/safetensors.h"
#include "model/family.h"

namespace fathom {
namespace {

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// How a tensor is initialised: value = center + U(-1, 1) * sqrt(3) * std.
struct Init {
  float center = 0.f, std_dev = 0.f;
};

Init InitFor(const std::string& name, const Shape& shape, const ModelSpec& spec) {
  const bool is_norm = name.find("norm") != std::string::npos || name.find("ln_f") != std::string::npos;
  if (shape.size() == 1 && is_norm) return {1.f, 0.1f};
  if (name == spec.embed_name) return {0.f, 1.f};
  if (name.find("qk_bias") != std::string::npos) return {0.f, 0.1f};
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0) return {0.f, 0.1f};
  const int64_t fan_in = shape.back();
  return {0.f, 1.f / std::sqrt(static_cast<float>(fan_in))};
}

OwnedTensor RandomTensor(const ExpectedTensor& t, const Init& init, DType dtype, uint64_t seed) {
  OwnedTensor out;
  out.name = t.name;
  out.dtype = dtype;
  out.shape = t.shape;
  const int64_t n = NumElements(t.shape);
  out.bytes.resize(static_cast<size_t>(n) * DTypeSize(dtype));
  const uint64_t base = Mix(seed ^ HashName(t.name));
  const float scale = std::sqrt(3.f) * init.std_dev;
  constexpr int64_t kChunk = 1 << 16;
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < (n + kChunk - 1) / kChunk; ++c) {
    float buf[256];
    for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); i += 256) {
      const int64_t m = std::min<int64_t>(256, n - i);
      for (int64_t j = 0; j < m; ++j) {
        const uint64_t r = Mix(base + static_cast<uint64_t>(i + j));
        const float u = static_cast<float>(r >> 40) * (1.f / 8388608.f) - 1.f;  // [-1, 1)
        buf[j] = init.center + scale * u;
      }
      ConvertFromF32(dtype, buf, out.bytes.data() + static_cast<size_t>(i) * DTypeSize(dtype),
                     static_cast<size_t>(m));
    }
  }
  return out;
}

const char* TorchDtype(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kI8:
      return "int8";
  }
  return "?";
}

}  // namespace

Status MakeRandomModel(const MakeModelOptions& opt) {
  const Family* family = FindFamilyByName(opt.family);
  if (!family) {
    std::string known;
    for (const Family& f : AllFamilies()) known += (known.empty() ? "" : ", ") + f.name;
    return Status::Error("unknown family '" + opt.family + "' (known: " + known + ")");
  }
  FATHOM_ASSIGN_OR_RETURN(nlohmann::json config, family->preset_config(opt.preset));
  if (opt.tokenizer) {
    config["vocab_size"] = opt.tokenizer->vocab_size;
    auto token_field = [&](const char* field, const std::optional<int32_t>& id) {
      config[field] = id ? nlohmann::json(*id) : nlohmann::json(nullptr);
    };
    token_field("bos_token_id", opt.tokenizer->bos_id);
    token_field("eos_token_id", opt.tokenizer->eos_id);
  }
  config.merge_patch(opt.config_overrides);
  config["torch_dtype"] = TorchDtype(opt.dtype);
  FATHOM_ASSIGN_OR_RETURN(ModelSpec spec,
                          family->spec_from_config(JsonFields(config, "preset " + opt.preset)));
  FATHOM_RETURN_IF_ERROR(family_util::ValidateSpec(spec, "preset " + opt.preset));

  std::vector<OwnedTensor> tensors;
  for (const ExpectedTensor& t : ExpectedTensors(spec))
    tensors.push_back(RandomTensor(t, InitFor(t.name, t.shape, spec), opt.dtype, opt.seed));

  std::error_code ec;
  std::filesystem::create_directories(opt.out_dir, ec);
  if (ec) return Status::Error("cannot create directory " + opt.out_dir + ": " + ec.message());
  const std::string config_path = (std::filesystem::path(opt.out_dir) / "config.json").string();
  {
    std::ofstream f(config_path);
    f << config.dump(2) << "\n";
    if (!f) return Status::Error("cannot write " + config_path);
  }
  if (opt.tokenizer) {
    // tokenizer.json is required; the config and a separate chat template are optional.
    for (const char* name : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"}) {
      const std::filesystem::path from = std::filesystem::path(opt.tokenizer->dir) / name;
      if (std::string_view(name) != "tokenizer.json" && !std::filesystem::exists(from)) continue;
      std::filesystem::copy_file(from, std::filesystem::path(opt.out_dir) / name,
                                 std::filesystem::copy_options::overwrite_existing, ec);
      if (ec) return Status::Error("cannot copy " + from.string() + " to " + opt.out_dir + ": " + ec.message());
    }
  }
  return WriteCheckpointTensors(opt.out_dir, tensors, opt.max_shard_bytes);
}

}  // namespace fathom
