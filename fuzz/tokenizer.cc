// The tokenizer files (`--vocab-file`, `--merge-file`, `--tokenizer-model`, a checkpoint's
// tokenizer.json). The input's first byte picks the reader, the rest is its file(s):
//   'g': GPT-2 BPE: a 4-byte little-endian length L, L bytes of vocab.json, then merges.txt
//        (fewer when the input ends first; corpus/tokenizer/g-*);
//   's': a SentencePiece .model (libsentencepiece reads it; our wrapper's checks first);
//   anything else: TokenizerOptions::from_json (tokenizer.json), then validate().
// Any bytes give a tokenizer or an error naming the file, never a crash; a tokenizer encodes a
// fixed text and the input itself with ids inside its vocabulary, which decode.
#include "tightpipe/tokenizer.h"

#include <algorithm>
#include <cstring>

#include "fuzz_util.h"

namespace {

void exercise(const tightpipe::Tokenizer& t, std::string_view input) {
  using namespace tightpipe;
  for (std::string_view text : {std::string_view("Hello, world! It's 2024.\n\n  tabs\tand é"),
                                input.substr(0, std::min<size_t>(input.size(), 4096))}) {
    if (text.size() > t.max_text_bytes()) continue;
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids) {
      if (id < 0 || id >= t.vocab_size()) {
        fuzz::property_failed("encode gave id " + std::to_string(id) + " outside the vocabulary " +
                              std::to_string(t.vocab_size()));
      }
    }
    auto back = t.decode(ids);
    if (!back.ok())
      fuzz::property_failed("its own ids do not decode: " + back.status().to_string());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view input = fuzz::as_text(data, size);
  if (input.empty()) return 0;
  const char kind = input[0];
  const std::string_view rest = input.substr(1);
  TokenizerOptions o;
  if (kind == 'g') {
    uint32_t vocab_len = 0;
    if (rest.size() >= 4) std::memcpy(&vocab_len, rest.data(), 4);
    const std::string_view files = rest.substr(std::min<size_t>(4, rest.size()));
    const std::string_view vocab = files.substr(0, std::min<size_t>(vocab_len, files.size()));
    o.type = TokenizerType::kGpt2Bpe;
    o.vocab_file = fuzz::write_scratch("vocab.json", vocab);
    o.merge_file = fuzz::write_scratch("merges.txt", files.substr(vocab.size()));
  } else if (kind == 's') {
    o.type = TokenizerType::kSentencePiece;
    o.tokenizer_model = fuzz::write_scratch("tok.model", rest);
  } else {
    auto parsed = TokenizerOptions::from_json(rest, "tokenizer.json");
    if (!parsed.ok()) return 0;
    // The record's files are not read here (paths from the input): only its own checks.
    (void)parsed->validate();
    (void)TokenizerOptions::from_json(parsed->to_json(), "tokenizer.json (printed back)");
    return 0;
  }
  auto t = make_tokenizer(o);
  if (!t.ok()) return 0;
  exercise(**t, rest);
  return 0;
}
