// The GPU trace reader (`tightpipe report TRACE...`): a Kineto trace, plain or gzip'd JSON, read
// by the streaming reader, then the report built from it (text, report.json, trace.json, HTML).
// Any bytes give a report or an error, never a crash. Properties: busy + idle = window; the causes
// of every step (pipelined or not) sum to window - compute; the steps' windows partition the
// trace, so their idle and causes sum exactly (ns) to the whole trace's.
#include "tightpipe/gpu_trace.h"

#include <cmath>

#include "fuzz_util.h"

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
  for (size_t k = 0; k < rep->ranks.size(); ++k) {
    const GpuRankReport& r = rep->ranks[k];
    if (!near(r.usage.busy_s + r.usage.idle_s, r.usage.window_s)) {
      fuzz::property_failed("busy + idle != window");
    }
    if (r.steps.empty()) continue;
    for (bool pipelined : {false, true}) {
      const GpuRankReport p = gpu_rank_report(rep->traces[k], pipelined);
      int64_t idle = 0, window = 0;
      GpuCausesNs causes{};
      for (const auto& s : p.steps) {
        double sum = 0;
        for (double c : s.causes) sum += c;
        if (!near(sum, s.usage.window_s - s.usage.compute_s)) {
          fuzz::property_failed("causes do not sum to window - compute");
        }
        window += s.usage.end_ns - s.usage.start_ns;
        idle += s.usage.end_ns - s.usage.start_ns - s.usage.busy_ns;
        for (int c = 0; c < kNumGpuCauses; ++c) causes[c] += s.causes_ns[c];
      }
      if (window != p.usage.end_ns - p.usage.start_ns ||
          idle != p.usage.end_ns - p.usage.start_ns - p.usage.busy_ns) {
        fuzz::property_failed("the steps' windows or idle do not sum to the whole trace's");
      }
      if (causes != p.causes_ns)
        fuzz::property_failed("the steps' causes do not sum to the rank's");
      if (!pipelined) {  // the whole trace's causes over its own window
        const GpuCauses whole = gpu_causes(rep->traces[k].events, false);
        for (int c = 0; c < kNumGpuCauses; ++c) {
          if (!near(whole[c], p.causes[c])) {
            fuzz::property_failed("the steps' causes differ from the whole trace's");
          }
        }
      }
    }
  }
  return 0;
}
