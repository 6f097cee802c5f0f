#include "sched/plan.h"

namespace fathom {

std::string_view StageName(Stage s) {
  switch (s) {
    case Stage::kIdle: return "idle";
    case Stage::kPrefill: return "prefill";
    case Stage::kPrelude: return "prelude";
    case Stage::kCore: return "core";
    case Stage::kCoda: return "coda";
  }
  return "?";
}

std::string_view FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kCancelled: return "cancelled";
  }
  return "?";
}

void Plan::Clear() {
  stage = Stage::kIdle;
  preempt.clear();
  grow.clear();
  chunks.clear();
  items.clear();
}

std::string Plan::ToString() const {
  std::string s(StageName(stage));
  for (RequestId r : preempt) s.append(" preempt(r").append(std::to_string(r)).append(")");
  for (const KvGrowth& g : grow)
    s.append(" grow(r").append(std::to_string(g.req)).append("->").append(std::to_string(g.new_len)).append(")");
  for (const PrefillWork& c : chunks) {
    s.append(" [r").append(std::to_string(c.req)).append(" pos ").append(std::to_string(c.pos0));
    s.append("+").append(std::to_string(c.n));
    if (c.last) s.append(c.sample ? " last" : " last-nosample");
    s.append("]");
  }
  for (const WorkItem& it : items) {
    s.append(" [r").append(std::to_string(it.req)).append(" slot ").append(std::to_string(it.slot));
    s.append(" pos ").append(std::to_string(it.pos));
    if (stage == Stage::kPrelude) s.append(" tok ").append(std::to_string(it.token));
    if (stage != Stage::kPrelude) s.append(" step ").append(std::to_string(it.step));
    if (it.replay) s.append(" replay");
    s.append("]");
  }
  return s;
}

}  // namespace fathom
