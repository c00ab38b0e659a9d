// The planner (plan.h): cost = step x steps x devices x price / 3600, memory fits, rules of thumb.
#include "tightpipe/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace tightpipe {
namespace {

PlanOptions h100_options() {
  PlanOptions o;
  o.model = {32, 4096, 32, 4096, 0, 0};
  o.global_batch_size = 1024;
  o.devices = 64;
  o.device = *find_device_preset("h100-sxm");
  o.network = *find_network("infiniband");
  o.price_per_device_hour = 2.5;
  o.train_tokens = 1e11;
  return o;
}

TEST(PlanTest, IssueExampleFitsAndPricesTheRun) {
  auto r = plan(h100_options());
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_GE(r->recommended, 0);
  const PlanCandidate& c = r->candidates[r->recommended];
  EXPECT_TRUE(c.fits);
  for (double b : c.peak_memory_bytes) EXPECT_LE(b, r->memory_budget_bytes);
  const double steps = 1e11 / (1024.0 * 4096.0);
  EXPECT_DOUBLE_EQ(r->steps, steps);
  for (const PlanCandidate& k : r->candidates) {
    if (!k.fits) continue;
    EXPECT_NEAR(k.cost_usd, k.step_time_s * steps * 64 * 2.5 / 3600, 1e-9 * k.cost_usd);
  }
}

}  // namespace
}  // namespace tightpipe
