// The measure -> schedule -> run loop of an auto schedule (trainer.h, TrainOptions::auto_schedule):
// rank 0 turns the profile steps' samples into costs, builds the schedule and predicts both.
#include <fmt/format.h>

#include "exec/train_internal.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe::train_internal {

namespace {

// The simulator's bubble (the one definition) of `compute_only` with `costs`.
Result<double> predicted_bubble(const Schedule& compute_only, const CostModel& costs,
                                bool overlap_p2p) {
  TP_ASSIGN_OR_RETURN(Schedule low, lower(compute_only));
  SimOptions so;
  so.record_timeline = false;
  so.comm_mode = overlap_p2p ? CommMode::kOverlap : CommMode::kBlocking;
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(low, costs, so));
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
  const bool overlap = plan.opt.exec.overlap_p2p;
  TP_ASSIGN_OR_RETURN(Schedule before,
                      generate_schedule(as.counterpart, {.ranks = plan.lowered.num_ranks,
                                                         .microbatches = plan.opt.microbatches,
                                                         .chunks = plan.lowered.chunks()}));
  TP_ASSIGN_OR_RETURN(as.predicted_before, predicted_bubble(before, *costs, overlap));
  TP_ASSIGN_OR_RETURN(as.predicted_after, predicted_bubble(*built, *costs, overlap));
  if (costs_out != nullptr) *costs_out = *costs;
  return built;
}

}  // namespace tightpipe::train_internal
