// SentencePiece models (Megatron-LM's SentencePieceTokenizer) through libsentencepiece: the
// processor is loaded once and only read afterwards (its Encode and Decode are const).
#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "tightpipe/base.h"
#include "tightpipe/input_file.h"
#include "tokenizers.h"

namespace tightpipe {

namespace {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  TokenizerType type() const override { return TokenizerType::kSentencePiece; }
  int32_t vocab_size() const override { return processor_.GetPieceSize(); }
  int32_t eod() const override { return processor_.eos_id(); }
  // libsentencepiece encodes a text as a whole (the unigram model's lattice, the BPE model's
  // symbols and agenda): measured here, 100 to 270 bytes of memory a byte of text for a unigram
  // model, and some 6 s a MiB for a BPE one. Longer texts are refused (preprocess names the
  // document) rather than a process that runs out of memory.
  size_t max_text_bytes() const override { return kMaxTextBytes; }
  static constexpr size_t kMaxTextBytes = size_t{8} << 20;

  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int> ids;
    // Fails only without a loaded model, which load() rules out.
    (void)processor_.Encode(text, &ids);
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  Result<std::string> decode(std::span<const int32_t> ids) const override {
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] < 0 || ids[k] >= vocab_size()) {
        return id_outside_vocabulary(ids[k], k, vocab_size(), "the SentencePiece");
      }
    }
    std::string out;
    auto status = processor_.Decode(std::vector<int>(ids.begin(), ids.end()), &out);
    if (!status.ok()) {
      return Status::internal(fmt::format("SentencePiece decode: {}", status.ToString()));
    }
    return out;
  }

  static Result<std::unique_ptr<Tokenizer>> load(const std::string& model_file) {
    // Read through the one input check (a FIFO, a directory or /dev/zero is refused in our
    // words), then parsed from memory: the library never opens the path itself.
    TP_ASSIGN_OR_RETURN(const std::string bytes,
                        read_input_file("--tokenizer-model", model_file, input_kind::kTokenizer));
    std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
    auto status = t->processor_.LoadFromSerializedProto(bytes);
    if (!status.ok()) {
      return Status::invalid_argument(
          fmt::format("--tokenizer-model {}: its {} bytes are not a SentencePiece model "
                      "(SentencePiece says: {}); hint: a SentencePiece .model file (what "
                      "spm_train writes)",
                      printable(model_file, 200), bytes.size(), printable(status.message(), 120)));
    }
    return std::unique_ptr<Tokenizer>(std::move(t));
  }

 private:
  SentencePieceTokenizer() = default;
  sentencepiece::SentencePieceProcessor processor_;
};

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_sentencepiece_tokenizer(const std::string& model_file) {
  return SentencePieceTokenizer::load(model_file);
}

}  // namespace tightpipe
