#pragma once
// How `fathom generate --prompt TEXT` shows what a looped model wrote: the text, each
// token's piece coloured by the loop steps it ran (its exit depth) in a terminal, and the
// text with a depth list when the output is a pipe or a file.

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {

enum class ColorMode { kAuto, kAlways, kNever };

// "auto", "always" or "never" (the --color flag), else an error naming the flag.
Result<ColorMode> ParseColorMode(const std::string& value);

// kAuto: colour when stdout is a terminal, NO_COLOR is unset and TERM is not "dumb".
bool UseColor(ColorMode mode);

// The pieces of `ids` as the tokenizer's stream decoder emits them (their concatenation is
// Decode(ids)), each wrapped in the ANSI colour of its depth when `color`: five shades from
// shallow (green) to deep (red), by depth / max_depth. depths[i] belongs to ids[i]; a
// dense model passes no depths and gets plain text.
std::string RenderDepthText(const Tokenizer& tok, const std::vector<int32_t>& ids,
                            const std::vector<int32_t>& depths, int32_t max_depth, bool color);

// "exit depth: 1 2 3 4" with each number in its colour (a legend for RenderDepthText).
std::string DepthLegend(int32_t max_depth);

}  // namespace fathom::cli
