// Linear on oneDNN's matmul primitive with weights prepacked once into oneDNN's blocked layout.
//
// oneDNN's matmul is src[M, K] · weights[K, N] -> dst[M, N]; a Hugging Face weight W[N, K]
// row-major is exactly weights[K, N] in format `ba`, so no transpose is needed on our side.
// Compute types (oneDNN 2.6 on this CPU has no f16 matmul):
//   bf16 W: x is rounded to bf16 per call, bf16 x bf16 -> f32 (AMX / AVX512_BF16); on CPUs
//           without AVX-512 oneDNN 2.6 has no bf16 matmul, and W is converted to f32 instead.
//   f16 W:  converted to f32 at Create (exact), then f32 matmul.
//   f32 W:  f32 matmul with fpmath mode `strict` (no silent down-conversion).
// Primitives depend on M, so they are created on first use per M (up to kMaxChunkRows; larger
// M is split into chunks) against the one packed layout chosen at Create. At small M
// (GemvMaxRows()) with bf16 weights the AVX512-BF16 GEMV in gemv_bf16.cc streams the same
// packed buffer faster. Above it, with more than one thread, bf16 matmuls run on fathom's
// pool (core/parallel.h) as tiles of y (runs of rows by runs of whole 64-column blocks of
// that layout), each a one-thread oneDNN matmul, rather than on oneDNN's OpenMP team, whose
// barriers wait for a thread the OS has descheduled (docs/BENCHMARKS.md "oneDNN's matmuls
// on the pool").
// WeightFormat::kInt8, kW8A8 and kInt4 bypass oneDNN altogether: Int8Weights (matmul_int8.h),
// W8A8Weights (matmul_w8a8.h) or Int4Weights (matmul_int4.h) for every M.
#include "kernels/matmul.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <string_view>
#include <utility>

#include "core/check.h"
#include "core/parallel.h"
#include "kernels/gemv_bf16.h"
#include "kernels/matmul_half.h"
#include "kernels/matmul_int4.h"
#include "kernels/matmul_int8.h"
#include "kernels/matmul_row_invariant.h"
#include "kernels/matmul_w8a8.h"

namespace fathom {
namespace {

using dnnl::memory;
using mdt = memory::data_type;
using mtag = memory::format_tag;

// Larger M is processed in chunks of this many rows: keeps the per-M primitive cache bounded
// and costs nothing measurable (at M >= 256 the matmul is compute-bound; re-streaming the
// weights once per 512 rows is hidden).
constexpr int64_t kMaxChunkRows = 512;
// M used to ask oneDNN for its preferred weights layout (the same layout for all M on this
// CPU in oneDNN 2.6; other M are created against it explicitly).
constexpr int64_t kLayoutProbeRows = 256;

dnnl::engine& CpuEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// CPU streams execute synchronously in the calling thread; one per thread keeps Linears that
// run on different threads independent.
dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

// A grow-only, 64-byte aligned buffer. Used thread_local: Forward is synchronous, so all
// Linears on one thread can share it, and the steady state allocates nothing.
class GrowBuffer {
 public:
  void* Get(size_t bytes) {
    if (bytes > size_) {
      const size_t rounded = (bytes + 63) / 64 * 64;
      ptr_.reset(std::aligned_alloc(64, rounded));
      FATHOM_CHECK_MSG(ptr_ != nullptr, "allocating " << rounded << " bytes");
      size_ = rounded;
    }
    return ptr_.get();
  }

 private:
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<void, Free> ptr_;
  size_t size_ = 0;
};

GrowBuffer& ThreadXBuffer() {  // x rounded to bf16
  thread_local GrowBuffer buffer;
  return buffer;
}
GrowBuffer& ThreadScratchpad() {  // oneDNN's user-mode scratchpad
  thread_local GrowBuffer buffer;
  return buffer;
}

// 16 floats -> 16 bf16, round to nearest even, NaN kept quiet (as F32ToBF16 in core/dtype.h).
inline __m256i RoundToBf16x8(__m256 v) {
  const __m256i bits = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x00400000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
}

// x: [rows, k] f32 -> dst: [rows, dst_stride] bf16, columns k..dst_stride-1 zeroed.
void ConvertRowsToBf16(const float* x, int64_t rows, int64_t k, uint16_t* dst, int64_t dst_stride) {
  ParallelFor(rows, rows > 1 && rows * k >= (int64_t{1} << 18), [&](int64_t r) {
    const float* src = x + r * k;
    uint16_t* out = dst + r * dst_stride;
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
      const __m256i lo = RoundToBf16x8(_mm256_loadu_ps(src + i));
      const __m256i hi = RoundToBf16x8(_mm256_loadu_ps(src + i + 8));
      // packus works per 128-bit lane: (lo0 hi0 lo1 hi1) -> reorder quadwords to lo hi.
      const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
    }
    for (; i < k; ++i) out[i] = F32ToBF16(src[i]);
    for (; i < dst_stride; ++i) out[i] = 0;
  });
}

// True when `md` is oneDNN's BA16a64b2a layout that GemvBf16Packed reads.
bool IsGemvLayout(const memory::desc& md) {
  const dnnl_memory_desc_t& c = md.data;
  if (c.ndims != 2 || c.format_kind != dnnl_blocked || c.offset0 != 0) return false;
  const auto& b = c.format_desc.blocking;
  const int64_t kp = c.padded_dims[0];
  return b.inner_nblks == 3 && b.inner_blks[0] == 16 && b.inner_idxs[0] == 0 &&
         b.inner_blks[1] == 64 && b.inner_idxs[1] == 1 && b.inner_blks[2] == 2 &&
         b.inner_idxs[2] == 0 && kp % 32 == 0 && b.strides[0] == 32 * 64 && b.strides[1] == kp * 64;
}

// The pool's oneDNN path splits y [M, N] into tiles: rows in equal runs of at most 128,
// columns in equal runs of whole 64-column blocks of the packed layout (so a tile's weights
// are one contiguous run), as few as keep a tile's weights within 2 MiB (a core's L2 or
// two) but at least two tiles per thread, and a multiple of the threads while the tiles
// are few. Chosen by timing single Linears on 2 threads of the Zen 5 host against oneDNN's
// own team (docs/BENCHMARKS.md "oneDNN's matmuls on the pool"): small tiles (64 x 64 at
// K = 512) cost their fixed overhead (a primitive's execution, the copy of a narrower
// tile into y), five tiles for two threads left one idle a fifth of the time.
struct TileShape {
  int64_t rows, cols;
};
TileShape TileGrid(int64_t m, int64_t n, int64_t k, int64_t threads) {
  const int64_t row_tiles = (m + 127) / 128, rows = (m + row_tiles - 1) / row_tiles;
  const int64_t blocks = (n + 63) / 64;
  const int64_t by_bytes = (blocks * 64 * k * 2 + (int64_t{2} << 20) - 1) / (int64_t{2} << 20);
  int64_t col_tiles = std::max((2 * threads + row_tiles - 1) / row_tiles, by_bytes);
  if (row_tiles * col_tiles < 4 * threads)
    col_tiles = (col_tiles + threads - 1) / threads * threads;
  col_tiles = std::clamp<int64_t>(col_tiles, 1, blocks);
  const int64_t cols = (blocks + col_tiles - 1) / col_tiles * 64;
  return {rows, std::min(n, cols)};
}

// FATHOM_MATMUL=team: oneDNN's matmuls on its own OpenMP team (as before the pool's path),
// for comparisons in one binary; FATHOM_PARALLEL=openmp implies it.
bool OneDnnOnPoolByEnvironment() {
  static const bool on_pool = [] {
    const char* m = std::getenv("FATHOM_MATMUL");
    const char* p = std::getenv("FATHOM_PARALLEL");
    return !(m != nullptr && std::string_view(m) == "team") &&
           !(p != nullptr && std::string_view(p) == "openmp");
  }();
  return on_pool;
}
std::atomic<bool> g_tiles_enabled{true};
std::atomic<int64_t> g_tiles_executed{0};

bool OneDnnOnPool() {
  return OneDnnOnPoolByEnvironment() && g_tiles_enabled.load(std::memory_order_relaxed);
}

}  // namespace

// One oneDNN matmul for one M, with memory objects whose data handles are set per call and
// a prebuilt C argument array (the C++ execute() would build a vector and a map per call).
struct LinearPrim {
  dnnl::matmul matmul;
  memory src, dst, scratch;
  size_t scratch_bytes = 0;
  std::array<dnnl_exec_arg_t, 5> args{};
  int num_args = 0;
};

// A one-thread oneDNN matmul over one tile of the pool's path (RunOneDnnOnPool below):
// `rows` rows of x, `cols` columns of the packed weights (whole 64-column blocks; the last
// tile of a row may be narrower). Memory objects are made per call (each thread executes
// its own tile).
struct TilePrim {
  int64_t rows = 0, cols = 0;
  dnnl::matmul matmul;
  memory::desc src, weights, dst, bias, scratch;
  size_t scratch_bytes = 0;
  // False where oneDNN has no optimized one-thread kernel for it (it would pick its slow
  // reference kernel, or none): that M then runs on oneDNN's own team.
  bool usable = false;
};

GrowBuffer& ThreadTileBuffer() {  // a tile's dst, [rows, cols] f32
  thread_local GrowBuffer buffer;
  return buffer;
}

struct Linear::Impl {
  int64_t k = 0, n = 0;
  DType dtype = DType::kF32;  // of the checkpoint
  WeightFormat format = WeightFormat::kCheckpoint;
  // kInt8: the quantized weights; nothing of oneDNN below is used.
  Int8Weights int8;
  // kW8A8: the same int8 weights packed for int8 activations (VNNI).
  W8A8Weights w8a8;
  // kInt4: int4 weights in groups of 32 times int8 activations (VNNI).
  Int4Weights int4;
  HalfWeights half;       // bf16 / f16 checkpoints where internal::PreferHalfWeights()
  bool use_half = false;
  // Weights in one of fathom's own (row-independent) kernels rather than oneDNN's.
  bool own_kernel() const { return format != WeightFormat::kCheckpoint || use_half; }
  // MakeBatchInvariant: W [N, K] f32 for MatmulF32RowInvariant; oneDNN's copy is freed.
  std::vector<float> invariant_w;
  // The f32 bias [N] of fathom's own kernels (int8, batch-invariant); empty: none.
  std::vector<float> own_bias;
  const float* own_bias_or_null() const { return own_bias.empty() ? nullptr : own_bias.data(); }
  mdt compute = mdt::f32;     // of src and weights in the matmul
  memory::desc packed_md;     // weights [K, N] in oneDNN's layout
  memory weights;             // packed weights, owned (allocated by oneDNN)
  memory bias;                // f32 [1, N]; empty when no part has a bias
  bool use_gemv = false;      // bf16 weights in IsGemvLayout and a CPU with AVX512_BF16
  // Per OpenMP team size (oneDNN fixes a primitive's thread count when it builds it, so a
  // caller that changes omp_set_num_threads, like the engine's ThreadGovernor, needs one
  // per count): {threads, [kMaxChunkRows + 1] by M}, a few entries.
  mutable std::vector<std::pair<int, std::vector<std::unique_ptr<LinearPrim>>>> prims;
  // The pool's path (M > the GEMV's rows, bf16 in the GEMV's layout, more than one thread):
  // y in tiles, each a one-thread matmul; a few tile shapes per M.
  bool tiles_on_pool = false;
  mutable std::vector<std::unique_ptr<TilePrim>> tile_prims;

  void SetBias(const std::vector<TensorView>& parts, const std::vector<const TensorView*>& biases);
  void Prepack(const std::vector<TensorView>& parts);
  dnnl::matmul::primitive_desc MakePd(int64_t m, const memory::desc& w_md) const;
  LinearPrim& Prim(int64_t m) const;
  void RunOneDnn(const float* x, int64_t m, float* y) const;
  const TilePrim& Tile(int64_t rows, int64_t cols) const;
  void RunOneDnnOnPool(const float* x, int64_t m, float* y) const;
  void RunGemv(const float* x, int64_t m, float* y) const;
};

dnnl::matmul::primitive_desc Linear::Impl::MakePd(int64_t m, const memory::desc& w_md) const {
  const memory::desc src({m, k}, compute, mtag::ab);
  const memory::desc dst({m, n}, mdt::f32, mtag::ab);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (compute == mdt::f32) attr.set_fpmath_mode(dnnl::fpmath_mode::strict);
  const auto desc = bias ? dnnl::matmul::desc(src, w_md, bias.get_desc(), dst)
                         : dnnl::matmul::desc(src, w_md, dst);
  return dnnl::matmul::primitive_desc(desc, attr, CpuEngine());
}

LinearPrim& Linear::Impl::Prim(int64_t m) const {
  const int threads = omp_get_max_threads();
  auto team = std::find_if(prims.begin(), prims.end(), [&](const auto& p) { return p.first == threads; });
  if (team == prims.end()) {
    prims.emplace_back(threads, std::vector<std::unique_ptr<LinearPrim>>(kMaxChunkRows + 1));
    team = prims.end() - 1;
  }
  std::unique_ptr<LinearPrim>& slot = team->second[static_cast<size_t>(m)];
  if (slot) return *slot;
  auto p = std::make_unique<LinearPrim>();
  try {
    const auto pd = MakePd(m, packed_md);
    p->matmul = dnnl::matmul(pd);
    p->src = memory(pd.src_desc(), CpuEngine(), DNNL_MEMORY_NONE);
    p->dst = memory(pd.dst_desc(), CpuEngine(), DNNL_MEMORY_NONE);
    p->scratch_bytes = pd.scratchpad_desc().get_size();
    p->scratch = memory(pd.scratchpad_desc(), CpuEngine(), DNNL_MEMORY_NONE);
  } catch (const dnnl::error& e) {
    FATHOM_CHECK_MSG(false,
                     "oneDNN matmul for M=" << m << " K=" << k << " N=" << n << ": " << e.what());
  }
  auto add = [&](int arg, const memory& mem) { p->args[p->num_args++] = {arg, mem.get()}; };
  add(DNNL_ARG_SRC, p->src);
  add(DNNL_ARG_WEIGHTS, weights);
  add(DNNL_ARG_DST, p->dst);
  if (bias) add(DNNL_ARG_BIAS, bias);
  if (p->scratch_bytes > 0) add(DNNL_ARG_SCRATCHPAD, p->scratch);
  slot = std::move(p);
  return *slot;
}

// x: [m, K] f32, y: [m, N] f32, 1 <= m <= kMaxChunkRows.
void Linear::Impl::RunOneDnn(const float* x, int64_t m, float* y) const {
  LinearPrim& p = Prim(m);
  const void* src = x;
  if (compute == mdt::bf16) {
    auto* xb = static_cast<uint16_t*>(ThreadXBuffer().Get(static_cast<size_t>(m * k) * 2));
    ConvertRowsToBf16(x, m, k, xb, k);
    src = xb;
  }
  p.src.set_data_handle(const_cast<void*>(src));  // oneDNN only reads src
  p.dst.set_data_handle(y);
  if (p.scratch_bytes > 0) p.scratch.set_data_handle(ThreadScratchpad().Get(p.scratch_bytes));
  ParallelPark();  // oneDNN runs on libgomp's team: the pool's idle workers would take its cores
  const dnnl_status_t st =
      dnnl_primitive_execute(p.matmul.get(), ThreadStream().get(), p.num_args, p.args.data());
  FATHOM_CHECK_MSG(st == dnnl_success, "oneDNN matmul status " << static_cast<int>(st));
}

// Created with a team of one (oneDNN fixes a primitive's thread count when it builds it):
// executed on a pool thread, it runs there and nowhere else.
const TilePrim& Linear::Impl::Tile(int64_t rows, int64_t cols) const {
  for (const auto& t : tile_prims)
    if (t->rows == rows && t->cols == cols) return *t;
  auto p = std::make_unique<TilePrim>();
  p->rows = rows;
  p->cols = cols;
  const int team = omp_get_max_threads();
  omp_set_num_threads(1);
  try {
    const memory::desc src({rows, k}, mdt::bf16, mtag::ab);
    const memory::desc w({k, cols}, mdt::bf16, mtag::BA16a64b2a);
    // Dense: oneDNN 2.6's brgemm matmul takes no row stride for dst (it falls back to its
    // reference kernel), so a tile narrower than N writes a thread's buffer, then copied.
    const memory::desc dst({rows, cols}, mdt::f32, mtag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const memory::desc b({1, cols}, mdt::f32, mtag::ab);
    const auto desc = bias ? dnnl::matmul::desc(src, w, b, dst) : dnnl::matmul::desc(src, w, dst);
    const dnnl::matmul::primitive_desc pd(desc, attr, CpuEngine());
    p->usable = std::string_view(pd.impl_info_str()).substr(0, 3) != "ref";
    p->matmul = dnnl::matmul(pd);
    p->src = pd.src_desc();
    p->weights = pd.weights_desc();
    p->dst = pd.dst_desc();
    if (bias) p->bias = b;
    p->scratch = pd.scratchpad_desc();
    p->scratch_bytes = p->scratch.get_size();
  } catch (const dnnl::error&) {
    p->usable = false;
  }
  omp_set_num_threads(team);
  tile_prims.push_back(std::move(p));
  return *tile_prims.back();
}

// x: [m, K] f32, y: [m, N] f32, 1 <= m <= kMaxChunkRows: x rounded to bf16 once, then y's
// tiles claimed by the pool's threads like any loop's items, column tile by column tile
// (consecutive items share their weights, which stay in the claiming core's cache). Why not
// oneDNN's own team: its regions end at libgomp barriers, where a thread the OS has
// descheduled (another busy process on the host) holds every thread (core/parallel.h).
void Linear::Impl::RunOneDnnOnPool(const float* x, int64_t m, float* y) const {
  const TileShape t = TileGrid(m, n, k, omp_get_max_threads());
  const int64_t row_tiles = (m + t.rows - 1) / t.rows, col_tiles = (n + t.cols - 1) / t.cols;
  const int64_t last_rows = m - (row_tiles - 1) * t.rows, last_cols = n - (col_tiles - 1) * t.cols;
  // [row is last][column is last]
  const TilePrim* grid[2][2] = {{&Tile(t.rows, t.cols), &Tile(t.rows, last_cols)},
                                {&Tile(last_rows, t.cols), &Tile(last_rows, last_cols)}};
  for (const auto& row : grid)
    for (const TilePrim* p : row)
      if (!p->usable) return RunOneDnn(x, m, y);
  auto* xb = static_cast<uint16_t*>(ThreadXBuffer().Get(static_cast<size_t>(m * k) * 2));
  ConvertRowsToBf16(x, m, k, xb, k);
  const int64_t kp = packed_md.data.padded_dims[0];
  auto* w = static_cast<uint16_t*>(weights.get_data_handle());
  auto* b = bias ? static_cast<float*>(bias.get_data_handle()) : nullptr;
  ParallelFor(row_tiles * col_tiles, true, [&](int64_t i) {
    const int64_t ct = i / row_tiles, rt = i % row_tiles;
    const TilePrim& p = *grid[rt + 1 == row_tiles][ct + 1 == col_tiles];
    const int64_t r0 = rt * t.rows, c0 = ct * t.cols;  // columns [c0, c0 + cols): blocks c0 / 64 on
    const dnnl::engine& eng = CpuEngine();
    std::array<memory, 5> mem;
    std::array<dnnl_exec_arg_t, 5> args{};
    int num = 0;
    auto add = [&](int arg, const memory::desc& md, void* h) {
      mem[static_cast<size_t>(num)] = memory(md, eng, h);
      args[static_cast<size_t>(num)] = {arg, mem[static_cast<size_t>(num)].get()};
      ++num;
    };
    add(DNNL_ARG_SRC, p.src, xb + r0 * k);
    add(DNNL_ARG_WEIGHTS, p.weights, w + c0 * kp);
    const bool direct = p.cols == n;  // whole rows: y's rows are the tile's dense rows
    auto* out =
        direct
            ? y + r0 * n
            : static_cast<float*>(ThreadTileBuffer().Get(static_cast<size_t>(p.rows * p.cols) * 4));
    add(DNNL_ARG_DST, p.dst, out);
    if (b != nullptr) add(DNNL_ARG_BIAS, p.bias, b + c0);
    if (p.scratch_bytes > 0)
      add(DNNL_ARG_SCRATCHPAD, p.scratch, ThreadScratchpad().Get(p.scratch_bytes));
    const dnnl_status_t st =
        dnnl_primitive_execute(p.matmul.get(), ThreadStream().get(), num, args.data());
    FATHOM_CHECK_MSG(st == dnnl_success, "oneDNN matmul status " << static_cast<int>(st));
    if (!direct)
      for (int64_t r = 0; r < p.rows; ++r)
        std::memcpy(y + (r0 + r) * n + c0, out + r * p.cols,
                    static_cast<size_t>(p.cols) * sizeof(float));
    g_tiles_executed.fetch_add(1, std::memory_order_relaxed);
  });
}

// Small M, bf16: x rounded to bf16 with rows padded to Kp, then the AVX512-BF16 GEMV.
void Linear::Impl::RunGemv(const float* x, int64_t m, float* y) const {
  const int64_t kp = packed_md.data.padded_dims[0];
  auto* xb = static_cast<uint16_t*>(ThreadXBuffer().Get(static_cast<size_t>(m * kp) * 2));
  ConvertRowsToBf16(x, m, k, xb, kp);
  const auto* bias_f32 = bias ? static_cast<const float*>(bias.get_data_handle()) : nullptr;
  internal::GemvBf16Packed(static_cast<const uint16_t*>(weights.get_data_handle()), kp, n, xb, m,
                           kp, bias_f32, y);
}

namespace {

Status ValidateParts(const std::vector<TensorView>& weights,
                     const std::vector<const TensorView*>& biases) {
  if (weights.empty()) return Status::Error("Linear: no weights given");
  if (!biases.empty() && biases.size() != weights.size())
    return Status::Error("Linear: " + std::to_string(biases.size()) + " biases for " +
                         std::to_string(weights.size()) + " weights");
  const TensorView& w0 = weights[0];
  for (size_t i = 0; i < weights.size(); ++i) {
    const TensorView& w = weights[i];
    const std::string where = "Linear: weight " + std::to_string(i) + " " + ShapeToString(w.shape);
    if (w.shape.size() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0)
      return Status::Error(where + " is not a non-empty [N, K] matrix");
    if (w.data == nullptr) return Status::Error(where + " has no data");
    if (w.shape[1] != w0.shape[1])
      return Status::Error(where + " has K=" + std::to_string(w.shape[1]) + ", weight 0 " +
                           ShapeToString(w0.shape) + " has K=" + std::to_string(w0.shape[1]));
    if (w.dtype != w0.dtype)
      return Status::Error(where + " is " + std::string(DTypeName(w.dtype)) + ", weight 0 is " +
                           std::string(DTypeName(w0.dtype)));
    const TensorView* b = biases.empty() ? nullptr : biases[i];
    if (b && (b->shape != Shape{w.shape[0]} || b->data == nullptr))
      return Status::Error("Linear: bias " + std::to_string(i) + " " + ShapeToString(b->shape) +
                           " does not match weight " + ShapeToString(w.shape));
  }
  return Status::Ok();
}

// The parts concatenated along N as a plain [N, K] buffer of the compute type (f16 -> f32).
std::vector<uint8_t> ConcatPlain(const std::vector<TensorView>& weights, bool to_f32) {
  size_t total = 0;
  for (const TensorView& w : weights) total += static_cast<size_t>(w.numel());
  const size_t elem = to_f32 ? 4 : DTypeSize(weights[0].dtype);
  std::vector<uint8_t> out(total * elem);
  size_t at = 0;
  for (const TensorView& w : weights) {
    const size_t cnt = static_cast<size_t>(w.numel());
    if (to_f32)
      ConvertToF32(w.dtype, w.data, reinterpret_cast<float*>(out.data()) + at, cnt);
    else
      std::memcpy(out.data() + at * elem, w.data, cnt * elem);
    at += cnt;
  }
  return out;
}

// The biases concatenated along N as f32 [N], zeros where a part has none; empty when no
// part has a bias.
std::vector<float> ConcatBias(const std::vector<TensorView>& parts,
                              const std::vector<const TensorView*>& biases) {
  bool any_bias = false;
  for (const TensorView* b : biases) any_bias |= b != nullptr;
  if (!any_bias) return {};
  size_t n = 0;
  for (const TensorView& w : parts) n += static_cast<size_t>(w.shape[0]);
  std::vector<float> out(n, 0.f);
  float* dst = out.data();
  for (size_t i = 0; i < parts.size(); ++i) {
    const auto rows = static_cast<size_t>(parts[i].shape[0]);
    if (biases[i]) ConvertToF32(biases[i]->dtype, biases[i]->data, dst, rows);
    dst += rows;
  }
  return out;
}

}  // namespace

std::string_view WeightFormatName(WeightFormat f) {
  switch (f) {
    case WeightFormat::kInt8: return "int8";
    case WeightFormat::kW8A8: return "w8a8";
    case WeightFormat::kInt4: return "int4";
    case WeightFormat::kCheckpoint: break;
  }
  return "checkpoint";
}

std::optional<WeightFormat> ParseWeightFormat(std::string_view name) {
  if (name == "checkpoint") return WeightFormat::kCheckpoint;
  if (name == "int8") return WeightFormat::kInt8;
  if (name == "w8a8") return WeightFormat::kW8A8;
  if (name == "int4") return WeightFormat::kInt4;
  return std::nullopt;
}

// bias: [1, N] f32, zeros where a part has none; left empty when no part has a bias.
void Linear::Impl::SetBias(const std::vector<TensorView>& parts,
                           const std::vector<const TensorView*>& biases) {
  const std::vector<float> b = ConcatBias(parts, biases);
  if (b.empty()) return;
  bias = memory({{1, n}, mdt::f32, mtag::ab}, CpuEngine());
  std::memcpy(bias.get_data_handle(), b.data(), b.size() * sizeof(float));
}

// Asks oneDNN for its weights layout in `compute`, then reorders the parts into it, in
// memory this Linear owns. Throws dnnl::error when oneDNN has no such matmul.
void Linear::Impl::Prepack(const std::vector<TensorView>& parts) {
  const memory::desc any_md({k, n}, compute, mtag::any);
  packed_md = MakePd(kLayoutProbeRows, any_md).weights_desc();
  (void)MakePd(1, packed_md);  // the layout must also serve M = 1
  std::vector<uint8_t> plain = ConcatPlain(parts, compute == mdt::f32);
  memory plain_mem({{k, n}, compute, mtag::ba}, CpuEngine(), plain.data());
  weights = memory(packed_md, CpuEngine());
  dnnl::reorder(plain_mem, weights).execute(ThreadStream(), plain_mem, weights);
  ThreadStream().wait();
}

Result<Linear> Linear::Create(const std::vector<TensorView>& weights,
                              const std::vector<const TensorView*>& biases, WeightFormat format) {
  FATHOM_RETURN_IF_ERROR(ValidateParts(weights, biases));
  auto impl = std::make_unique<Impl>();
  impl->k = weights[0].shape[1];
  for (const TensorView& w : weights) impl->n += w.shape[0];
  impl->dtype = weights[0].dtype;
  impl->format = format;
  if (impl->own_kernel()) {
    const std::vector<uint8_t> plain = ConcatPlain(weights, /*to_f32=*/true);
    const auto* w = reinterpret_cast<const float*>(plain.data());
    if (format == WeightFormat::kInt8) {
      auto q = Int8Weights::Quantize(w, impl->n, impl->k);
      if (!q.ok()) return q.status().WithContext("Linear");
      impl->int8 = std::move(*q);
    } else if (format == WeightFormat::kW8A8) {
      auto q = W8A8Weights::Quantize(w, impl->n, impl->k);
      if (!q.ok()) return q.status().WithContext("Linear");
      impl->w8a8 = std::move(*q);
    } else {
      auto q = Int4Weights::Quantize(w, impl->n, impl->k);
      if (!q.ok()) return q.status().WithContext("Linear");
      impl->int4 = std::move(*q);
    }
    impl->own_bias = ConcatBias(weights, biases);
    Linear out;
    out.impl_ = std::move(impl);
    return out;
  }
  if ((impl->dtype == DType::kBF16 || impl->dtype == DType::kF16) && internal::PreferHalfWeights()) {
    const std::vector<uint8_t> plain = ConcatPlain(weights, /*to_f32=*/false);
    auto h = HalfWeights::Pack(reinterpret_cast<const uint16_t*>(plain.data()), impl->dtype,
                               impl->n, impl->k);
    if (!h.ok()) return h.status().WithContext("Linear");
    impl->half = std::move(*h);
    impl->use_half = true;
    impl->own_bias = ConcatBias(weights, biases);
    Linear out;
    out.impl_ = std::move(impl);
    return out;
  }
  impl->compute = impl->dtype == DType::kBF16 ? mdt::bf16 : mdt::f32;
  try {
    impl->SetBias(weights, biases);
    try {
      impl->Prepack(weights);
    } catch (const dnnl::error&) {
      // oneDNN 2.6 has no bf16 matmul below AVX-512: run bf16 weights as (exact) f32.
      if (impl->compute != mdt::bf16) throw;
      impl->compute = mdt::f32;
      impl->Prepack(weights);
    }
  } catch (const dnnl::error& e) {
    return Status::Error("Linear: oneDNN failed for K=" + std::to_string(impl->k) +
                         " N=" + std::to_string(impl->n) + " " +
                         std::string(DTypeName(impl->dtype)) + ": " + e.what());
  }
  impl->use_gemv =
      impl->compute == mdt::bf16 && internal::CpuHasAvx512Bf16() && IsGemvLayout(impl->packed_md);
  if (impl->use_gemv) {
    // The pool's path where oneDNN has a one-thread kernel for its tiles.
    const int64_t m = internal::GemvMaxRows() + 1;
    const TileShape t = TileGrid(m, impl->n, impl->k, 2);
    const int64_t last_cols = impl->n % t.cols == 0 ? t.cols : impl->n % t.cols;
    impl->tiles_on_pool = impl->Tile(t.rows, t.cols).usable && impl->Tile(t.rows, last_cols).usable;
  }
  Linear out;
  out.impl_ = std::move(impl);
  return out;
}

Linear::Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;
Linear::~Linear() = default;

int64_t Linear::in_features() const { return impl_ ? impl_->k : 0; }
int64_t Linear::out_features() const { return impl_ ? impl_->n : 0; }
DType Linear::weight_dtype() const { return impl_ ? impl_->dtype : DType::kF32; }
WeightFormat Linear::weight_format() const {
  return impl_ ? impl_->format : WeightFormat::kCheckpoint;
}
DType Linear::compute_dtype() const {
  return impl_ && impl_->compute == mdt::bf16 ? DType::kBF16 : DType::kF32;
}
size_t Linear::weight_bytes() const {
  if (!impl_) return 0;
  if (impl_->format == WeightFormat::kInt8) return impl_->int8.bytes();
  if (impl_->format == WeightFormat::kW8A8) return impl_->w8a8.bytes();
  if (impl_->format == WeightFormat::kInt4) return impl_->int4.bytes();
  if (impl_->use_half) return impl_->half.bytes();
  if (!impl_->invariant_w.empty()) return impl_->invariant_w.size() * sizeof(float);
  return impl_->packed_md.get_size();
}

Status Linear::MakeBatchInvariant() {
  if (!impl_) return Status::Ok();  // an absent matmul (e.g. no adapter): nothing to run
  Impl& p = *impl_;
  if (p.own_kernel() || !p.invariant_w.empty()) return Status::Ok();
  try {
    // The packed weights back to plain [N, K] ("ba" of the [K, N] matrix), in f32.
    p.invariant_w.assign(static_cast<size_t>(p.n * p.k), 0.f);
    memory plain({{p.k, p.n}, mdt::f32, mtag::ba}, CpuEngine(), p.invariant_w.data());
    dnnl::reorder(p.weights, plain).execute(ThreadStream(), p.weights, plain);
    ThreadStream().wait();
  } catch (const dnnl::error& e) {
    p.invariant_w.clear();
    return Status::Error("Linear: cannot unpack K=" + std::to_string(p.k) + " N=" +
                         std::to_string(p.n) + " weights for the batch-invariant kernel: " + e.what());
  }
  if (p.bias) {
    const auto* b = static_cast<const float*>(p.bias.get_data_handle());
    p.own_bias.assign(b, b + p.n);
  }
  p.weights = memory();
  p.bias = memory();
  p.use_gemv = false;
  p.tiles_on_pool = false;
  p.tile_prims.clear();
  p.compute = mdt::f32;  // x is no longer rounded: set_split_bf16_activations has no work
  p.prims.clear();
  return Status::Ok();
}

bool Linear::batch_invariant() const {
  return impl_ && (impl_->own_kernel() || !impl_->invariant_w.empty());
}

void Linear::ForwardRounded(const float* x, int64_t m, float* y) const {
  if (!impl_->invariant_w.empty()) {
    internal::MatmulF32RowInvariant(x, m, impl_->k, impl_->invariant_w.data(), impl_->n,
                                    impl_->own_bias_or_null(), y);
    return;
  }
  if (impl_->format == WeightFormat::kInt8) {
    impl_->int8.Matmul(x, m, impl_->own_bias_or_null(), y);
    return;
  }
  if (impl_->format == WeightFormat::kW8A8) {
    impl_->w8a8.Matmul(x, m, impl_->own_bias_or_null(), y);
    return;
  }
  if (impl_->format == WeightFormat::kInt4) {
    impl_->int4.Matmul(x, m, impl_->own_bias_or_null(), y);
    return;
  }
  if (impl_->use_half) {
    impl_->half.Matmul(x, m, impl_->own_bias_or_null(), y);
    return;
  }
  if (impl_->use_gemv && m <= internal::GemvMaxRows() && internal::GemvEnabled()) {
    impl_->RunGemv(x, m, y);
    return;
  }
  const bool on_pool = impl_->tiles_on_pool && omp_get_max_threads() > 1 && OneDnnOnPool();
  for (int64_t r = 0; r < m; r += kMaxChunkRows) {
    const int64_t rows = std::min(kMaxChunkRows, m - r);
    if (on_pool) {
      impl_->RunOneDnnOnPool(x + r * impl_->k, rows, y + r * impl_->n);
      continue;
    }
    impl_->RunOneDnn(x + r * impl_->k, rows, y + r * impl_->n);
  }
}

void Linear::Forward(const float* x, int64_t m, float* y) const {
  FATHOM_CHECK_MSG(impl_ != nullptr, "Forward on an empty Linear");
  FATHOM_CHECK_MSG(m >= 0, "m=" << m);
  if (m == 0) return;
  ForwardRounded(x, m, y);
  if (!split_bf16_ || impl_->compute != mdt::bf16) return;
  // x = hi + lo with hi = bf16(x): the first pass used hi; add lo . W^T (its bias removed),
  // which leaves x's rounding error at about 2^-16 instead of 2^-8.
  thread_local std::vector<float> lo, y_lo;
  const int64_t k = impl_->k, n = impl_->n;
  lo.resize(static_cast<size_t>(m * k));
  y_lo.resize(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m * k; ++i) lo[static_cast<size_t>(i)] = x[i] - BF16ToF32(F32ToBF16(x[i]));
  ForwardRounded(lo.data(), m, y_lo.data());
  const auto* b = impl_->bias ? static_cast<const float*>(impl_->bias.get_data_handle()) : nullptr;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      y[i * n + j] += y_lo[static_cast<size_t>(i * n + j)] - (b ? b[j] : 0.f);
}

namespace internal {
void SetMatmulTilesEnabledForTesting(bool enabled) { g_tiles_enabled.store(enabled); }
int64_t MatmulTilesExecuted() { return g_tiles_executed.load(); }
}  // namespace internal

void LinearReference(const float* x, int64_t m, const TensorView& w, const float* bias, float* y) {
  FATHOM_CHECK_MSG(w.shape.size() == 2, "weight shape " << ShapeToString(w.shape));
  const int64_t n = w.shape[0], k = w.shape[1];
  const std::vector<float> wf = w.ToF32();  // exact for bf16 and f16
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? static_cast<double>(bias[j]) : 0.0;
      const float* wr = wf.data() + j * k;
      for (int64_t t = 0; t < k; ++t)
        acc += static_cast<double>(x[i * k + t]) * static_cast<double>(wr[t]);
      y[i * n + j] = static_cast<float>(acc);
    }
  }
}

}  // namespace fathom
