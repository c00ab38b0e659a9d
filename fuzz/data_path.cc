// `--split` and `--data-path` words (parse_split_weights, parse_data_path). The input's first line
// is the --split text, every later line one --data-path word (corpus/data_path/*). Any bytes give
// a result or one InvalidArgument line with a hint, never a crash; a parsed split is fractions
// summing to 1 whose document ranges tile [0, n) for every n; a parsed blend has non-empty paths
// and weights all finite > 0 or all 0, and passes DataOptions::validate.
#include <cmath>

#include "fuzz_util.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"

namespace {

void check_error(const tightpipe::Status& s, std::string_view what) {
  using tightpipe::StatusCode;
  if (s.code() != StatusCode::kInvalidArgument) {
    tightpipe::fuzz::property_failed(std::string(what) + ": not InvalidArgument: " + s.to_string());
  }
  if (s.message().find('\n') != std::string::npos ||
      s.message().find("hint:") == std::string::npos) {
    tightpipe::fuzz::property_failed(std::string(what) +
                                     ": not one line with a hint: " + s.message());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::vector<std::string> lines = split(fuzz::as_text(data, size), '\n');
  auto fractions = parse_split_weights(lines[0]);
  if (!fractions.ok()) {
    check_error(fractions.status(), "parse_split_weights");
  } else {
    double sum = 0;
    for (double f : *fractions) {
      if (!(f >= 0 && f <= 1)) fuzz::property_failed("a split fraction outside [0, 1]");
      sum += f;
    }
    if (std::abs(sum - 1) > 1e-9) fuzz::property_failed("split fractions do not sum to 1");
    for (int64_t n : {0, 1, 2, 3, 7, 10, 999, 1000, 1001, 123457}) {
      const auto parts = split_document_ranges(*fractions, n);
      int64_t at = 0;
      for (const auto& [begin, end] : parts) {
        if (begin != at || end < begin) fuzz::property_failed("split ranges do not tile");
        at = end;
      }
      if (at != n) fuzz::property_failed("split ranges do not end at n");
    }
  }
  const std::vector<std::string> words(lines.begin() + 1, lines.end());
  auto blend = parse_data_path(words);
  if (!blend.ok()) {
    check_error(blend.status(), "parse_data_path");
    return 0;
  }
  if (blend->size() != words.size() && blend->size() * 2 != words.size()) {
    fuzz::property_failed("blend size is neither the word count nor half of it");
  }
  const bool by_size = (*blend)[0].weight == 0;
  for (const DataSource& s : *blend) {
    if (s.path.empty()) fuzz::property_failed("a blend member with an empty path");
    if (by_size ? s.weight != 0 : !(std::isfinite(s.weight) && s.weight > 0)) {
      fuzz::property_failed("blend weights neither all finite > 0 nor all 0");
    }
  }
  DataOptions o;
  o.blend = *blend;
  if (fractions.ok()) o.split_weights = lines[0];
  if (Status v = o.validate(); !v.ok()) {
    fuzz::property_failed("a parsed blend and split fail validate(): " + v.to_string());
  }
  return 0;
}
