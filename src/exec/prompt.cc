#include "exec/prompt.h"

#include "exec/generate.h"
#include "exec/kv_setup.h"

namespace fathom {

Result<PrefillResult> RunPrompt(const Model& model, const std::vector<int32_t>& ids,
                                const PromptOptions& opt) {
  const ModelSpec& spec = model.spec();
  if (ids.empty()) return Status::Error("prompt: no token ids");
  FATHOM_ASSIGN_OR_RETURN(int32_t loops, ResolveLoops(spec, opt.loops));
  const auto n = static_cast<int64_t>(ids.size());
  const int32_t block = 16;
  // Worst case: every physical layer holds the whole prompt.
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table,
                          KvLayerTable::Build(KvShapeOf(spec, loops), opt.layout, 1));
  const int64_t blocks = table.num_physical_layers() * ((n + block - 1) / block);
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, loops, opt.layout, 1, blocks, block, opt.kv_dtype));
  const int64_t chunk = opt.chunk > 0 ? opt.chunk : n;
  RunLimits limits;  // stage calls of one chunk, positions of the prompt
  limits.max_rows = std::min(chunk, n);
  limits.max_context = n;
  StageRunner runner(model, *kv, 1, limits);
  const KvManager::SeqId seq = kv->AddSequence(n);
  if (!kv->Grow(seq, n)) return Status::Error("internal: KV pool too small for the prompt");
  runner.AddSequence(seq, loops);
  if (opt.record_signals && chunk < n)
    return Status::Error("prompt: exit signals are recorded only for a prompt run as one chunk");
  PrefillResult all;
  for (int64_t p = 0; p < n; p += chunk) {
    PrefillChunk c;
    c.seq = seq;
    c.ids = ids.data() + p;
    c.pos0 = p;
    c.n = std::min(chunk, n - p);
    c.loops = loops;
    c.logits = PrefillChunk::Logits::kAll;
    c.budget = opt.budget;
    c.random_init = opt.random_init;
    PrefillResult part;
    FATHOM_RETURN_IF_ERROR(runner.Prefill({c}, opt.record_signals, &part));
    all.logits.insert(all.logits.end(), part.logits.begin(), part.logits.end());
    if (opt.record_signals && chunk == n) {
      all.gate_lambda = std::move(part.gate_lambda);
      all.latent_diff = std::move(part.latent_diff);
    }
  }
  if (opt.gate_counts) *opt.gate_counts = runner.gate_counts();
  return all;
}

}  // namespace fathom
