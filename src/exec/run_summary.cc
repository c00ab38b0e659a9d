// The end of a run on rank 0: calibrate, predict, summarise, write, say (train_internal.h).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "exec/train_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/simulator.h"

namespace tightpipe::train_internal {

namespace {

// The measured steps' medians into the summary (the one bubble definition: prof.h).
void summarize_measured(const std::vector<StepRecord>& records, int64_t warmup, TrainSummary& s) {
  const StepRange range = measured_step_range(records.size(), warmup);
  std::vector<StepBubble> bubbles;
  std::vector<double> tps, wall, data_wait;
  s.peak_stash_bytes_per_rank.assign(records.front().peak_stash.size(), 0);
  for (size_t k = range.first; k < range.last; ++k) {
    const StepRecord& r = records[k];
    bubbles.push_back(r.bubble);
    tps.push_back(r.tokens_per_s);
    wall.push_back(r.wall);
    data_wait.push_back(*std::max_element(r.data_wait.begin(), r.data_wait.end()));
    for (size_t q = 0; q < r.peak_stash.size(); ++q)
      s.peak_stash_bytes_per_rank[q] = std::max(s.peak_stash_bytes_per_rank[q], r.peak_stash[q]);
  }
  const BubbleSummary b = summarize_bubbles(bubbles);
  s.steps = static_cast<int64_t>(records.size());
  s.measured_steps = static_cast<int64_t>(range.last - range.first);
  s.final_loss = records.back().loss;
  for (const StepRecord& r : records)
    if (r.val_loss >= 0) s.final_val_loss = r.val_loss;
  s.measured_bubble_ratio = b.ratio;
  s.measured_bubble_per_rank = b.rank_ratio;
  s.tokens_per_s = median(tps);
  s.step_time_s = median(wall);
  s.data_wait_s = median(data_wait);
}

// The simulator on the run's own schedule with its calibrated costs.
void predict(const RunPlan& plan, const Result<CostModel>& costs, TrainSummary& s) {
  if (!costs.ok()) {
    s.prediction_error = costs.status().message();
    return;
  }
  SimOptions so = run_sim_options(plan);
  // The replicas' gradient all-reduce (each stage's measured bytes on the run's link; costs.json).
  so.data_parallel = trainer_data_parallel(plan.layout.dp, plan.opt.grad_reduce.overlap,
                                           plan.opt.grad_reduce.bucket_size);
  auto sim = simulate(plan.lowered, *costs, so);
  if (!sim.ok()) {
    s.prediction_error = sim.status().message();
    return;
  }
  s.predicted_bubble_ratio = sim->bubble_ratio;
  s.predicted_exposed_allreduce_ratio = sim->exposed_allreduce_ratio;
  for (const auto& r : sim->ranks) {
    s.predicted_bubble_per_rank.push_back(r.bubble_ratio);
    s.predicted_peak_bytes_per_rank.push_back(r.peak_activation_bytes);
  }
}

nlohmann::json summary_json(const TrainSummary& s, const RunPlan& plan,
                            const Result<CostModel>& costs) {
  const TrainOptions& o = plan.opt;
  nlohmann::json j;
  j["schedule"] = plan.lowered.name;
  j["pp"] = o.pp;
  j["data_parallel_size"] = plan.layout.dp;  // replicas; microbatches is per replica
  if (plan.layout.dp > 1) {                  // how the report's prediction reduces the gradients
    j["overlap_grad_reduce"] = o.grad_reduce.overlap;
    j["bucket_size"] = o.grad_reduce.bucket_size;
  }
  j["vpp"] = plan.lowered.chunks();
  j["microbatches"] = o.microbatches;
  j["model"] = {{"num_layers", o.model.num_layers},
                {"hidden_size", o.model.hidden_size},
                {"num_attention_heads", o.model.num_heads},
                {"seq_length", o.model.seq_length},
                {"micro_batch_size", o.model.micro_batch_size},
                {"vocab_size", o.model.vocab_size},
                {"precision", std::string(nn::precision_name(o.model.precision))}};
  j["layout"] = nn::format_layout(plan.specs);
  j["transport"] = std::string(transport_kind_name(o.world.kind));
  j["compute"] = o.exec.emulated ? "emulated" : "real";
  j["overlap_p2p"] = o.exec.overlap_p2p;
  j["steps"] = s.steps;
  // Every leading step left out of the medians (the report reads it): an auto schedule's
  // profile steps, then --measure-warmup-steps.
  j["warmup_steps_excluded"] = plan.excluded_steps();
  if (!s.auto_schedule.empty()) {
    nlohmann::json& a = j["auto_schedule"];
    a = {{"schedule", s.auto_schedule},
         {"profiled_with", s.auto_profiled_with},
         {"profile_steps", s.auto_profile_steps},
         {"resumed", s.auto_profile_steps == 0}};
    if (s.auto_profile_steps > 0) {  // the simulator with the profiled costs, at the switch
      a["predicted_bubble_before"] = s.auto_predicted_before;
      a["predicted_bubble_after"] = s.auto_predicted_after;
    }
  }
  j["measured_steps"] = s.measured_steps;
  j["final_loss"] = s.final_loss;
  if (s.final_val_loss >= 0) j["final_val_loss"] = s.final_val_loss;
  j["tokens_per_s"] = s.tokens_per_s;
  j["step_time_s"] = s.step_time_s;
  j["data_wait_s"] = s.data_wait_s;
  j["data_wait_ratio"] = s.step_time_s > 0 ? s.data_wait_s / s.step_time_s : 0;
  j["bubble_definition"] = "docs/bubble.md";
  j["measured_bubble_ratio"] = s.measured_bubble_ratio;
  j["predicted_bubble_ratio"] = s.predicted_bubble_ratio;
  j["measured_bubble_ratio_per_rank"] = s.measured_bubble_per_rank;
  j["predicted_bubble_ratio_per_rank"] = s.predicted_bubble_per_rank;
  if (plan.layout.dp > 1)
    j["predicted_exposed_allreduce_ratio"] = s.predicted_exposed_allreduce_ratio;
  if (!s.model_tflops_per_rank.empty()) {
    j["model_tflops_per_rank"] = s.model_tflops_per_rank;
    j["hardware_tflops_per_rank"] = s.hardware_tflops_per_rank;
    j["utilisation_per_rank"] = s.utilisation_per_rank;
    j["matmul_tflops"] = s.matmul_tflops;
    j["flops_definition"] = "docs/cpu_kernels.md#flops";
    j["kernels"] = s.kernels;
  }
  j["measured_peak_activation_bytes_per_rank"] = s.peak_stash_bytes_per_rank;
  j["predicted_peak_activation_bytes_per_rank"] = s.predicted_peak_bytes_per_rank;
  if (!s.prediction_error.empty()) j["prediction_error"] = s.prediction_error;
  // --on-corrupt skip: how much training data was skipped, and why (the first reasons).
  nlohmann::json skipped = {{"count", s.data_skipped},
                            {"on_corrupt", on_corrupt_name(o.data.on_corrupt)}};
  const size_t listed = std::min(s.data_skipped_reasons.size(), kMaxListedSkips);
  skipped["reasons"] = std::vector<std::string>(s.data_skipped_reasons.begin(),
                                                s.data_skipped_reasons.begin() + listed);
  skipped["not_listed"] = s.data_skipped - static_cast<int64_t>(listed);
  j["data_skipped"] = skipped;
  j["cpu"] = {{"cores", s.cores},
              {"rank_threads", plan.cpu.rank_threads},
              {"loader_threads", plan.cpu.loader_threads},
              {"busy_threads", s.busy_threads},
              {"oversubscribed", s.oversubscribed},
              {"shared_with_loaders", plan.cpu.shared_with_loaders()}};
  if (s.oversubscribed) j["cpu"]["note"] = plan.cpu.warning();
  if (costs.ok()) {
    nlohmann::json c = nlohmann::json::array();
    for (int32_t st = 0; st < costs->num_stages(); ++st) {
      const StageCost& x = costs->stage(st);
      c.push_back({{"stage", st},
                   {"rank", plan.lowered.rank_of(st)},
                   {"f_s", x.f},
                   {"i_s", x.i},
                   {"w_s", x.w},
                   {"b_s", x.b},
                   {"optimizer_s", x.optimizer},
                   {"activation_bytes", x.act_bytes}});
      if (x.allreduce_bytes > 0) c.back()["allreduce_bytes"] = x.allreduce_bytes;
    }
    j["measured_costs"] = c;
  }
  return j;
}

Status write_outputs(const RunPlan& plan, const nlohmann::json& j, const Result<CostModel>& costs,
                     const Timeline& last_step) {
  const TrainOptions& o = plan.opt;
  if (!o.out_dir.empty()) {
    TP_RETURN_IF_ERROR(write_file(o.out_dir + "/summary.json", j.dump(2) + "\n"));
    if (costs.ok()) {
      TP_RETURN_IF_ERROR(write_file(o.out_dir + "/costs.json", cost_table_to_json(*costs)));
    }
    TP_RETURN_IF_ERROR(write_file(o.out_dir + "/schedule.csv", to_csv(plan.lowered)));
  }
  if (!o.trace_path.empty()) {
    TP_RETURN_IF_ERROR(write_chrome_trace(o.trace_path, last_step).with_context("--trace"));
  }
  return OkStatus();
}

}  // namespace

Result<TrainSummary> summarize_run(const RunPlan& plan, const RunEnd& end) {
  TrainSummary s;
  summarize_measured(end.records, plan.excluded_steps(), s);
  if (!plan.flops.empty() && s.step_time_s > 0) {
    for (const RankFlops& f : plan.flops) {
      const double model = f.model / s.step_time_s;
      const double hardware = (f.model + f.recompute) / s.step_time_s;
      s.model_tflops_per_rank.push_back(model / 1e12);
      s.hardware_tflops_per_rank.push_back(hardware / 1e12);
      s.utilisation_per_rank.push_back(plan.matmul_flops > 0 ? hardware / plan.matmul_flops : 0);
    }
    s.matmul_tflops = plan.matmul_flops / 1e12;
    s.kernels = plan.kernel_line;
  }
  s.cores = plan.cpu.cores;
  s.busy_threads = plan.cpu.rank_threads + plan.cpu.loader_threads;
  s.oversubscribed = plan.cpu.oversubscribed();
  s.data_skipped = end.data.corrupt_skipped;
  s.data_skipped_reasons = end.data.corrupt_messages;
  const AutoSwitch& as = plan.auto_switch;
  if (as.built) {
    s.auto_schedule = as.target;
    s.auto_profiled_with = as.counterpart;
    s.auto_profile_steps = as.profile_steps;
    s.auto_predicted_before = as.predicted_before;
    s.auto_predicted_after = as.predicted_after;
  }
  Result<CostModel> costs = calibrate(end.samples, plan.lowered, calibration_options(plan));
  if (costs.ok()) costs = with_state_bytes(*costs, plan);
  predict(plan, costs, s);
  TP_RETURN_IF_ERROR(write_outputs(plan, summary_json(s, plan, costs), costs, end.last_step));
  for (const std::string& line : summary_lines(s, plan)) plan.log(0, line);
  if (costs.ok()) {
    std::string line = "measured per-action costs (ms, median):";
    for (int32_t st = 0; st < costs->num_stages(); ++st) {
      const StageCost& c = costs->stage(st);
      line += fmt::format(" s{} F {:.2f} I {:.2f} W {:.2f} B {:.2f};", st, 1e3 * c.f, 1e3 * c.i,
                          1e3 * c.w, 1e3 * c.b);
    }
    plan.log(0, line);
  }
  return s;
}

std::vector<std::string> summary_lines(const TrainSummary& s, const RunPlan& plan) {
  std::vector<std::string> out;
  out.push_back(fmt::format(
      "\nsummary (median of {} steps after {} warm-up): {:.0f} tokens/s, step {:.1f} ms, data "
      "wait {:.2f}% of the step",
      s.measured_steps, plan.excluded_steps(), s.tokens_per_s, 1e3 * s.step_time_s,
      s.step_time_s > 0 ? 100 * s.data_wait_s / s.step_time_s : 0));
  out.push_back(fmt::format(
      "bubble: measured {:.1f}%, predicted {} (simulator with the measured costs)",
      100 * s.measured_bubble_ratio,
      s.prediction_error.empty() ? fmt::format("{:.1f}%", 100 * s.predicted_bubble_ratio)
                                 : "- (" + s.prediction_error + ")"));
  if (!s.model_tflops_per_rank.empty()) {
    std::vector<std::string> per;
    for (size_t r = 0; r < s.model_tflops_per_rank.size(); ++r) {
      per.push_back(fmt::format("{:.3f} ({:.0f}%)", s.model_tflops_per_rank[r],
                                100 * s.utilisation_per_rank[r]));
    }
    const bool recompute = plan.opt.recompute.enabled();
    out.push_back(
        fmt::format("flops: model TFLOP/s per rank (utilisation of the measured matmul rate {:.3f} "
                    "TFLOP/s{}): {}",
                    s.matmul_tflops, recompute ? "; utilisation counts the recompute's FLOPs" : "",
                    join(per, ", ")));
  }
  if (!s.auto_schedule.empty()) {
    out.push_back(
        s.auto_profile_steps > 0
            ? fmt::format("{}: built from {} profile step(s) on {}, which it predicted at {:.1f}% "
                          "(now {:.1f}%)",
                          s.auto_schedule, s.auto_profile_steps, s.auto_profiled_with,
                          100 * s.auto_predicted_before, 100 * s.auto_predicted_after)
            : fmt::format("{}: the schedule of the checkpoint (built by an earlier run)",
                          s.auto_schedule));
  }
  if (s.data_skipped > 0) {
    out.push_back(
        fmt::format("data: skipped {} corrupt shard(s)/sample(s) (--on-corrupt skip); "
                    "the reasons are above and in summary.json (data_skipped)",
                    s.data_skipped));
  }
  if (s.oversubscribed) {
    out.push_back(
        fmt::format("cpu: {} busy threads on {} cores (oversubscribed: see the note "
                    "above; `tightpipe report` shows the cpu wait per rank)",
                    s.busy_threads, s.cores));
  }
  out.push_back(fmt::format("{:<6} {:>10} {:>10} {:>16} {:>16}", "rank", "measured", "predicted",
                            "peak act (meas)", "peak act (pred)"));
  for (size_t r = 0; r < s.measured_bubble_per_rank.size(); ++r) {
    const bool pred = r < s.predicted_bubble_per_rank.size();
    out.push_back(
        fmt::format("{:<6} {:>9.1f}% {:>10} {:>16} {:>16}", r, 100 * s.measured_bubble_per_rank[r],
                    pred ? fmt::format("{:.1f}%", 100 * s.predicted_bubble_per_rank[r]) : "-",
                    human_bytes(s.peak_stash_bytes_per_rank[r]),
                    pred ? human_bytes(s.predicted_peak_bytes_per_rank[r]) : "-"));
  }
  if (s.final_val_loss >= 0)
    out.push_back(fmt::format("final validation loss {:.4f}", s.final_val_loss));
  return out;
}

std::string metrics_line(const StepRecord& rec) {
  nlohmann::json j = {{"step", rec.step + 1},
                      {"loss", rec.loss},
                      {"grad_norm", rec.grad_norm},
                      {"lr", rec.lr},
                      {"tokens_per_s", rec.tokens_per_s},
                      {"step_time_s", rec.wall},
                      {"bubble_ratio", rec.bubble.ratio},
                      {"makespan_s", rec.bubble.window},
                      {"data_wait_s", median(rec.data_wait)}};
  if (rec.val_loss >= 0) j["val_loss"] = rec.val_loss;
  return j.dump();
}

namespace {

// " | 0.105 TFLOP/s/rank (48% of 0.219)": the mean over the pipeline ranks of the model FLOP/s
// in `wall` seconds, and of the hardware FLOP/s over the measured matmul rate. Empty with
// emulated compute.
std::string flops_field(const RunPlan& plan, double wall) {
  if (plan.flops.empty() || wall <= 0) return "";
  double model = 0, hardware = 0;
  for (const RankFlops& f : plan.flops) {
    model += f.model;
    hardware += f.model + f.recompute;
  }
  const double n = double(plan.flops.size());
  model /= n * wall;
  hardware /= n * wall;
  if (plan.matmul_flops <= 0) return fmt::format(" | {:.3f} TFLOP/s/rank", model / 1e12);
  return fmt::format(" | {:.3f} TFLOP/s/rank ({:.0f}% of {:.3f})", model / 1e12,
                     100 * hardware / plan.matmul_flops, plan.matmul_flops / 1e12);
}

}  // namespace

std::string step_line(const RunPlan& plan, const StepRecord& rec, int64_t first_step,
                      double elapsed_s) {
  const int64_t n = plan.opt.train_iters;
  const double eta = elapsed_s / double(rec.step + 1 - first_step) * double(n - rec.step - 1);
  return fmt::format(
      "step {:>5}/{} | loss {:.4f}{} | {:>8.0f} tok/s{} | bubble {:5.1f}% | step {:.1f} ms | "
      "ETA {:.0f}s",
      rec.step + 1, n, rec.loss,
      rec.val_loss >= 0 ? fmt::format(" | val {:.4f}", rec.val_loss) : std::string(),
      rec.tokens_per_s, flops_field(plan, rec.wall), 100 * rec.bubble.ratio, 1e3 * rec.wall, eta);
}

}  // namespace tightpipe::train_internal
