#include "alloc/alloc_counter.h"

#include <cxxabi.h>
#include <errno.h>
#include <execinfo.h>
#include <link.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

namespace fathom::testing {
namespace {

// Executable segments of the loaded objects, recorded once before counting starts.
struct Range {
  uintptr_t begin, end;
  AllocSource source;
};
constexpr int kMaxRanges = 256;
Range g_ranges[kMaxRanges];
int g_num_ranges = 0;

std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_new[AllocCounts::kSources], g_malloc[AllocCounts::kSources], g_bytes[AllocCounts::kSources];
std::atomic<int> g_kept{0};
void* g_stacks[AllocCounts::kKeptStacks][AllocCounts::kStackDepth];
int g_stack_depth[AllocCounts::kKeptStacks];
thread_local bool t_inside = false;  // an allocation made while attributing one is not counted

AllocSource SourceOfObject(const char* name) {
  if (name == nullptr || name[0] == '\0') return AllocSource::kFathom;  // the executable
  if (std::strstr(name, "libdnnl")) return AllocSource::kOneDnn;
  if (std::strstr(name, "libgomp")) return AllocSource::kOpenMp;
  if (std::strstr(name, "libstdc++")) return AllocSource::kStdCpp;
  if (std::strstr(name, "/libc.so") || std::strstr(name, "/libm.so")) return AllocSource::kLibc;
  return AllocSource::kOther;
}

int AddRanges(dl_phdr_info* info, size_t, void*) {
  for (int i = 0; i < info->dlpi_phnum && g_num_ranges < kMaxRanges; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || !(ph.p_flags & PF_X)) continue;
    const uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    g_ranges[g_num_ranges++] = {begin, begin + ph.p_memsz, SourceOfObject(info->dlpi_name)};
  }
  return 0;
}

AllocSource Classify(const void* pc) {
  const auto a = reinterpret_cast<uintptr_t>(pc);
  for (int i = 0; i < g_num_ranges; ++i)
    if (a >= g_ranges[i].begin && a < g_ranges[i].end) return g_ranges[i].source;
  return AllocSource::kOther;
}

bool ActsForCaller(AllocSource s) { return s == AllocSource::kStdCpp || s == AllocSource::kLibc; }

// `caller`: the allocation function's return address. A library acting for its caller
// (libstdc++, libc) hands the call to the first frame above it outside those libraries.
void Count(bool is_new, const void* caller, size_t bytes) {
  if (!g_counting.load(std::memory_order_relaxed) || t_inside) return;
  t_inside = true;
  AllocSource s = Classify(caller);
  void* frames[AllocCounts::kStackDepth + 8];
  int depth = 0;
  if (ActsForCaller(s)) {
    depth = backtrace(frames, AllocCounts::kStackDepth + 8);
    int i = 0;
    while (i < depth && frames[i] != caller) ++i;
    for (++i; i < depth; ++i)
      if (!ActsForCaller(Classify(frames[i]))) {
        s = Classify(frames[i]);
        break;
      }
  }
  const int k = static_cast<int>(s);
  (is_new ? g_new : g_malloc)[k].fetch_add(1, std::memory_order_relaxed);
  g_bytes[k].fetch_add(static_cast<int64_t>(bytes), std::memory_order_relaxed);
  if (s == AllocSource::kFathom) {
    const int slot = g_kept.fetch_add(1);
    if (slot < AllocCounts::kKeptStacks) g_stack_depth[slot] = backtrace(g_stacks[slot], AllocCounts::kStackDepth);
  }
  t_inside = false;
}

}  // namespace
}  // namespace fathom::testing

// ---- The allocation functions. ----
using fathom::testing::Count;

#if defined(__SANITIZE_ADDRESS__)
// ASan owns malloc: operator new is counted and forwards to it.
namespace {
void* RawMalloc(size_t n) { return std::malloc(n); }
void* RawAligned(size_t align, size_t n) {
  void* p = nullptr;
  return posix_memalign(&p, align, n) == 0 ? p : nullptr;
}
void RawFree(void* p) { std::free(p); }
}  // namespace
#else
extern "C" {
void* __libc_malloc(size_t);
void* __libc_calloc(size_t, size_t);
void* __libc_realloc(void*, size_t);
void* __libc_memalign(size_t, size_t);
void __libc_free(void*);
}
namespace {
void* RawMalloc(size_t n) { return __libc_malloc(n); }
void* RawAligned(size_t align, size_t n) { return __libc_memalign(align, n); }
void RawFree(void* p) { __libc_free(p); }
}  // namespace

extern "C" {
void* malloc(size_t n) noexcept {
  Count(false, __builtin_return_address(0), n);
  return __libc_malloc(n);
}
void* calloc(size_t count, size_t size) noexcept {
  Count(false, __builtin_return_address(0), count * size);
  return __libc_calloc(count, size);
}
void* realloc(void* p, size_t n) noexcept {
  Count(false, __builtin_return_address(0), n);
  return __libc_realloc(p, n);
}
void free(void* p) noexcept { __libc_free(p); }
int posix_memalign(void** out, size_t align, size_t n) noexcept {
  Count(false, __builtin_return_address(0), n);
  if (align < sizeof(void*) || (align & (align - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(align, n);
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
void* aligned_alloc(size_t align, size_t n) noexcept {
  Count(false, __builtin_return_address(0), n);
  return __libc_memalign(align, n);
}
void* memalign(size_t align, size_t n) noexcept {
  Count(false, __builtin_return_address(0), n);
  return __libc_memalign(align, n);
}
}  // extern "C"
#endif

namespace {
void* New(size_t n, const void* caller, bool nothrow) {
  Count(true, caller, n);
  void* p = RawMalloc(n ? n : 1);
  if (p == nullptr && !nothrow) throw std::bad_alloc();
  return p;
}
void* NewAligned(size_t n, std::align_val_t a, const void* caller, bool nothrow) {
  Count(true, caller, n);
  const auto align = std::max(static_cast<size_t>(a), sizeof(void*));
  void* p = RawAligned(align, n ? n : 1);
  if (p == nullptr && !nothrow) throw std::bad_alloc();
  return p;
}
}  // namespace

void* operator new(size_t n) { return New(n, __builtin_return_address(0), false); }
void* operator new[](size_t n) { return New(n, __builtin_return_address(0), false); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return New(n, __builtin_return_address(0), true); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return New(n, __builtin_return_address(0), true); }
void* operator new(size_t n, std::align_val_t a) { return NewAligned(n, a, __builtin_return_address(0), false); }
void* operator new[](size_t n, std::align_val_t a) { return NewAligned(n, a, __builtin_return_address(0), false); }
void* operator new(size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return NewAligned(n, a, __builtin_return_address(0), true);
}
void* operator new[](size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  return NewAligned(n, a, __builtin_return_address(0), true);
}
void operator delete(void* p) noexcept { RawFree(p); }
void operator delete[](void* p) noexcept { RawFree(p); }
void operator delete(void* p, size_t) noexcept { RawFree(p); }
void operator delete[](void* p, size_t) noexcept { RawFree(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { RawFree(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { RawFree(p); }
void operator delete(void* p, std::align_val_t) noexcept { RawFree(p); }
void operator delete[](void* p, std::align_val_t) noexcept { RawFree(p); }
void operator delete(void* p, size_t, std::align_val_t) noexcept { RawFree(p); }
void operator delete[](void* p, size_t, std::align_val_t) noexcept { RawFree(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { RawFree(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { RawFree(p); }

namespace fathom::testing {

const char* AllocSourceName(AllocSource s) {
  switch (s) {
    case AllocSource::kFathom: return "fathom (the test executable: fathom's libraries, tests, gtest)";
    case AllocSource::kOneDnn: return "libdnnl (oneDNN)";
    case AllocSource::kOpenMp: return "libgomp (OpenMP)";
    case AllocSource::kStdCpp: return "libstdc++ (caller not found)";
    case AllocSource::kLibc: return "libc (caller not found)";
    case AllocSource::kOther: return "other";
    case AllocSource::kCount: break;
  }
  return "?";
}

bool CountsMalloc() {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#else
  return true;
#endif
}

void StartCounting() {
  if (g_num_ranges == 0) dl_iterate_phdr(AddRanges, nullptr);
  void* warm[2];
  backtrace(warm, 2);  // its first call loads libgcc_s (allocating): not inside the window
  for (int i = 0; i < AllocCounts::kSources; ++i) g_new[i] = 0, g_malloc[i] = 0, g_bytes[i] = 0;
  g_kept = 0;
  g_counting.store(true);
}

AllocCounts StopCounting() {
  g_counting.store(false);
  AllocCounts c;
  for (int i = 0; i < AllocCounts::kSources; ++i) {
    c.new_calls[i] = g_new[i].load();
    c.malloc_calls[i] = g_malloc[i].load();
    c.bytes[i] = g_bytes[i].load();
  }
  c.kept = std::min(g_kept.load(), AllocCounts::kKeptStacks);
  for (int k = 0; k < c.kept; ++k) {
    c.stack_depth[k] = g_stack_depth[k];
    std::copy_n(g_stacks[k], g_stack_depth[k], c.stacks[k]);
  }
  return c;
}

std::string AllocCounts::Describe() const {
  std::string out;
  for (int i = 0; i < kSources; ++i) {
    if (new_calls[i] == 0 && malloc_calls[i] == 0) continue;
    out += std::string("  ") + AllocSourceName(static_cast<AllocSource>(i)) + ": " + std::to_string(new_calls[i]) +
           " operator new, " + std::to_string(malloc_calls[i]) + " malloc-family, " + std::to_string(bytes[i]) +
           " bytes\n";
  }
  for (int k = 0; k < kept; ++k) {
    out += "  fathom allocation " + std::to_string(k) + ":\n";
    char** names = backtrace_symbols(stacks[k], stack_depth[k]);
    for (int f = 0; f < stack_depth[k]; ++f) {
      std::string line = names ? names[f] : "?";
      // "binary(mangled+0x1f) [addr]": demangle the middle where possible.
      const size_t open = line.find('('), plus = line.find('+', open == std::string::npos ? 0 : open);
      if (open != std::string::npos && plus != std::string::npos && plus > open + 1) {
        int status = 0;
        char* d = abi::__cxa_demangle(line.substr(open + 1, plus - open - 1).c_str(), nullptr, nullptr, &status);
        if (status == 0 && d) line = line.substr(0, open + 1) + d + line.substr(plus);
        std::free(d);
      }
      out += "    " + line + "\n";
    }
    std::free(names);
  }
  return out;
}

}  // namespace fathom::testing
