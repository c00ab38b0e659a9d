// The schedule CSV reader (`schedule --check s.csv`, `--schedule s.csv`, a run's schedule.csv):
// any bytes give a Schedule or an error, never a crash; what it accepts prints back to a CSV that
// reads again.
#include "fuzz_util.h"
#include "tightpipe/schedule.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  auto s = parse_csv(fuzz::as_text(data, size), "fuzz.csv");
  if (!s.ok()) return 0;
  (void)format_grid(*s);
  auto again = parse_csv(to_csv(*s), "fuzz.csv (printed back)");
  if (!again.ok()) fuzz::property_failed(again.status().to_string());
  return 0;
}
