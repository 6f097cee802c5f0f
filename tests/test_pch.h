// The test binaries' precompiled header (CMakeLists.txt, fathom_tests): the heavy headers
// nearly every test includes. Only headers whose meaning does not depend on a target's own
// definitions belong here, since one compiled copy is shared by every test binary
// (cpp-httplib, for one, is configured by its package's CPPHTTPLIB_* definitions).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
