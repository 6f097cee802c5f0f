#include "tokenizer/bpe.h"

#include <cstdio>
#include <queue>

#include "tokenizer/added_tokens.h"
#include "tokenizer/utf8.h"

namespace fathom {

Result<std::unique_ptr<BpeModel>> BpeModel::FromJson(const JsonNode& model, size_t added_count) {
  FATHOM_RETURN_IF_ERROR(model.ExpectObject());
  const JsonNode type_node = model.Get("type");
  if (type_node.present()) {
    FATHOM_ASSIGN_OR_RETURN(std::string type, type_node.String());
    if (type != "BPE") return type_node.Unsupported();
  }
  auto bpe = std::make_unique<BpeModel>();
  // Options fathom does not implement are errors rather than silently different ids.
  if (model.Get("dropout").present() && !(model.Get("dropout").json().is_number() &&
                                          model.Get("dropout").json().get<double>() == 0.0))
    return model.Get("dropout").Unsupported();
  FATHOM_ASSIGN_OR_RETURN(bool byte_fallback, model.Get("byte_fallback").BoolOr(false));
  FATHOM_ASSIGN_OR_RETURN(bpe->fuse_unk_, model.Get("fuse_unk").BoolOr(false));
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    FATHOM_ASSIGN_OR_RETURN(std::string v, model.Get(field).StringOr(""));
    if (!v.empty()) return model.Get(field).Unsupported();
  }
  FATHOM_ASSIGN_OR_RETURN(bpe->ignore_merges_, model.Get("ignore_merges").BoolOr(false));

  const JsonNode vocab = model.Get("vocab");
  FATHOM_RETURN_IF_ERROR(vocab.ExpectObject());
  bpe->vocab_.reserve(vocab.json().size());
  int64_t max_id = -1;
  for (const auto& [token, id_json] : vocab.json().items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX - 1) {
      return vocab.Error("[" + nlohmann::json(token).dump() + "] should be a non-negative id, found " +
                         DescribeJson(id_json));
    }
    const int64_t id = id_json.get<int64_t>();
    const int64_t id_limit = static_cast<int64_t>(vocab.json().size() + added_count) + kMaxUnusedIds;
    if (id >= id_limit) {
      return vocab.Error("[" + nlohmann::json(token).dump() + "] has id " + std::to_string(id) +
                         ", more than " + std::to_string(kMaxUnusedIds) + " past the tokenizer's " +
                         std::to_string(id_limit - kMaxUnusedIds) + " entries (model.vocab and added_tokens)");
    }
    bpe->vocab_.emplace(token, static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  bpe->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  bpe->id_used_.assign(static_cast<size_t>(max_id + 1), false);
  for (const auto& [token, id] : bpe->vocab_) {
    bpe->id_to_token_[static_cast<size_t>(id)] = token;
    bpe->id_used_[static_cast<size_t>(id)] = true;
  }

  const JsonNode merges = model.Get("merges");
  if (merges.present()) FATHOM_RETURN_IF_ERROR(merges.ExpectArray());
  bpe->merges_.reserve(merges.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const nlohmann::json& m = merges.json()[rank];
    std::string_view a, b;
    if (m.is_string()) {
      // The older format: "a b" (tokens of byte-level vocabularies never hold a space).
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return merges.At(rank).Error("should be two tokens separated by one space, found " +
                                     DescribeJson(m));
      a = std::string_view(s).substr(0, space);
      b = std::string_view(s).substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      return merges.At(rank).Error("should be \"a b\" or [\"a\", \"b\"], found " + DescribeJson(m));
    }
    const auto ia = bpe->vocab_.find(a), ib = bpe->vocab_.find(b);
    std::string merged;
    merged.reserve(a.size() + b.size());
    merged.append(a).append(b);
    const auto im = bpe->vocab_.find(merged);
    if (ia == bpe->vocab_.end() || ib == bpe->vocab_.end() || im == bpe->vocab_.end()) {
      const std::string_view missing =
          ia == bpe->vocab_.end() ? a : ib == bpe->vocab_.end() ? b : std::string_view(merged);
      return merges.At(rank).Error("uses token " + nlohmann::json(std::string(missing)).dump() +
                                   ", which is not in model.vocab");
    }
    // A repeated pair keeps its first (lowest) rank.
    bpe->merges_.emplace(PairKey(ia->second, ib->second),
                         MergeRule{static_cast<int32_t>(rank), im->second});
  }

  if (byte_fallback) {
    // The spelling of `tokenizers`' format!("<{:#04X}>", byte): "<0x0A>".
    bpe->byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      if (const auto id = bpe->TokenToId(name)) bpe->byte_ids_[static_cast<size_t>(b)] = *id;
    }
  }

  const JsonNode unk = model.Get("unk_token");
  if (unk.present()) {
    FATHOM_ASSIGN_OR_RETURN(std::string unk_token, unk.String());
    bpe->unk_id_ = bpe->TokenToId(unk_token);
    if (!bpe->unk_id_) return unk.Error("\"" + unk_token + "\" is not in model.vocab");
  }
  return bpe;
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::IdToToken(int32_t id) const {
  if (id < 0 || id >= vocab_size() || !id_used_[static_cast<size_t>(id)]) return nullptr;
  return &id_to_token_[static_cast<size_t>(id)];
}

void BpeModel::Encode(std::string_view piece, std::vector<int32_t>* ids) const {
  if (ignore_merges_) {
    if (auto id = TokenToId(piece)) {
      ids->push_back(*id);
      return;
    }
  }
  const bool cacheable = piece.size() <= kCacheMaxPieceBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(piece);
    if (it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> out;
  MergeWord(piece, &out);
  ids->insert(ids->end(), out.begin(), out.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheMaxEntries) cache_.clear();
    cache_.emplace(std::string(piece), std::move(out));
  }
}

void BpeModel::MergeWord(std::string_view piece, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> syms;
  syms.reserve(piece.size());
  auto add = [&](int32_t id) {
    const int n = static_cast<int>(syms.size());
    syms.push_back({id, n - 1, n + 1, true});
  };
  bool last_was_unk = false;  // for fuse_unk
  size_t i = 0;
  while (i < piece.size()) {
    const size_t start = i;
    utf8::Next(piece, &i);
    const std::string_view ch = piece.substr(start, i - start);
    if (const std::optional<int32_t> id = TokenToId(ch)) {
      add(*id);
      last_was_unk = false;
      continue;
    }
    if (!byte_ids_.empty()) {
      bool all = true;
      for (const char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (const char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
        last_was_unk = false;
        continue;
      }
    }
    if (!unk_id_) continue;  // no unk token: the character is dropped, as `tokenizers` does
    if (!(fuse_unk_ && last_was_unk)) add(*unk_id_);
    last_was_unk = true;
  }
  if (syms.empty()) return;
  syms.back().next = -1;

  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    int32_t right_id;  // the right symbol's id when queued (stale entries are skipped)
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int left) {
    if (left < 0) return;
    const int right = syms[static_cast<size_t>(left)].next;
    if (right < 0) return;
    const int32_t a = syms[static_cast<size_t>(left)].id, b = syms[static_cast<size_t>(right)].id;
    auto it = merges_.find(PairKey(a, b));
    if (it != merges_.end()) queue.push({it->second.rank, left, it->second.new_id, b});
  };
  for (int k = 0; k + 1 < static_cast<int>(syms.size()); ++k) push_pair(k);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = syms[static_cast<size_t>(c.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[static_cast<size_t>(left.next)];
    // Stale: one side changed since the pair was queued.
    auto it = merges_.find(PairKey(left.id, right.id));
    if (right.id != c.right_id || it == merges_.end() || it->second.rank != c.rank) continue;
    left.id = c.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[static_cast<size_t>(right.next)].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (int k = 0; k >= 0; k = syms[static_cast<size_t>(k)].next) ids->push_back(syms[static_cast<size_t>(k)].id);
}

}  // namespace fathom
