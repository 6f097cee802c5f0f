#include "generate_text.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace fathom::cli {

namespace {

// ANSI foreground colours from shallow to deep: green, cyan, yellow, magenta, red.
constexpr const char* kShades[] = {"\033[32m", "\033[36m", "\033[33m", "\033[35m", "\033[31m"};
constexpr const char* kReset = "\033[0m";

const char* Shade(int32_t depth, int32_t max_depth) {
  const int32_t n = static_cast<int32_t>(std::size(kShades));
  if (max_depth <= n) return kShades[std::clamp(depth, 1, n) - 1];
  // More steps than shades (Huginn's 32): depth / max_depth in n equal bands.
  const int32_t band = (std::clamp(depth, 1, max_depth) * n + max_depth - 1) / max_depth;
  return kShades[std::clamp(band, 1, n) - 1];
}

}  // namespace

Result<ColorMode> ParseColorMode(const std::string& value) {
  if (value == "auto") return ColorMode::kAuto;
  if (value == "always") return ColorMode::kAlways;
  if (value == "never") return ColorMode::kNever;
  return Status::Error("--color: expected auto, always or never, found '" + value + "'");
}

bool UseColor(ColorMode mode) {
  if (mode != ColorMode::kAuto) return mode == ColorMode::kAlways;
  const char* term = std::getenv("TERM");
  return isatty(STDOUT_FILENO) && std::getenv("NO_COLOR") == nullptr &&
         !(term != nullptr && std::strcmp(term, "dumb") == 0);
}

std::string RenderDepthText(const Tokenizer& tok, const std::vector<int32_t>& ids,
                            const std::vector<int32_t>& depths, int32_t max_depth, bool color) {
  StreamDecoder dec(tok, /*skip_special_tokens=*/true);
  const bool shaded = color && depths.size() == ids.size();
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string piece = dec.Push(ids[i]);
    if (piece.empty()) continue;  // part of a character: it comes with a later token
    if (shaded) out += Shade(depths[i], max_depth);
    out += piece;
    if (shaded) out += kReset;
  }
  out += dec.Finish();
  return out;
}

std::string DepthLegend(int32_t max_depth) {
  std::string out = "exit depth:";
  const int32_t shown = std::min<int32_t>(max_depth, static_cast<int32_t>(std::size(kShades)));
  for (int32_t s = 1; s <= shown; ++s) {
    // With more steps than shades each shade is a band of depths; show its upper end.
    const int32_t depth = max_depth <= shown ? s : (s * max_depth) / shown;
    out += std::string(" ") + Shade(depth, max_depth) + std::to_string(depth) + kReset;
  }
  return out;
}

}  // namespace fathom::cli
