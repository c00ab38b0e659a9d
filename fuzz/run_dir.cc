// The report's run-directory readers (`tightpipe report RUN_DIR`): summary.json, the rank
// timelines, metrics.jsonl, costs.json and schedule.csv, then the report built from them. One
// input holds the files, each after a line "=== NAME" (NAME one of kFiles; other sections are
// dropped), e.g. corpus/run_dir/*. Any bytes give a report or an error, never a crash.
#include <array>

#include "fuzz_util.h"
#include "tightpipe/base.h"
#include "tightpipe/report.h"

namespace {
constexpr std::array<std::string_view, 8> kFiles = {
    "summary.json",         "timeline_rank0.jsonl", "timeline_rank1.jsonl", "timeline_rank2.jsonl",
    "timeline_rank3.jsonl", "metrics.jsonl",        "costs.json",           "schedule.csv"};
constexpr std::string_view kMarker = "=== ";
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view text = fuzz::as_text(data, size);
  const std::string dir = fuzz::fresh_scratch_subdir("run");
  // Sections: from a line starting with kMarker to the next such line.
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    const std::string_view line = text.substr(pos, eol - pos);
    pos = std::min(text.size(), eol + 1);
    if (!line.starts_with(kMarker)) continue;
    const std::string_view name = trim(line.substr(kMarker.size()));
    size_t end = pos;
    while (end < text.size() && !text.substr(end).starts_with(kMarker)) {
      const size_t next = text.find('\n', end);
      end = next == std::string_view::npos ? text.size() : next + 1;
    }
    for (std::string_view f : kFiles)
      if (name == f) fuzz::write_scratch("run/" + std::string(f), text.substr(pos, end - pos));
    pos = end;
  }
  auto rep = build_report(dir);
  if (!rep.ok()) return 0;
  (void)format_report_text(*rep);
  (void)report_json(*rep);
  (void)report_html(*rep);
  return 0;
}
