// CPU time of the calling thread, for telling a step's wall time spent running from the
// time it waited for a core (engine/thread_governor.h).
#pragma once

#include <ctime>

namespace fathom {

// Seconds the calling thread has run on a CPU (CLOCK_THREAD_CPUTIME_ID; a system call, about
// a microsecond: call it per step, not per item). -1 where the clock is not available.
inline double ThreadCpuSeconds() {
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return -1;
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace fathom
