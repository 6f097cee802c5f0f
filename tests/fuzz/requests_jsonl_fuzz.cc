// `fathom generate --requests` files (one JSON request per line) through ParseRequests:
// errors name the line and field, never crash.
#include <cstdint>

#include "../../tools/fathom/cmd_requests.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto reqs = fathom::cli::ParseRequests(std::string(fathom::fuzz::AsView(data, size)));
  if (reqs.ok()) FUZZ_CHECK(!reqs->empty(), "accepted no requests");
  return 0;
}
