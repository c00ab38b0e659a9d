// Tokenizers (tokenizer.h): the names, the options, the byte tokenizer, the factory.
#include "tightpipe/tokenizer.h"

#include <fmt/format.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tokenizers.h"

namespace tightpipe {

namespace {

class ByteTokenizer final : public Tokenizer {
 public:
  TokenizerType type() const override { return TokenizerType::kByte; }
  std::vector<int32_t> encode(std::string_view text) const override { return byte_tokenize(text); }
  Result<std::string> decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size());
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0 || ids[k] >= kByteVocabSize) {
        return id_outside_vocabulary(ids[k], k, kByteVocabSize, "the byte tokenizer's");
      }
      out.push_back(static_cast<char>(ids[k]));
    }
    return out;
  }
  int32_t vocab_size() const override { return kByteVocabSize; }
  int32_t eod() const override { return -1; }
};

}  // namespace

Status id_outside_vocabulary(int32_t id, size_t position, int32_t vocab_size,
                             std::string_view vocabulary) {
  return Status::invalid_argument(
      fmt::format("token id {} at position {}: outside {} vocabulary [0, {}); hint: decode with "
                  "the tokenizer the ids were made with",
                  id, position, vocabulary, vocab_size));
}

std::string_view tokenizer_type_name(TokenizerType type) {
  switch (type) {
    case TokenizerType::kGpt2Bpe:
      return "GPT2BPETokenizer";
    case TokenizerType::kSentencePiece:
      return "SentencePieceTokenizer";
    case TokenizerType::kByte:
      return "ByteTokenizer";
  }
  return "?";
}

Result<TokenizerType> parse_tokenizer_type(std::string_view text) {
  for (TokenizerType t :
       {TokenizerType::kGpt2Bpe, TokenizerType::kSentencePiece, TokenizerType::kByte}) {
    if (text == tokenizer_type_name(t)) return t;
  }
  return Status::invalid_argument(fmt::format(
      "--tokenizer-type {}: unknown; hint: one of GPT2BPETokenizer, SentencePieceTokenizer, "
      "ByteTokenizer",
      printable(text)));
}

Status TokenizerOptions::validate() const {
  auto need = [&](const std::string& value, std::string_view flag) -> Status {
    if (!value.empty()) return Status::Ok();
    return Status::invalid_argument(fmt::format("--tokenizer-type {} needs {}; hint: {} FILE",
                                                tokenizer_type_name(type), flag, flag));
  };
  auto refuse = [&](const std::string& value, std::string_view flag) -> Status {
    if (value.empty()) return Status::Ok();
    return Status::invalid_argument(
        fmt::format("{} {}: --tokenizer-type {} does not read it; "
                    "hint: drop it, or choose the tokenizer it is for",
                    flag, printable(value, 200), tokenizer_type_name(type)));
  };
  switch (type) {
    case TokenizerType::kGpt2Bpe:
      TP_RETURN_IF_ERROR(need(vocab_file, "--vocab-file"));
      TP_RETURN_IF_ERROR(need(merge_file, "--merge-file"));
      return refuse(tokenizer_model, "--tokenizer-model");
    case TokenizerType::kSentencePiece:
      TP_RETURN_IF_ERROR(need(tokenizer_model, "--tokenizer-model"));
      TP_RETURN_IF_ERROR(refuse(vocab_file, "--vocab-file"));
      return refuse(merge_file, "--merge-file");
    case TokenizerType::kByte:
      TP_RETURN_IF_ERROR(refuse(vocab_file, "--vocab-file"));
      TP_RETURN_IF_ERROR(refuse(merge_file, "--merge-file"));
      return refuse(tokenizer_model, "--tokenizer-model");
  }
  return Status::Ok();
}

std::string TokenizerOptions::to_json() const {
  auto absolute = [](const std::string& path) {
    std::error_code ec;
    return path.empty() ? path : std::filesystem::absolute(path, ec).lexically_normal().string();
  };
  nlohmann::json j = {{"tokenizer_type", std::string(tokenizer_type_name(type))},
                      {"vocab_file", absolute(vocab_file)},
                      {"merge_file", absolute(merge_file)},
                      {"tokenizer_model", absolute(tokenizer_model)}};
  return j.dump() + "\n";
}

Result<TokenizerOptions> TokenizerOptions::from_json(std::string_view json, std::string_view what) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  auto bad = [&](std::string_view why) {
    return Status::corruption(
        fmt::format("{}: {}; hint: the file is damaged: pass the tokenizer "
                    "flags (--tokenizer-type, --vocab-file, ...) instead",
                    printable(what, 200), why));
  };
  if (!j.is_object()) return bad("not a JSON object");
  TokenizerOptions o;
  auto text = [&](const char* key, std::string& out) -> Status {
    if (!j.contains(key)) return OkStatus();
    if (!j[key].is_string()) return bad(fmt::format("'{}' is not a string", key));
    out = j[key].get<std::string>();
    return OkStatus();
  };
  std::string type = "ByteTokenizer";
  TP_RETURN_IF_ERROR(text("tokenizer_type", type));
  auto parsed = parse_tokenizer_type(type);
  if (!parsed.ok()) return bad(fmt::format("unknown tokenizer_type '{}'", printable(type)));
  o.type = *parsed;
  TP_RETURN_IF_ERROR(text("vocab_file", o.vocab_file));
  TP_RETURN_IF_ERROR(text("merge_file", o.merge_file));
  TP_RETURN_IF_ERROR(text("tokenizer_model", o.tokenizer_model));
  Status valid = o.validate();
  if (!valid.ok()) return bad(valid.message());
  return o;
}

Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerOptions& options) {
  TP_RETURN_IF_ERROR(options.validate());
  switch (options.type) {
    case TokenizerType::kByte:
      return std::unique_ptr<Tokenizer>(new ByteTokenizer());
    case TokenizerType::kGpt2Bpe:
      return make_gpt2_bpe_tokenizer(options.vocab_file, options.merge_file);
    case TokenizerType::kSentencePiece:
      return make_sentencepiece_tokenizer(options.tokenizer_model);
  }
  return Status::internal("make_tokenizer: unknown tokenizer type");
}

std::vector<std::string_view> split_paragraphs(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t at; (at = text.find("\n\n", start)) != std::string_view::npos; start = at + 2) {
    out.push_back(text.substr(start, at - start));
  }
  out.push_back(text.substr(start));
  return out;
}

int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by) {
  return (vocab_size + divisible_by - 1) / divisible_by * divisible_by;
}

Result<int64_t> padded_vocab_size_flag(int64_t vocab_size, int64_t divisible_by) {
  constexpr int64_t kMaxDivisibleBy = 1 << 16;
  if (divisible_by < 1 || divisible_by > kMaxDivisibleBy) {
    return Status::invalid_argument(fmt::format(
        "--make-vocab-size-divisible-by {}: must be in [1, {}]; hint: Megatron-LM's default is 128",
        divisible_by, kMaxDivisibleBy));
  }
  return padded_vocab_size(vocab_size, divisible_by);
}

}  // namespace tightpipe
