// `tightpipe data preprocess --input` (preprocess): JSON lines or plain text into Megatron indexed
// datasets, with the byte tokenizer. The input's first byte picks the form ('j': a .jsonl with
// --json-keys text,title; anything else: plain text), the rest is the input file
// (corpus/preprocess/*). Any bytes give an error (InvalidArgument or Corruption naming the input,
// and the line for JSON) or datasets that open with as many documents as the summary says and
// every token a byte.
#include "tightpipe/preprocess.h"

#include <cstring>

#include "fuzz_util.h"
#include "tightpipe/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view input = fuzz::as_text(data, size);
  if (input.empty()) return 0;
  const bool json = input[0] == 'j';
  PreprocessOptions o;
  o.input = fuzz::write_scratch(json ? "in.jsonl" : "in.txt", input.substr(1));
  o.output_prefix = fuzz::fresh_scratch_subdir("out") + "/ds";
  o.tokenizer.type = TokenizerType::kByte;
  if (json) o.json_keys = {"text", "title"};
  auto s = preprocess(o);
  if (!s.ok()) {
    const StatusCode c = s.status().code();
    if (c != StatusCode::kInvalidArgument && c != StatusCode::kCorruption) {
      fuzz::property_failed("not InvalidArgument or Corruption: " + s.status().to_string());
    }
    if (s.status().message().find("in.") == std::string::npos) {
      fuzz::property_failed("the error does not name the input: " + s.status().to_string());
    }
    return 0;
  }
  if (s->prefixes.size() != o.json_keys.size()) fuzz::property_failed("a dataset per key");
  for (const std::string& prefix : s->prefixes) {
    auto ds = IndexedDataset::open(prefix);
    if (!ds.ok()) fuzz::property_failed("its output does not open: " + ds.status().to_string());
    if (ds->num_documents() != s->documents) {
      fuzz::property_failed("the dataset's documents differ from the summary's");
    }
    for (int64_t k = 0; k < std::min<int64_t>(ds->num_sequences(), 64); ++k) {
      for (int32_t t : ds->sequence(k)) {
        if (t < 0 || t > 255) fuzz::property_failed("a byte token outside [0, 255]");
      }
    }
  }
  return 0;
}
