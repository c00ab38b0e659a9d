// Tokenizers, as Megatron-LM names them (`--tokenizer-type`): GPT2BPETokenizer (GPT-2's
// byte-level BPE from `--vocab-file` vocab.json and `--merge-file` merges.txt, with GPT-2's exact
// pre-tokenisation pattern through PCRE2's Unicode classes), SentencePieceTokenizer (a
// `--tokenizer-model` through libsentencepiece) and ByteTokenizer (each byte one token, 256: the
// tiny demo's). A Tokenizer is immutable after make_tokenizer(); encode/decode are const and
// thread-safe (each thread may keep its own cache inside; the parallel preprocessor calls one
// tokenizer from several workers). docs/data_format.md: files and ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

namespace tightpipe {

enum class TokenizerType { kGpt2Bpe, kSentencePiece, kByte };

// "GPT2BPETokenizer", "SentencePieceTokenizer", "ByteTokenizer" (Megatron's names).
std::string_view tokenizer_type_name(TokenizerType type);
// Errors (InvalidArgument) name the value and list the accepted names.
Result<TokenizerType> parse_tokenizer_type(std::string_view text);

struct TokenizerOptions {
  TokenizerType type = TokenizerType::kByte;
  std::string vocab_file;       // GPT2BPETokenizer: vocab.json
  std::string merge_file;       // GPT2BPETokenizer: merges.txt
  std::string tokenizer_model;  // SentencePieceTokenizer: the .model file
  // OK when the files the type needs are named (and only those); InvalidArgument naming the flag
  // (--vocab-file, --merge-file, --tokenizer-model) and a hint otherwise.
  Status validate() const;

  // The tokenizer a checkpoint was trained with (tokenizer.json beside its stages, so `tightpipe
  // sample` decodes with it): {"tokenizer_type", "vocab_file", "merge_file", "tokenizer_model"},
  // the files as absolute paths.
  std::string to_json() const;
  // Errors (Corruption) name `what` (the file) and the key or value that does not parse.
  static Result<TokenizerOptions> from_json(std::string_view json, std::string_view what);
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual TokenizerType type() const = 0;
  // Ids of `text` (UTF-8; GPT-2 BPE encodes any bytes). No end-of-document token is added.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The text of `ids`. Errors (InvalidArgument) name the first id outside [0, vocab_size()).
  virtual Result<std::string> decode(std::span<const int32_t> ids) const = 0;
  // The tokenizer's own vocabulary size (GPT-2: 50257), before any padding.
  virtual int32_t vocab_size() const = 0;
  // The end-of-document id (GPT-2: 50256 "<|endoftext|>"; SentencePiece: its eos id; byte: -1
  // none).
  virtual int32_t eod() const = 0;
  // The longest text encode() takes at once, in bytes (SentencePiece: its lattice costs many
  // times the text; GPT-2 BPE and bytes: no limit below 2 GiB, each word costs O(n log n) time and
  // a few times its size). Callers refuse longer texts with an error that names them.
  virtual size_t max_text_bytes() const { return kMaxEncodeBytes; }
  static constexpr size_t kMaxEncodeBytes = (size_t{1} << 31) - 1;
};

// Builds a tokenizer from its files. Errors name the file and what is wrong with it (missing,
// not JSON, a merge whose parts are not in the vocabulary: the vocab/merges pair disagrees...).
Result<std::unique_ptr<Tokenizer>> make_tokenizer(const TokenizerOptions& options);

// The documents of a plain text as Megatron-LM's tiny Shakespeare dataset has them: the pieces
// between occurrences of "\n\n", left to right, verbatim (Python's text.split("\n\n"); a piece
// may start with "\n", the last keeps the text's final newline; an empty text is one empty
// piece). docs/data_format.md.
std::vector<std::string_view> split_paragraphs(std::string_view text);

// Megatron's padded vocabulary (`--make-vocab-size-divisible-by`, default 128, times the tensor
// parallel size): the smallest multiple of `divisible_by` >= vocab_size. REQUIRES: both > 0.
int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by);
// The same for the flag --make-vocab-size-divisible-by as `train` and `plan` take it:
// InvalidArgument naming the flag when `divisible_by` is outside [1, 65536]. REQUIRES: vocab_size >
// 0.
Result<int64_t> padded_vocab_size_flag(int64_t vocab_size, int64_t divisible_by);

}  // namespace tightpipe
