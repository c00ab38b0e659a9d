// The timeline readers (`report` reads timeline_rank<R>.jsonl; ranks gather events as a JSON
// array): any bytes give events or an error naming the line, never a crash.
#include "fuzz_util.h"
#include "tightpipe/timeline_io.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view text = fuzz::as_text(data, size);
  const std::string path = fuzz::write_scratch("timeline_rank0.jsonl", text);
  if (auto tl = read_rank_timeline(path, 0); tl.ok()) {
    auto again = events_from_json_array(events_to_json_array(*tl), 0);
    if (!again.ok()) fuzz::property_failed(again.status().to_string());
  }
  (void)events_from_json_array(text, 1);
  return 0;
}
