// How long `tightpipe plan`'s search takes (plan.h): the 64-H100 example and a 70B-shaped
// model on 1024 devices (with and without the distributed optimizer), each searched `--repeats`
// times; prints the median wall time, the configurations looked at and how many were simulated.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/plan.h"

namespace tightpipe {
namespace {

struct Case {
  const char* name;
  PlanModel model;
  int64_t batch, devices;
  bool distributed_optimizer;
};

int run(int repeats) {
  const Case cases[] = {
      {"32 x 4096, seq 4096, 64 x h100-sxm", {32, 4096, 32, 4096, 0, 0}, 1024, 64, false},
      {"70B-shaped (80 x 8192, ffn 28672, seq 4096, vocab 128256), 1024 x h100-sxm",
       {80, 8192, 64, 4096, 128256, 28672},
       1024,
       1024,
       false},
      {"the same with --use-distributed-optimizer",
       {80, 8192, 64, 4096, 128256, 28672},
       1024,
       1024,
       true},
  };
  std::printf("%-80s %10s %8s %10s %9s  %s\n", "search", "median s", "configs", "simulated",
              "pruned", "recommended");
  for (const Case& c : cases) {
    PlanOptions o;
    o.model = c.model;
    o.global_batch_size = c.batch;
    o.devices = c.devices;
    o.device = *find_device_preset("h100-sxm");
    o.network = *find_network("infiniband");
    o.distributed_optimizer = c.distributed_optimizer;
    o.price_per_device_hour = 2.5;
    o.train_tokens = 1e11;
    std::vector<double> secs;
    Result<PlanResult> r = Status::internal("not run");
    for (int k = 0; k < repeats; ++k) {
      const auto t0 = std::chrono::steady_clock::now();
      r = plan(o);
      secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", c.name, std::string(r.status().message()).c_str());
        return 1;
      }
    }
    const PlanCandidate& rec = r->candidates[r->recommended];
    std::printf("%-80s %10.3f %8lld %10lld %9lld  %s p=%d v=%d dp=%d mbs=%lld recompute %s\n",
                c.name, median(secs), static_cast<long long>(r->stats.configurations),
                static_cast<long long>(r->stats.simulated), static_cast<long long>(r->stats.pruned),
                rec.schedule.c_str(), rec.pp, rec.vpp, rec.dp,
                static_cast<long long>(rec.micro_batch_size), rec.recompute.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace tightpipe

int main(int argc, char** argv) {
  tightpipe::bench::Flags flags("plan_search_bench: wall time of the planner's search",
                                "plan_search_bench");
  int repeats = 3;
  flags.option("--repeats", repeats, "searches per case (the median is printed)").range(1, 100);
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  return tightpipe::run(repeats);
}
