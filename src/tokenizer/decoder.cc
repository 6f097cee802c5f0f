#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"

namespace fathom {

namespace {

Status Check(const JsonNode& node, int* byte_level_count) {
  if (!node.present()) return node.Error("null is not supported (fathom decodes byte-level BPE only)");
  FATHOM_RETURN_IF_ERROR(node.ExpectObject());
  const JsonNode type_node = node.Get("type");
  FATHOM_ASSIGN_OR_RETURN(std::string type, type_node.String());
  if (type == "ByteLevel") {
    ++*byte_level_count;
    return Status::Ok();
  }
  if (type == "Sequence") {
    const JsonNode list = node.Get("decoders");
    FATHOM_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.size(); ++i) FATHOM_RETURN_IF_ERROR(Check(list.At(i), byte_level_count));
    return Status::Ok();
  }
  return type_node.Unsupported();
}

}  // namespace

Result<Decoder> Decoder::FromJson(const JsonNode& node) {
  int byte_level_count = 0;
  FATHOM_RETURN_IF_ERROR(Check(node, &byte_level_count));
  if (byte_level_count != 1) return node.Error("should hold exactly one ByteLevel decoder");
  return Decoder();
}

std::string Decoder::TokenBytes(std::string_view token) const {
  std::string bytes;
  if (!byte_level::Decode(token, &bytes)) bytes.assign(token);
  return bytes;
}

}  // namespace fathom
