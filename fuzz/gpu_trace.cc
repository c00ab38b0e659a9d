// The GPU trace reader (`tightpipe report TRACE...`): a Kineto trace, plain or gzip'd JSON, read
// by the streaming reader, then the report built from it (text, report.json, trace.json, HTML).
// Any bytes give a report or an error, never a crash. Properties: busy + idle = window, and the
// causes of every step (pipelined or not) sum to window - compute.
#include <cmath>

#include "fuzz_util.h"
#include "tightpipe/gpu_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string path = fuzz::write_scratch("trace.json", fuzz::as_text(data, size));
  auto rep = build_gpu_trace_report({path});
  if (!rep.ok()) return 0;
  (void)format_gpu_trace_text(*rep);
  (void)gpu_trace_report_json(*rep);
  (void)gpu_trace_report_html(*rep);
  (void)gpu_trace_chrome_json(*rep);
  auto near = [](double a, double b) { return std::abs(a - b) <= 1e-9 * (1 + std::abs(b)); };
  for (const auto& r : rep->ranks) {
    if (!near(r.usage.busy_s + r.usage.idle_s, r.usage.window_s)) {
      fuzz::property_failed("busy + idle != window");
    }
    for (const auto& s : r.steps) {
      std::vector<GpuEvent> events;
      for (const auto& e : rep->traces.front().events)
        if (e.step == s.step) events.push_back(e);
      for (bool pipelined : {false, true}) {
        double sum = 0;
        for (double c : gpu_causes(events, pipelined)) sum += c;
        if (!near(sum, s.usage.window_s - s.usage.compute_s)) {
          fuzz::property_failed("causes do not sum to window - compute");
        }
      }
    }
  }
  return 0;
}
