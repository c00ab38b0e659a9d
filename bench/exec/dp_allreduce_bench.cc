// The data-parallel gradient all-reduce, measured and predicted side by side in one run (issue
// 19): DP = 2 x PP = 2 on threads, emulated compute (F 8, B 16 ms per microbatch through a rank)
// and an emulated link (--gbps, --latency-us), interleaved p = 2, v = 2, m = 4, a GPT of 8 x 64
// whose stages' gradients (66k-150k values, reduced as doubles) the all-reduce moves. For the
// reduction after the program and for --overlap-grad-reduce it prints the step time (median of
// the measured steps) and the exposed all-reduce (`tightpipe report`'s cause: the optimizer's
// wait on the reduction, in points of the step's bubble), measured against the simulator's
// alpha-beta ring prediction from the run's own costs, and the overlap's speed-up.
// Usage: dp_allreduce_bench [--steps N] [--gbps G] [--latency-us L]
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench_cli.h"
#include "dp_allreduce_setup.h"
#include "tightpipe/base.h"
#include "tightpipe/report.h"
#include "tightpipe/trainer.h"

using namespace tightpipe;

namespace {

struct Row {
  double step = 0, predicted_step = 0, measured = 0, predicted = 0;
};

Row run(bool overlap, int steps, double gbps, double latency_us) {
  char tmpl[] = "/tmp/tp-dp-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  LinkOptions link;
  link.gbps = gbps;
  link.latency_us = latency_us;
  const TrainOptions o = testutil::dp_allreduce_options(dir, overlap, steps, link);
  auto die = [](const Status& s) {
    std::fprintf(stderr, "dp_allreduce_bench: %s\n", s.to_string().c_str());
    std::exit(1);
  };
  auto s = run_training(o);
  if (!s.ok()) die(s.status());
  auto rep = build_report(dir);
  if (!rep.ok()) die(rep.status());
  if (!rep->has_prediction) die(Status::internal("no prediction: " + rep->prediction_error));
  const int ar = static_cast<int>(IdleCause::kExposedAllReduce);
  return {rep->summary.step_time.median, rep->predicted.makespan,
          rep->summary.cause_ratio[ar].median, rep->predicted_breakdown.cause_ratio[ar]};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 6;
  double gbps = 0.25, latency_us = 50;
  bench::Flags flags(
      "DP = 2 x PP = 2 on emulated compute and link: step time with and without "
      "--overlap-grad-reduce, measured exposed all-reduce against the prediction",
      "dp_allreduce_bench");
  flags.option("--steps", steps, "training steps per run (the first is left out)")
      .show_default()
      .range(2, 1000);
  flags.option("--gbps", gbps, "emulated link bandwidth, Gbit/s")
      .show_default()
      .range(0.001, 1000.0);
  flags.option("--latency-us", latency_us, "emulated link latency, microseconds")
      .show_default()
      .range(0.0, 1e6);
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;

  const Row after = run(false, steps, gbps, latency_us);
  const Row over = run(true, steps, gbps, latency_us);
  std::printf("DP = 2 x PP = 2, interleaved v = 2, m = 4, link %g Gbit/s %g us, %d steps\n", gbps,
              latency_us, steps);
  std::printf("%-22s %12s %12s %14s %14s %8s\n", "grad reduce", "step ms", "pred. ms",
              "exposed AR %", "predicted %", "gap pt");
  for (const auto& [name, r] :
       {std::pair{"after the program", after}, std::pair{"overlapped", over}}) {
    std::printf("%-22s %12.1f %12.1f %14.1f %14.1f %8.1f\n", name, 1e3 * r.step,
                1e3 * r.predicted_step, 100 * r.measured, 100 * r.predicted,
                100 * (r.measured - r.predicted));
  }
  std::printf("--overlap-grad-reduce: step %.2fx shorter measured, %.2fx predicted\n",
              after.step / over.step, after.predicted_step / over.predicted_step);
  return 0;
}
