#include "tokenizer/post_processor.h"

#include <string>

namespace fathom {

namespace {

// The ids of a TemplateProcessing special token, from its `special_tokens` map.
Status SpecialTokenIds(const JsonNode& special_tokens, const JsonNode& item_id,
                       std::vector<int32_t>* out) {
  FATHOM_ASSIGN_OR_RETURN(std::string name, item_id.String());
  const JsonNode entry = special_tokens.Get(name);
  if (!entry.present())
    return item_id.Error("\"" + name + "\" is not in " + special_tokens.path());
  const JsonNode ids = entry.Get("ids");
  FATHOM_RETURN_IF_ERROR(ids.ExpectArray());
  for (size_t i = 0; i < ids.size(); ++i) {
    FATHOM_ASSIGN_OR_RETURN(int64_t id, ids.At(i).Int());
    if (id < 0 || id > INT32_MAX) return ids.At(i).Error("should be a non-negative id");
    out->push_back(static_cast<int32_t>(id));
  }
  return Status::Ok();
}

// A Bert/Roberta "cls" / "sep" field: ["<s>", 0].
Status PairId(const JsonNode& node, std::vector<int32_t>* out) {
  if (!node.present() || !node.json().is_array() || node.json().size() != 2 ||
      !node.json()[1].is_number_integer())
    return node.Error("should be [token, id]");
  out->push_back(node.json()[1].get<int32_t>());
  return Status::Ok();
}

}  // namespace

Status PostProcessor::Add(const JsonNode& node, PostProcessor* p) {
  if (!node.present()) return Status::Ok();
  FATHOM_RETURN_IF_ERROR(node.ExpectObject());
  const JsonNode type_node = node.Get("type");
  FATHOM_ASSIGN_OR_RETURN(std::string type, type_node.String());
  if (type == "ByteLevel") return Status::Ok();
  if (type == "Sequence") {
    const JsonNode list = node.Get("processors");
    FATHOM_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.size(); ++i) FATHOM_RETURN_IF_ERROR(Add(list.At(i), p));
    return Status::Ok();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    std::vector<int32_t> pre, post;
    FATHOM_RETURN_IF_ERROR(PairId(node.Get("cls"), &pre));
    FATHOM_RETURN_IF_ERROR(PairId(node.Get("sep"), &post));
    p->prefix_.insert(p->prefix_.begin(), pre.begin(), pre.end());
    p->suffix_.insert(p->suffix_.end(), post.begin(), post.end());
    return Status::Ok();
  }
  if (type != "TemplateProcessing") return type_node.Unsupported();
  const JsonNode single = node.Get("single");
  FATHOM_RETURN_IF_ERROR(single.ExpectArray());
  const JsonNode special_tokens = node.Get("special_tokens");
  std::vector<int32_t> pre, post;
  bool seen_a = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const JsonNode item = single.At(i);
    if (item.Get("SpecialToken").present()) {
      FATHOM_RETURN_IF_ERROR(
          SpecialTokenIds(special_tokens, item.Get("SpecialToken").Get("id"), seen_a ? &post : &pre));
    } else if (item.Get("Sequence").present()) {
      FATHOM_ASSIGN_OR_RETURN(std::string id, item.Get("Sequence").Get("id").String());
      if (id != "A" || seen_a) return item.Get("Sequence").Get("id").Unsupported();
      seen_a = true;
    } else {
      return item.Error("should be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
    }
  }
  if (!seen_a) return single.Error("has no {\"Sequence\": {\"id\": \"A\"}}");
  p->prefix_.insert(p->prefix_.begin(), pre.begin(), pre.end());
  p->suffix_.insert(p->suffix_.end(), post.begin(), post.end());
  return Status::Ok();
}

Result<PostProcessor> PostProcessor::FromJson(const JsonNode& node) {
  PostProcessor p;
  FATHOM_RETURN_IF_ERROR(Add(node, &p));
  return p;
}

std::vector<int32_t> PostProcessor::Apply(std::vector<int32_t> ids) const {
  if (prefix_.empty() && suffix_.empty()) return ids;
  std::vector<int32_t> out;
  out.reserve(prefix_.size() + ids.size() + suffix_.size());
  out.insert(out.end(), prefix_.begin(), prefix_.end());
  out.insert(out.end(), ids.begin(), ids.end());
  out.insert(out.end(), suffix_.begin(), suffix_.end());
  return out;
}

}  // namespace fathom
