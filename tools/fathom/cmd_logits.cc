#include <cstdio>
#include <fstream>

#include "commands.h"
#include "engine_flags.h"
#include "exec/generate.h"
#include "exec/prompt.h"
#include "flags.h"

namespace fathom::cli {

// "zero" -> nullopt; "seed:N" -> N.
Result<std::optional<uint64_t>> ParseInitState(const std::string& v) {
  if (v == "zero") return std::optional<uint64_t>();
  if (v.rfind("seed:", 0) == 0) {
    FATHOM_ASSIGN_OR_RETURN(std::vector<int64_t> n, ParseIntList("--init-state", v.substr(5)));
    if (n.size() == 1 && n[0] >= 0) return std::optional<uint64_t>(static_cast<uint64_t>(n[0]));
  }
  return Status::Error("--init-state: expected 'zero' or 'seed:N', found '" + v + "'");
}

int RunLogits(const std::vector<std::string>& args) {
  std::string model_dir, ids_text, out_path, init = "zero", precision = "fast";
  std::string kv_dtype{KvDtypeName(PromptOptions{}.kv_dtype)};
  LoadFlags load_flags;
  int64_t loops = 0;
  double budget = 1;
  FlagSet flags("fathom logits",
                "fathom logits --model DIR --ids 1,2,3 [--loops R] [--init-state zero|seed:N] [--budget B] --out FILE",
                "Runs the prompt once (causal, every loop step) and writes the logits of every\n"
                "position as little-endian float32, row-major [n_tokens, vocab_size]. An L2A gate\n"
                "checkpoint (docs/L2A_FORMAT.md) runs every token's routers at --budget B.");
  flags.String("--model", &model_dir, "Hugging Face model directory");
  flags.String("--ids", &ids_text, "comma-separated prompt token ids");
  flags.String("--out", &out_path, "output file");
  flags.Int("--loops", &loops, "loop count of a looped model (default: total_ut_steps for Ouro, "
            "mean_recurrence for Huginn)", 1, 4096);
  flags.String("--init-state", &init, "Huginn's initial state: zero (default) or seed:N");
  flags.Double("--budget", &budget, "L2A gate checkpoints: the b every token's routers read (default 1)", 0, 1);
  flags.String("--precision", &precision,
               "bf16 matmuls: fast (activations rounded to bf16, default) or accurate (split into\n"
               "      two bf16 parts: about 16 mantissa bits, twice the cost)");
  DeclareKvDtype(flags, &kv_dtype);
  load_flags.Declare(flags);
  for (const char* r : {"--model", "--ids", "--out"}) flags.Require(r);
  if (Status s = flags.Parse(args); !s.ok()) return Fail("logits", s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto ids = ParseIdList("--ids", ids_text);
  if (!ids.ok()) return Fail("logits", ids.status().message(), 2);
  auto init_seed = ParseInitState(init);
  if (!init_seed.ok()) return Fail("logits", init_seed.status().message(), 2);
  if (precision != "fast" && precision != "accurate")
    return Fail("logits", "--precision: expected fast or accurate, found '" + precision + "'", 2);
  auto kv = ParseKvDtypeFlag(kv_dtype);
  if (!kv.ok()) return Fail("logits", kv.status().message(), 2);
  auto load = load_flags.Options();
  if (!load.ok()) return Fail("logits", load.status().message(), 2);
  load->split_bf16_activations = precision == "accurate";
  auto model = Model::Load(model_dir, *load);
  if (!model.ok()) return Fail("logits", model.status().message(), 1);
  const ModelSpec& spec = (*model)->spec();
  if (flags.Seen("--budget") && !spec.l2a.enabled)
    return Fail("logits", "--budget: " + model_dir + " is not an L2A gate checkpoint (docs/L2A_FORMAT.md); nothing reads b here", 2);
  PromptOptions opt;
  opt.budget = static_cast<float>(budget);
  opt.loops = static_cast<int32_t>(loops);
  opt.random_init = *init_seed;
  opt.kv_dtype = *kv;
  auto out = RunPrompt(**model, *ids, opt);
  if (!out.ok()) return Fail("logits", out.status().message(), 1);
  std::ofstream f(out_path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(out->logits.data()),
          static_cast<std::streamsize>(out->logits.size() * sizeof(float)));
  if (!f) return Fail("logits", "cannot write " + out_path, 1);
  std::printf("wrote %zu x %lld logits to %s\n", ids->size(), static_cast<long long>(spec.vocab),
              out_path.c_str());
  return 0;
}

}  // namespace fathom::cli
