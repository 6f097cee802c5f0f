#include "tokenizer/tokenizer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_node.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/utf8.h"

namespace fathom {

namespace {

// Tokens that end a turn in the chat formats fathom renders, besides eos.
constexpr const char* kEndOfTurnTokens[] = {"<|im_end|>", "<|endoftext|>", "<|eot_id|>",
                                            "<|end_of_text|>", "<|end_turn|>"};

// nullopt when the file does not exist; an error when it exists but cannot be read.
Result<std::optional<std::string>> ReadFileIfExists(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  }
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::Error("cannot read " + path);
  return std::optional<std::string>(std::move(text));
}

}  // namespace

class TokenizerImpl {
 public:
  std::string origin;
  std::unique_ptr<BpeModel> bpe;
  AddedVocabulary added;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  PostProcessor post_processor;
  Decoder decoder;
  bool has_normalized_added = false;

  int32_t vocab_size = 0;
  std::vector<std::string> token_bytes;  // per id: what it decodes to
  // Per id, as the first token of a decoded sequence; empty when the decoder has no
  // first-token rule (Metaspace).
  std::vector<std::string> first_token_bytes;
  std::vector<const AddedToken*> added_by_id;
  std::optional<int32_t> bos, eos;
  std::vector<int32_t> stop_ids;
  std::optional<ChatTemplate> chat;

  // What `id` decodes to, as the first token of a sequence or after another one.
  const std::string& Bytes(int32_t id, bool first) const {
    const size_t i = static_cast<size_t>(id);
    return first && !first_token_bytes.empty() ? first_token_bytes[i] : token_bytes[i];
  }

  std::optional<int32_t> TokenToId(std::string_view token) const {
    if (const AddedToken* t = added.Find(token)) return t->id;
    return bpe->TokenToId(token);
  }

  // Normalized text between added tokens -> ids; `at_start`: it begins the encoded text.
  void EncodePlain(std::string_view text, bool at_start, std::vector<int32_t>* ids) const {
    for (const std::string& piece : pre_tokenizer.Apply(text, at_start)) bpe->Encode(piece, ids);
  }
};

Tokenizer::Tokenizer() : impl_(std::make_unique<TokenizerImpl>()) {}
Tokenizer::~Tokenizer() = default;

Result<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& dir) {
  const std::filesystem::path d(dir);
  const std::string tok_path = (d / "tokenizer.json").string();
  const std::string cfg_path = (d / "tokenizer_config.json").string();
  FATHOM_ASSIGN_OR_RETURN(std::optional<std::string> tok_json, ReadFileIfExists(tok_path));
  if (!tok_json) return Status::Error("cannot open " + tok_path + ": no such file");
  FATHOM_ASSIGN_OR_RETURN(std::optional<std::string> cfg_json, ReadFileIfExists(cfg_path));
  FATHOM_ASSIGN_OR_RETURN(auto tok, FromJson(*tok_json, cfg_json.value_or(""), tok_path));
  if (!tok->impl_->chat) {
    // Newer checkpoints keep the template in its own file.
    const std::string jinja_path = (d / "chat_template.jinja").string();
    FATHOM_ASSIGN_OR_RETURN(std::optional<std::string> jinja, ReadFileIfExists(jinja_path));
    FATHOM_ASSIGN_OR_RETURN(TokenizerConfig cfg, ParseTokenizerConfig(cfg_json.value_or(""), cfg_path));
    if (jinja && !jinja->empty())
      tok->impl_->chat = ChatTemplate::Detect(*jinja, cfg.bos_token.value_or(""), cfg.eos_token.value_or(""));
  }
  return tok;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::FromJson(std::string_view tokenizer_json,
                                                       std::string_view config_json,
                                                       const std::string& origin) {
  std::unique_ptr<Tokenizer> tok(new Tokenizer());
  TokenizerImpl& m = *tok->impl_;
  m.origin = origin;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(tokenizer_json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e309
    return Status::Error(origin + ": malformed JSON: " + e.what());
  }
  if (!root.is_object()) return Status::Error(origin + ": expected a JSON object at the top level");
  const JsonNode top(&root, &m.origin, "");

  const JsonNode model = top.Get("model");
  if (!model.present()) return Status::Error(origin + ": missing field model");
  FATHOM_ASSIGN_OR_RETURN(std::string model_type, model.Get("type").StringOr("BPE"));
  if (model_type != "BPE") return model.Get("type").Unsupported();
  const JsonNode added_tokens = top.Get("added_tokens");
  FATHOM_ASSIGN_OR_RETURN(m.bpe, BpeModel::FromJson(model, added_tokens.size()));
  FATHOM_ASSIGN_OR_RETURN(m.added, AddedVocabulary::FromJson(added_tokens, model.Get("vocab").json().size()));
  FATHOM_ASSIGN_OR_RETURN(m.normalizer, Normalizer::FromJson(top.Get("normalizer")));
  FATHOM_ASSIGN_OR_RETURN(m.pre_tokenizer, PreTokenizer::FromJson(top.Get("pre_tokenizer")));
  FATHOM_ASSIGN_OR_RETURN(m.post_processor, PostProcessor::FromJson(top.Get("post_processor")));
  FATHOM_ASSIGN_OR_RETURN(m.decoder, Decoder::FromJson(top.Get("decoder")));
  // `truncation` and `padding` are ignored: transformers resets both on every call, and
  // fathom never truncates or pads a prompt.

  m.vocab_size = m.bpe->vocab_size();
  for (const AddedToken& t : m.added.tokens()) {
    m.vocab_size = std::max(m.vocab_size, t.id + 1);
    m.has_normalized_added = m.has_normalized_added || t.normalized;
  }
  m.token_bytes.resize(static_cast<size_t>(m.vocab_size));
  m.added_by_id.assign(static_cast<size_t>(m.vocab_size), nullptr);
  for (int32_t id = 0; id < m.bpe->vocab_size(); ++id)
    if (const std::string* s = m.bpe->IdToToken(id)) m.token_bytes[static_cast<size_t>(id)] = m.decoder.TokenBytes(*s);
  for (const AddedToken& t : m.added.tokens()) {
    m.added_by_id[static_cast<size_t>(t.id)] = &t;
    m.token_bytes[static_cast<size_t>(t.id)] = m.decoder.TokenBytes(t.content);
  }
  if (m.decoder.first_token_differs()) {
    m.first_token_bytes.resize(static_cast<size_t>(m.vocab_size));
    for (int32_t id = 0; id < m.vocab_size; ++id) {
      const AddedToken* t = m.added_by_id[static_cast<size_t>(id)];
      const std::string* s = t ? &t->content : m.bpe->IdToToken(id);
      if (s) m.first_token_bytes[static_cast<size_t>(id)] = m.decoder.FirstTokenBytes(*s);
    }
  }
  for (const int32_t id : m.post_processor.prefix())
    if (id >= m.vocab_size) return Status::Error(origin + ": post_processor adds id " + std::to_string(id) + ", past the vocabulary");

  const std::string cfg_origin =
      (std::filesystem::path(origin).parent_path() / "tokenizer_config.json").string();
  FATHOM_ASSIGN_OR_RETURN(TokenizerConfig cfg, ParseTokenizerConfig(config_json, cfg_origin));
  auto resolve = [&](const std::optional<std::string>& token, const char* field,
                     std::optional<int32_t>* out) -> Status {
    if (!token) return Status::Ok();
    *out = m.TokenToId(*token);
    if (!*out) return Status::Error(cfg_origin + ": " + field + " \"" + *token + "\" is not in the vocabulary");
    return Status::Ok();
  };
  FATHOM_RETURN_IF_ERROR(resolve(cfg.bos_token, "bos_token", &m.bos));
  FATHOM_RETURN_IF_ERROR(resolve(cfg.eos_token, "eos_token", &m.eos));
  // add_bos_token / add_eos_token: honoured when true (transformers' Llama tokenizers
  // rebuild their post-processor from them); the post-processor of tokenizer.json stays
  // authoritative otherwise.
  if (cfg.add_bos_token.value_or(false)) {
    if (!m.bos) return Status::Error(cfg_origin + ": add_bos_token is true but bos_token is not set");
    const auto& pre = m.post_processor.prefix();
    if (pre.empty() || pre.front() != *m.bos) {
      std::vector<int32_t> p{*m.bos};
      p.insert(p.end(), pre.begin(), pre.end());
      m.post_processor.set_prefix(std::move(p));
    }
  }
  if (cfg.add_eos_token.value_or(false))
    return Status::Error(cfg_origin + ": add_eos_token true is not supported");
  // transformers' LlamaTokenizerFast (4.38 on) ignores tokenizer.json when add_prefix_space is set
  // and converts tokenizer.model (SentencePiece) instead, so tokenizer.json's ids would not
  // be the model's.
  if (cfg.add_prefix_space && cfg.tokenizer_class.rfind("LlamaTokenizer", 0) == 0) {
    return Status::Error(cfg_origin + ": add_prefix_space is set for " + cfg.tokenizer_class +
                         ", which makes transformers rebuild the tokenizer from tokenizer.model; fathom "
                         "reads tokenizer.json only (remove the field if tokenizer.json already has the "
                         "wanted prefix space)");
  }

  if (m.eos) m.stop_ids.push_back(*m.eos);
  for (const char* name : kEndOfTurnTokens) {
    const auto id = m.TokenToId(name);
    if (id && std::find(m.stop_ids.begin(), m.stop_ids.end(), *id) == m.stop_ids.end())
      m.stop_ids.push_back(*id);
  }
  if (!cfg.chat_template.empty())
    m.chat = ChatTemplate::Detect(cfg.chat_template, cfg.bos_token.value_or(""), cfg.eos_token.value_or(""));
  return tok;
}

Result<std::vector<int32_t>> Tokenizer::Encode(std::string_view text, bool add_special_tokens) const {
  const TokenizerImpl& m = *impl_;
  FATHOM_RETURN_IF_ERROR(utf8::Validate(text, "text to encode"));
  std::vector<int32_t> ids;
  for (const AddedVocabulary::Segment& seg : m.added.Split(text, /*normalized=*/false)) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    const bool at_start = seg.text.data() == text.data();
    const std::string normalized = m.normalizer.empty() ? std::string(seg.text) : m.normalizer.Apply(seg.text);
    if (!m.has_normalized_added) {
      m.EncodePlain(normalized, at_start, &ids);
      continue;
    }
    for (const AddedVocabulary::Segment& sub : m.added.Split(normalized, /*normalized=*/true)) {
      if (sub.id >= 0)
        ids.push_back(sub.id);
      else
        m.EncodePlain(sub.text, at_start && sub.text.data() == normalized.data(), &ids);
    }
  }
  if (add_special_tokens) ids = m.post_processor.Apply(std::move(ids));
  return ids;
}

Result<std::string> Tokenizer::Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const TokenizerImpl& m = *impl_;
  std::string bytes;
  bool first = true;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= m.vocab_size) {
      return Status::Error("cannot decode id " + std::to_string(id) + " (position " + std::to_string(i) +
                           "): outside the vocabulary [0, " + std::to_string(m.vocab_size) + ")");
    }
    if (skip_special_tokens && IsSpecial(id)) continue;
    bytes += m.Bytes(id, first);
    first = false;
  }
  // Strip after Fuse: the decoded text's leading copies of the content.
  const std::string& c = m.decoder.strip_content();
  size_t cut = 0;
  for (size_t k = 0; k < m.decoder.strip_count() && bytes.compare(cut, c.size(), c) == 0; ++k) cut += c.size();
  return utf8::Lossy(std::string_view(bytes).substr(cut));
}

int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::TokenToId(std::string_view token) const { return impl_->TokenToId(token); }

std::optional<std::string> Tokenizer::IdToToken(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return std::nullopt;
  if (const AddedToken* t = impl_->added_by_id[static_cast<size_t>(id)]) return t->content;
  if (const std::string* s = impl_->bpe->IdToToken(id)) return *s;
  return std::nullopt;
}

bool Tokenizer::IsSpecial(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return false;
  const AddedToken* t = impl_->added_by_id[static_cast<size_t>(id)];
  return t != nullptr && t->special;
}

std::string Tokenizer::TokenBytes(int32_t id) const {
  if (id < 0 || id >= impl_->vocab_size) return "";
  return impl_->token_bytes[static_cast<size_t>(id)];
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos; }
const std::vector<int32_t>& Tokenizer::stop_ids() const { return impl_->stop_ids; }
const ChatTemplate* Tokenizer::chat_template() const { return impl_->chat ? &*impl_->chat : nullptr; }

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::Push(int32_t id) {
  // Ids outside the vocabulary contribute nothing here (Decode reports them as errors).
  if (id < 0 || id >= tok_.vocab_size() || (skip_special_ && tok_.IsSpecial(id))) return "";
  const TokenizerImpl& m = *tok_.impl_;
  pending_ += m.Bytes(id, !started_);
  started_ = true;
  // Decode's leading Strip: hold the text back while it may still be a stripped prefix.
  const std::string& c = m.decoder.strip_content();
  while (stripped_ < m.decoder.strip_count()) {
    if (pending_.compare(0, c.size(), c) == 0) {
      pending_.erase(0, c.size());
      ++stripped_;
    } else if (c.compare(0, pending_.size(), pending_) == 0) {
      return "";  // empty, or a prefix of a multi-byte content character: wait
    } else {
      stripped_ = m.decoder.strip_count();  // something else starts the text
    }
  }
  const size_t n = utf8::CompletePrefix(pending_);
  std::string out = utf8::Lossy(std::string_view(pending_).substr(0, n));
  pending_.erase(0, n);
  return out;
}

std::string StreamDecoder::Finish() {
  std::string out = utf8::Lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace fathom
