// A PlanResult built by hand for the page tests (plan_html_test, plan_browser_test): a 32-layer
// model on 64 devices, four candidates that fit (the fastest recommended, a 1F1B baseline, a
// schedule whose name needs escaping), two that do not (one beyond 1.5 x the budget and not
// simulated) and one refused by shape, without a memory figure.
#pragma once

#include <string>
#include <vector>

#include "tightpipe/plan.h"

namespace tightpipe::testutil {

inline PlanResult sample_plan_result() {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  PlanResult r;
  auto& o = r.options;
  o.model = {32, 4096, 32, 4096, 50257, 0};
  o.global_batch_size = 1024;
  o.micro_batch_sizes = {1, 2};
  o.devices = 64;
  o.device.name = "h100-sxm";
  o.device.description = "NVIDIA H100 SXM5 80 GB";
  o.device.memory_bytes = 80 * kGiB;
  o.network.name = "infiniband";
  o.price_per_device_hour = 2.5;
  o.train_tokens = 1e11;
  o.top = 2;
  r.steps = 23842;
  r.memory_budget_bytes = 72 * kGiB;
  const double usd_per_step_second = r.steps * o.devices * o.price_per_device_hour / 3600;
  auto add = [&](std::string schedule, int pp, int vpp, int64_t m, std::string recompute,
                 double step, double bubble, std::vector<double> peak_gib, bool fits,
                 bool simulated, std::string reason) {
    PlanCandidate c;
    c.schedule = std::move(schedule);
    c.pp = pp;
    c.vpp = vpp;
    c.dp = static_cast<int32_t>(o.devices / pp);
    c.micro_batch_size = 1;
    c.num_microbatches = m;
    c.recompute = std::move(recompute);
    c.layout = "E,t*4|t*4,L";
    c.fits = fits;
    c.simulated = simulated;
    c.reason = std::move(reason);
    if (simulated) {
      c.step_time_s = c.pipeline_time_s = step;
      c.bubble_ratio = bubble;
      c.tokens_per_s = o.global_batch_size * o.model.seq_length / step;
      c.train_hours = r.steps * step / 3600;
      c.cost_usd = usd_per_step_second * step;
    }
    for (double g : peak_gib) c.peak_memory_bytes.push_back(g * kGiB);
    r.candidates.push_back(c);
  };
  add("zb-v", 8, 2, 32, "none", 10.0, 0.031, {61, 60, 59, 58, 58, 57, 57, 56}, true, true, "");
  add("interleaved", 8, 2, 32, "none", 10.8, 0.09, {62, 60, 58, 56, 54, 52, 50, 48}, true, true,
      "");
  add("1f1b", 8, 1, 32, "none", 11.6, 0.179, {58, 55, 52, 49, 46, 43, 40, 37}, true, true, "");
  add("sched<&>", 4, 1, 64, "full", 12.5, 0.05, {40, 38, 36, 34}, true, true, "");
  add("1f1b", 2, 1, 128, "none", 0, 0, {140, 120}, false, false,
      "out of memory on rank 0 by 68.0 GiB");
  add("zb-v", 4, 2, 32, "none", 9.5, 0.02, {80, 79, 78, 77}, false, true,
      "out of memory on rank 0 by 8.0 GiB <&>");
  add("zb-2p", 8, 1, 30, "none", 0, 0, {}, false, false, "m=30 is not a multiple of p=8");
  r.recommended = 0;
  r.fastest = 0;
  r.baseline = 2;
  r.why = "zb-v p=8 m=32 cuts the bubble from 17.9% to 3.1% <and> saves 13.8% & more";
  r.stats = {120, 40, 10, 50, 20};
  r.search_seconds = 0.42;
  return r;
}

}  // namespace tightpipe::testutil
