// The measure -> schedule -> run loop of an auto schedule (trainer.h, TrainOptions::auto_schedule):
// rank 0 turns the profile steps' samples into costs, builds the schedule and predicts both.
#include <fmt/format.h>

#include "exec/train_internal.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe::train_internal {

namespace {

// The simulator's bubble (the one definition) of the lowered `lowered` with `costs`, simulated
// as the run runs.
Result<double> predicted_bubble(const RunPlan& plan, const Schedule& lowered,
                                const CostModel& costs) {
  SimOptions so = run_sim_options(plan);
  so.record_timeline = false;
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(lowered, costs, so));
  return r.bubble_ratio;
}

}  // namespace

Result<Schedule> build_auto_from_samples(RunPlan& plan, const CostSamples& samples,
                                         CostModel* costs_out) {
  AutoSwitch& as = plan.auto_switch;
  auto costs = calibrate(samples, plan.lowered, calibration_options(plan));
  if (!costs.ok()) {
    return costs.status().with_context(
        fmt::format("--schedule {}: calibrating the {} profile steps on {}", as.target,
                    as.profile_steps, as.counterpart));
  }
  auto built = build_auto_schedule(as.target, plan.opt.pp, plan.opt.microbatches, *costs,
                                   plan.opt.auto_schedule);
  if (!built.ok()) return built.status().with_context("--schedule " + as.target);
  // plan.lowered is still the counterpart the samples were measured on.
  TP_ASSIGN_OR_RETURN(as.predicted_before, predicted_bubble(plan, plan.lowered, *costs));
  TP_ASSIGN_OR_RETURN(const Schedule built_lowered, lower(*built));
  TP_ASSIGN_OR_RETURN(as.predicted_after, predicted_bubble(plan, built_lowered, *costs));
  if (costs_out != nullptr) *costs_out = *costs;
  return built;
}

}  // namespace tightpipe::train_internal
