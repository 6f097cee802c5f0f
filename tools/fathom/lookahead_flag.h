// --lookahead and --min-depth moved to engine_flags.h, with every other engine option;
// this header stays for the commands that still include it (bench_offline.cc).
#pragma once

#include "engine_flags.h"
