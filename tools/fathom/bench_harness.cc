#include "bench_harness.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "exec/generate.h"
#include "exec/kv_setup.h"
#include "exec/stage_runner.h"

namespace fathom::cli {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Deterministic, well-spread token ids.
int32_t TokenAt(int64_t seq, int64_t pos, int64_t vocab) {
  return static_cast<int32_t>((seq * 7919 + pos * 104729 + 13) % vocab);
}

}  // namespace

Result<BatchDecodeResult> RunBatchDecode(const Model& model, int32_t batch, int64_t prompt,
                                         int64_t gen, int32_t loops, KvLayout layout,
                                         int64_t prefill_tokens, DType kv_dtype, float budget) {
  const ModelSpec& spec = model.spec();
  FATHOM_ASSIGN_OR_RETURN(int32_t r, ResolveLoops(spec, loops));
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table, KvLayerTable::Build(KvShapeOf(spec, r), layout, 1));
  const int32_t block = 16;
  const int64_t per_seq = table.num_physical_layers() * ((prompt + gen + block - 1) / block + 1);
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, r, layout, 1, per_seq * batch, block, kv_dtype));
  RunLimits limits;  // prefill calls of whole prompts up to prefill_tokens, then batch items
  limits.max_rows = std::max<int64_t>({batch, prompt, std::min(prefill_tokens, batch * prompt)});
  limits.max_context = prompt + gen;
  StageRunner runner(model, *kv, batch, limits);
  std::vector<KvManager::SeqId> seqs;
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch));
  for (int32_t b = 0; b < batch; ++b) {
    seqs.push_back(kv->AddSequence(prompt));
    if (!kv->Grow(seqs.back(), prompt)) return Status::Error("internal: KV pool too small");
    runner.AddSequence(seqs.back(), r);
    for (int64_t p = 0; p < prompt; ++p) prompts[static_cast<size_t>(b)].push_back(TokenAt(b, p, spec.vocab));
  }
  BatchDecodeResult res;
  res.batch = batch;

  // Prefill: whole prompts packed into calls of at most prefill_tokens tokens.
  std::vector<int32_t> next(static_cast<size_t>(batch));
  const double t0 = Now();
  for (int32_t b = 0; b < batch;) {
    std::vector<PrefillChunk> chunks;
    int64_t tokens = 0;
    while (b < batch && (chunks.empty() || tokens + prompt <= prefill_tokens)) {
      PrefillChunk c;
      c.seq = seqs[static_cast<size_t>(b)];
      c.ids = prompts[static_cast<size_t>(b)].data();
      c.n = prompt;
      c.loops = r;
      c.logits = PrefillChunk::Logits::kLast;
      c.budget = budget;
      chunks.push_back(c);
      tokens += prompt;
      ++b;
    }
    PrefillResult out;
    FATHOM_RETURN_IF_ERROR(runner.Prefill(chunks, false, &out));
  }
  res.prompt_tok_s = static_cast<double>(batch * prompt) / (Now() - t0);

  // Decode in lockstep.
  std::vector<DecodeItem> items(static_cast<size_t>(batch));
  for (int32_t b = 0; b < batch; ++b) {
    items[static_cast<size_t>(b)].slot = b;
    items[static_cast<size_t>(b)].seq = seqs[static_cast<size_t>(b)];
    items[static_cast<size_t>(b)].budget = budget;
  }
  const StageRunner::GateCounts gates0 = runner.gate_counts();
  CoreStepResult step;
  CodaResult coda;
  const double t1 = Now();
  for (int64_t g = 0; g < gen; ++g) {
    for (int32_t b = 0; b < batch; ++b) {
      DecodeItem& it = items[static_cast<size_t>(b)];
      it.pos = prompt + g;
      it.token = g == 0 ? TokenAt(b, it.pos, spec.vocab) : coda.tokens[static_cast<size_t>(b)];
      if (!kv->Grow(it.seq, it.pos + 1)) return Status::Error("internal: KV pool too small");
    }
    FATHOM_RETURN_IF_ERROR(runner.Prelude(items));
    for (int32_t s = 0; s < r; ++s) {
      for (DecodeItem& it : items) it.step = s;
      FATHOM_RETURN_IF_ERROR(runner.CoreStep(items, &step));
    }
    for (DecodeItem& it : items) it.step = r;
    FATHOM_RETURN_IF_ERROR(runner.Coda(items, &coda));
  }
  const double dt = Now() - t1;
  res.decode_tok_s = static_cast<double>(batch * gen) / dt;
  res.decode_step_s = dt / static_cast<double>(gen);
  const StageRunner::GateCounts& gates = runner.gate_counts();
  if (gates.dense_matmul_flops > gates0.dense_matmul_flops)
    res.decode_matmul_fraction = (gates.matmul_flops - gates0.matmul_flops) /
                                 (gates.dense_matmul_flops - gates0.dense_matmul_flops);
  return res;
}

Result<StepLatency> MeasureCoreStep(const Model& model, int32_t batch, int64_t context,
                                    size_t kv_budget_bytes, int reps, DType kv_dtype) {
  const ModelSpec& spec = model.spec();
  StepLatency res;
  res.batch = batch;
  res.context = context;
  if (!spec.loop.looped) return Status::Error("step latency: the model has no loop");
  // One loop step's KV only: a table of depth 1. last-exited has no holes to mask, so every
  // context position counts as written.
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table, KvLayerTable::Build(KvShapeOf(spec, 1), KvLayout::kLastExited, 1));
  const int32_t block = 16;
  const int64_t per_seq = table.num_physical_layers() * ((context + 1 + block - 1) / block);
  const size_t bytes = static_cast<size_t>(per_seq * batch) *
                       BlockPool::BytesPerBlock(block, spec.kv_dim(), kv_dtype, spec.n_kv_heads);
  res.kv_gb = static_cast<double>(bytes) / 1e9;
  if (bytes > kv_budget_bytes) {
    res.skipped = true;
    return res;
  }
  FATHOM_ASSIGN_OR_RETURN(auto kv,
                          MakeKvManager(spec, 1, KvLayout::kLastExited, 1, per_seq * batch, block, kv_dtype));
  // The cache's contents do not change the cost; zeros stand in for a prefilled context.
  BlockPool& pool = kv->pool();
  std::memset(pool.k_data(), 0, pool.bytes_total());
  RunLimits limits;  // batch items at position `context`
  limits.max_rows = batch;
  limits.max_context = context + 1;
  StageRunner runner(model, *kv, batch, limits);
  std::vector<DecodeItem> items(static_cast<size_t>(batch));
  for (int32_t b = 0; b < batch; ++b) {
    const auto seq = kv->AddSequence(context);
    if (!kv->Grow(seq, context + 1)) return Status::Error("internal: KV pool too small");
    runner.AddSequence(seq, 1);
    DecodeItem& it = items[static_cast<size_t>(b)];
    it.slot = b;
    it.seq = seq;
    it.pos = context;
    it.token = TokenAt(b, context, spec.vocab);
  }
  FATHOM_RETURN_IF_ERROR(runner.Prelude(items));
  CoreStepResult out;
  FATHOM_RETURN_IF_ERROR(runner.CoreStep(items, &out));  // warm-up
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const double t = Now();
    FATHOM_RETURN_IF_ERROR(runner.CoreStep(items, &out));
    times.push_back(Now() - t);
  }
  std::sort(times.begin(), times.end());
  res.seconds = times[times.size() / 2];
  return res;
}

}  // namespace fathom::cli
