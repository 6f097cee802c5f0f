#include "bench/kv_capacity.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>

#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "kv/block_pool.h"

namespace fathom::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double CpuNow() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Times {
  double wall = 0, cpu = 0;
};

int32_t TokenAt(int64_t seq, int64_t pos, int64_t vocab) {
  return static_cast<int32_t>((seq * 7919 + pos * 104729 + 13) % vocab);
}

// The median decode step (prelude over every layer, head) of `batch` sequences at `context`.
Result<Times> DecodeStep(const Model& model, int32_t batch, int64_t context, int reps, int32_t block,
                         DType kv_dtype) {
  const ModelSpec& spec = model.spec();
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table, KvLayerTable::Build(KvShapeOf(spec, 1), KvLayout::kLastExited, 1));
  const int64_t per_seq = table.num_physical_layers() * ((context + 1 + block - 1) / block);
  FATHOM_ASSIGN_OR_RETURN(auto kv,
                          MakeKvManager(spec, 1, KvLayout::kLastExited, 1, per_seq * batch, block, kv_dtype));
  BlockPool& pool = kv->pool();
  // A block's K and V rows are one stride apart from the next block's: one memset touches
  // the whole pool before timing.
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
  CodaResult out;
  std::vector<double> wall, cpu;
  for (int i = 0; i <= reps; ++i) {  // the first is a warm-up
    const double t = Now(), c = CpuNow();
    FATHOM_RETURN_IF_ERROR(runner.Prelude(items));
    FATHOM_RETURN_IF_ERROR(runner.Coda(items, &out));
    if (i > 0) wall.push_back(Now() - t), cpu.push_back(CpuNow() - c);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return Times{wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

// One prompt of prefill_tokens in the engine's chunks, logits for its last token only.
Result<Times> PrefillTime(const Model& model, const KvCapacityOptions& opt) {
  const ModelSpec& spec = model.spec();
  const int64_t n = opt.prefill_tokens;
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = TokenAt(1, i, spec.vocab);
  FATHOM_ASSIGN_OR_RETURN(KvLayerTable table, KvLayerTable::Build(KvShapeOf(spec, 1), KvLayout::kLastExited, 1));
  const int64_t blocks = table.num_physical_layers() * ((n + opt.block_size - 1) / opt.block_size);
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, 1, KvLayout::kLastExited, 1, blocks, opt.block_size,
                                                 opt.kv_dtype));
  RunLimits limits;  // one prompt in prefill_chunk pieces
  limits.max_rows = std::max<int64_t>(1, std::min(opt.prefill_chunk, n));
  limits.max_context = n;
  StageRunner runner(model, *kv, 1, limits);
  const KvManager::SeqId seq = kv->AddSequence(n);
  if (!kv->Grow(seq, n)) return Status::Error("internal: KV pool too small for the prompt");
  runner.AddSequence(seq, 1);
  PrefillResult out;
  const double t = Now(), cpu = CpuNow();
  for (int64_t p = 0; p < n; p += opt.prefill_chunk) {
    PrefillChunk c;
    c.seq = seq;
    c.ids = ids.data() + p;
    c.pos0 = p;
    c.n = std::min(opt.prefill_chunk, n - p);
    c.logits = p + c.n == n ? PrefillChunk::Logits::kLast : PrefillChunk::Logits::kNone;
    FATHOM_RETURN_IF_ERROR(runner.Prefill({c}, false, &out));
  }
  return Times{Now() - t, CpuNow() - cpu};
}

}  // namespace

Result<KvCapacityResult> MeasureKvCapacity(const Model& model, const KvCapacityOptions& opt) {
  const ModelSpec& spec = model.spec();
  if (spec.loop.looped) return Status::Error("kv capacity: for non-looped models (dense, LCKV)");
  if (opt.prompt < 1 || opt.output < 1) return Status::Error("kv capacity: prompt and output must be positive");
  if (opt.prompt + opt.output > model.rope().max_positions())
    return Status::Error("kv capacity: prompt + output (" + std::to_string(opt.prompt + opt.output) +
                         ") exceeds the model's " + std::to_string(model.rope().max_positions()) + " positions");
  KvCapacityResult r;
  r.layers = static_cast<int32_t>(spec.layers.size());
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, 1, KvLayout::kLastExited, 1, 1, opt.block_size,
                                                 opt.kv_dtype));
  r.kv_layers = kv->table().num_physical_layers();
  r.bytes_per_token = static_cast<int64_t>(r.kv_layers) * 2 *
                      BlockPool::RowElems(spec.kv_dim(), opt.kv_dtype, spec.n_kv_heads) *
                      static_cast<int64_t>(DTypeSize(opt.kv_dtype));
  r.blocks = BlockPool::BlocksForBudget(opt.kv_bytes, opt.block_size, spec.kv_dim(), opt.kv_dtype,
                                        spec.n_kv_heads);
  const int64_t len = opt.prompt + opt.output;
  r.blocks_per_sequence = kv->BlocksFor(opt.prompt, len);
  r.max_batch = static_cast<int32_t>(r.blocks / r.blocks_per_sequence);
  if (r.max_batch < 1) return Status::Error("kv capacity: not one sequence of " + std::to_string(len) + " tokens fits");

  std::vector<int32_t> batches;
  for (int32_t b : opt.batches)
    if (b >= 1 && b < r.max_batch) batches.push_back(b);
  batches.push_back(r.max_batch);
  std::sort(batches.begin(), batches.end());
  batches.erase(std::unique(batches.begin(), batches.end()), batches.end());
  const size_t block_bytes =
      BlockPool::BytesPerBlock(opt.block_size, spec.kv_dim(), opt.kv_dtype, spec.n_kv_heads);
  for (int32_t b : batches) {
    DecodePoint p;
    p.batch = b;
    FATHOM_ASSIGN_OR_RETURN(Times t, DecodeStep(model, b, opt.prompt + opt.output / 2, opt.reps, opt.block_size,
                                                                opt.kv_dtype));
    p.step_s = t.wall;
    p.step_cpu_s = t.cpu;
    p.tok_s = b / p.step_s;
    p.tok_cpu_s = b / p.step_cpu_s;
    p.kv_gib = static_cast<double>(r.blocks_per_sequence * b) * static_cast<double>(block_bytes) / (1u << 30);
    r.decode.push_back(p);
  }
  if (opt.prefill_tokens > 0) {
    FATHOM_ASSIGN_OR_RETURN(Times t, PrefillTime(model, opt));
    r.prefill_s = t.wall;
    r.prefill_cpu_s = t.cpu;
  }
  return r;
}

}  // namespace fathom::bench
