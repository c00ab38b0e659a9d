// The schedule JSON reader (`schedule --check s.json`): any bytes give a Schedule or an error,
// never a crash; what it accepts prints back to JSON that reads again.
#include "fuzz_util.h"
#include "tightpipe/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  auto s = parse_json(fuzz::as_text(data, size), "fuzz.json");
  if (!s.ok()) return 0;
  (void)format_grid(*s);
  auto again = parse_json(to_json(*s), "fuzz.json (printed back)");
  if (!again.ok()) fuzz::property_failed(again.status().to_string());
  return 0;
}
