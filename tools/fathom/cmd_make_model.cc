#include <cstdio>

#include "commands.h"
#include "flags.h"
#include "model/family.h"
#include "model/make_model.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {

int Fail(const std::string& command, const std::string& message, int code) {
  std::fprintf(stderr, "fathom %s: %s\n", command.c_str(), message.c_str());
  return code;
}

int RunMakeModel(const std::vector<std::string>& args) {
  std::string families, presets;
  for (const Family& f : AllFamilies()) {
    families += (families.empty() ? "" : ", ") + f.name;
    presets += "\n        " + f.name + ":";
    for (const std::string& p : f.presets) presets += " " + p;
  }
  MakeModelOptions opt;
  std::string dtype = "bf16", tokenizer_dir;
  int64_t seed = 0, shard_mb = 4096;
  FlagSet flags("fathom make-model",
                "fathom make-model FAMILY OUTDIR [--preset NAME] [--dtype bf16|f16|f32] [--seed N]\n"
                "                  [--tokenizer DIR]",
                "Writes a random checkpoint (config.json + safetensors) with the exact upstream\n"
                "tensor names and config fields, for tests and benchmarks.");
  flags.Positional("FAMILY", &opt.family, "model family: " + families);
  flags.Positional("OUTDIR", &opt.out_dir, "directory to write (created if missing)");
  flags.String("--preset", &opt.preset, "shape preset (default tiny); per family:" + presets);
  flags.String("--dtype", &dtype, "weight dtype: bf16 (default), f16 or f32");
  flags.Int("--seed", &seed, "random seed (default 0)", 0, INT64_MAX);
  flags.Int("--shard-mb", &shard_mb, "shard checkpoints larger than this many MiB (default 4096)",
            1, 1 << 20);
  flags.String("--tokenizer", &tokenizer_dir,
               "copy DIR/tokenizer.json (and tokenizer_config.json) into OUTDIR and size the\n"
               "      vocabulary (and bos/eos ids) to that tokenizer");
  if (Status s = flags.Parse(args); !s.ok()) return Fail("make-model", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  const auto dt = DTypeFromFlag(dtype);
  if (!dt) return Fail("make-model", "--dtype: expected bf16, f16 or f32, found '" + dtype + "'", 2);
  opt.dtype = *dt;
  opt.seed = static_cast<uint64_t>(seed);
  opt.max_shard_bytes = static_cast<size_t>(shard_mb) << 20;
  if (flags.Seen("--tokenizer")) {
    auto tok = Tokenizer::Load(tokenizer_dir);
    if (!tok.ok()) return Fail("make-model", "--tokenizer: " + tok.status().message(), 1);
    opt.tokenizer = TokenizerFiles{tokenizer_dir, (*tok)->vocab_size(), (*tok)->bos_id(), (*tok)->eos_id()};
  }
  if (Status s = MakeRandomModel(opt); !s.ok()) return Fail("make-model", s.message(), 1);
  std::printf("wrote %s %s (%s) to %s\n", opt.family.c_str(), opt.preset.c_str(), dtype.c_str(),
              opt.out_dir.c_str());
  return 0;
}

}  // namespace fathom::cli
