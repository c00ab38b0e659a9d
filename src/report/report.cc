// build_report: breakdown per step, prediction, gap, what-if; the terminal table; the files.
#include "tightpipe/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "report/report_internal.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/output_file.h"
#include "tightpipe/prof.h"

namespace tightpipe {

namespace report_internal {

std::string fmt_time(double t, const std::string& unit) {
  if (unit == "s") {
    const double a = std::abs(t);
    if (a >= 10) return fmt::format("{:.2f} s", t);
    if (a >= 1e-3 || a == 0) return fmt::format("{:.2f} ms", t * 1e3);
    return fmt::format("{:.1f} us", t * 1e6);
  }
  return fmt::format("{:.4g} {}", t, unit);
}

std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }

CostModel derive_costs(const CostModel& run_costs, const Schedule& run_sched,
                       const Schedule& target) {
  const int32_t P = run_sched.num_ranks;
  std::vector<StageCost> totals(P, scale_stage_cost(StageCost{}, 0.0));
  for (int32_t s = 0; s < run_sched.num_stages; ++s)
    add_stage_cost(totals[run_sched.rank_of(s)], run_costs.stage(s));
  const double v = target.chunks();
  std::vector<StageCost> out(target.num_stages);
  for (int32_t s = 0; s < target.num_stages; ++s)
    out[s] = scale_stage_cost(totals[target.rank_of(s)], 1 / v);
  return CostModel(out, run_costs.link(), run_costs.time_unit(),
                   "derived from " + run_costs.source());
}

Result<std::pair<Schedule, CostModel>> what_if_schedule(const WhatIfSpec& w, int32_t p, int32_t m,
                                                        const CandidateCosts& costs_for) {
  const bool is_auto = is_auto_schedule_name(w.name);
  const std::string shape_name = is_auto ? auto_schedule_counterpart(w.name) : w.name;
  GeneratorOptions go;
  go.ranks = p;
  go.microbatches = m;
  const GeneratorInfo* g = find_generator(shape_name);
  go.chunks = is_auto                    ? auto_schedule_chunks(w.name)
              : w.chunks > 0             ? w.chunks
              : g && g->fixed_chunks > 0 ? g->fixed_chunks
                                         : 1;
  TP_ASSIGN_OR_RETURN(Schedule shape, generate_schedule(shape_name, go));
  TP_ASSIGN_OR_RETURN(Schedule lowered, lower(shape));
  if (lowered.directions > 1) {
    // DualPipe: the costs of its p model stages (one direction's shape), the same for both
    // copies of each (expand_to_directions, cost_model.h).
    if (w.auto_layout) {
      return Status::invalid_argument(fmt::format(
          "--what-if {}: @auto is not yet chosen for schedules of {} directions; hint: drop "
          "@auto",
          w.label(), lowered.directions));
    }
    Schedule one = lowered;
    one.directions = 1;
    one.num_stages = lowered.stages_per_direction();
    one.stage_to_rank.resize(one.num_stages);
    one.programs.assign(one.num_ranks, {});
    one.lowered = false;
    TP_ASSIGN_OR_RETURN(CostModel per_model_stage, costs_for(one));
    CostModel costs = expand_to_directions(per_model_stage, lowered);
    return std::pair{std::move(lowered), std::move(costs)};
  }
  TP_ASSIGN_OR_RETURN(CostModel costs, costs_for(lowered));
  if (is_auto) {
    TP_ASSIGN_OR_RETURN(Schedule built, build_auto_schedule(w.name, p, m, costs, {}));
    TP_ASSIGN_OR_RETURN(lowered, lower(built));
  }
  return std::pair{std::move(lowered), std::move(costs)};
}

Result<SimResult> simulate_what_if(const Schedule& lowered, const CostModel& costs,
                                   const SimOptions& sim) {
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(lowered, costs, sim));
  r.steady_state_step_time = r.makespan;
  if (r.optimizer_post_validation) {
    // Back-to-back steps (the engine's post-validated optimizer): the step is the period, and
    // the one-step bound from a common start does not bound it.
    TP_ASSIGN_OR_RETURN(SteadyState ss, steady_state_step_time(lowered, costs, sim));
    r.steady_state_step_time = ss.step_time;
    return r;
  }
  if (auto lb = lower_bound_for(lowered, costs, sim); lb.ok()) {
    TP_RETURN_IF_ERROR(attach_lower_bound(r, *lb, lowered.name));
  }
  return r;
}

void add_lower_bound_json(nlohmann::ordered_json& o, const WhatIfBound& b) {
  o["lower_bound_makespan"] = b.lower_bound;
  o["lower_bound_span"] = b.lower_bound_span;
  o["lower_bound_memory_limit"] = b.memory_limit;
  o["gap_to_lower_bound"] = lower_bound_gap(b.makespan, b.lower_bound);
  o["gap_to_lower_bound_span"] = lower_bound_gap(b.max_span, b.lower_bound_span);
}

}  // namespace report_internal

using report_internal::derive_costs;
using report_internal::fmt_time;
using report_internal::pct;

const StepBreakdown* Report::shown() const {
  for (const auto& s : steps)
    if (s.step == shown_step) return &s;
  return nullptr;
}

std::string WhatIfSpec::label() const {
  std::string l = chunks > 0 ? fmt::format("{}:{}", name, chunks) : name;
  return auto_layout ? l + "@auto" : l;
}

Result<std::vector<WhatIfSpec>> parse_what_if(std::string_view text) {
  std::vector<WhatIfSpec> out;
  for (const std::string& raw : split(text, ',')) {
    std::string item(trim(raw));
    if (item.empty()) continue;
    WhatIfSpec w;
    if (const size_t at = item.find('@'); at != std::string::npos) {
      if (item.substr(at) != "@auto") {
        return Status::invalid_argument(fmt::format(
            "--what-if '{}': unknown layout '{}'; hint: '@auto' (the split auto chooses), or no "
            "suffix for the even split",
            item, item.substr(at)));
      }
      w.auto_layout = true;
      item.resize(at);
    }
    if (is_auto_schedule_name(item)) {
      w.name = auto_schedule_name(item);
    } else {  // the registry's names, through the one parser of schedule lists
      TP_ASSIGN_OR_RETURN(std::vector<ScheduleSpec> specs, parse_schedule_specs("--what-if", item));
      w.name = specs.at(0).name;
      w.chunks = specs.at(0).chunks;
    }
    out.push_back(std::move(w));
  }
  if (out.empty()) {
    return Status::invalid_argument(fmt::format(
        "--what-if '{}': names no schedule; hint: e.g. --what-if zb-h1,zb-v,zb-v-auto@auto", text));
  }
  return out;
}

namespace {

// The run's costs from its timelines when costs.json is missing: calibrate() (cost_model.h) over
// the measured steps, the trainer's own rule.
Result<CostModel> costs_from_timelines(const std::map<int32_t, Timeline>& per_step,
                                       const std::vector<int32_t>& steps, const Schedule& lowered) {
  CostSamples samples;
  for (int32_t k : steps) {
    auto it = per_step.find(k);
    if (it != per_step.end()) samples.add_step(it->second);
  }
  CalibrationOptions co;
  co.source = "measured timelines";
  return calibrate(samples, lowered, co);
}

std::vector<StageLayers> stage_layers(const std::vector<nn::StageSpec>& specs) {
  std::vector<StageLayers> out;
  for (const nn::StageSpec& s : specs) out.push_back({s.has_embedding, s.num_layers, s.has_head});
  return out;
}

// The cost table of a candidate schedule. When the run's model and layer split are known: the
// run's stage costs per layer kind (embedding, block, head: fit_layer_costs), summed over the
// layers each candidate stage would hold with the split `train --schedule` uses (the balanced
// default). Otherwise each rank's total spread evenly over its new chunks. `layout` says which.
// The simulator's comm mode as the run ran.
SimOptions run_sim_options(const RunData& run) {
  SimOptions so;
  so.comm_mode = run.overlap_p2p ? CommMode::kOverlap : CommMode::kBlocking;
  // The replicas' gradient all-reduce as the run reduced.
  so.data_parallel =
      trainer_data_parallel(run.data_parallel_size, run.overlap_grad_reduce, run.bucket_size);
  return so;
}

// The candidate's costs: per layer kind from its own layer split (the even one `train` takes, or
// with `auto_layout` the one choose_layer_split() picks) when the run's model is known; else each
// rank's measured cost spread evenly over the candidate's chunks ("even").
Result<CostModel> candidate_costs(const RunData& run, const Schedule& target, bool auto_layout,
                                  std::string& layout) {
  if (run.model && !run.layout.empty()) {
    auto layers = run_layer_costs(run);
    auto split = nn::partition_layers(*run.model, target.num_stages, "");
    if (auto_layout && !layers.ok()) return layers.status();
    if (auto_layout && !split.ok()) return split.status();
    if (layers.ok() && split.ok()) {
      std::vector<StageLayers> chosen = stage_layers(*split);
      if (auto_layout) {
        LayerSplitOptions lo;
        lo.sim = run_sim_options(run);
        TP_ASSIGN_OR_RETURN(LayerSplit best,
                            choose_layer_split(*layers, target, run.model->num_layers, lo));
        chosen = std::move(best.stages);
      }
      std::vector<int> blocks;
      for (const StageLayers& l : chosen) blocks.push_back(l.blocks);
      layout = nn::layout_from_blocks(blocks);
      // The run's own stages: their measured costs as they are (a fit over more stages than
      // kinds would only approximate them).
      if (layout == run.layout && target.num_stages == run.costs->num_stages() &&
          target.stage_to_rank == run.schedule->stage_to_rank) {
        return *run.costs;
      }
      return cost_model_for_layout(*layers, chosen, layout);
    }
  }
  if (auto_layout) {
    return Status::invalid_argument(
        "@auto needs the run's model and layout (summary.json 'model', 'layout'); hint: a run "
        "of this version, or drop @auto");
  }
  layout = "even";
  return derive_costs(*run.costs, *run.schedule, target);
}

double max_peak(const SimResult& r) {
  double m = 0;
  for (const auto& x : r.ranks) m = std::max(m, x.peak_activation_bytes);
  return m;
}

// The run's events grouped by step. A step is complete when every present rank finished it (has
// its optimizer event or, for timelines without one, any event).
struct StepTimelines {
  std::map<int32_t, Timeline> per_step;       // step -> that step's events, one row per rank
  std::vector<int32_t> complete, incomplete;  // ascending
};

StepTimelines group_by_step(const RunData& run) {
  const int32_t P = run.num_ranks;
  StepTimelines out;
  std::map<int32_t, std::set<int32_t>> finished;
  for (int32_t r = 0; r < P; ++r) {
    if (!run.rank_present[r]) continue;
    for (const auto& e : run.ranks[r].events) {
      Timeline& tl = out.per_step[e.step];
      if (tl.ranks.empty()) {
        tl.ranks.resize(P);
        for (int32_t q = 0; q < P; ++q) tl.ranks[q].rank = q;
      }
      tl.ranks[r].events.push_back(e);
      if (e.kind == EventKind::kOptimizer) finished[e.step].insert(r);
    }
  }
  const bool any_optimizer = !finished.empty();
  for (const auto& [step, tl] : out.per_step) {
    bool complete = true;
    for (int32_t r = 0; r < P; ++r) {
      if (!run.rank_present[r]) continue;
      if (any_optimizer ? !finished[step].contains(r) : tl.ranks[r].events.empty())
        complete = false;
    }
    (complete ? out.complete : out.incomplete).push_back(step);
  }
  return out;
}

// The step drawn: the measured step whose time is closest to the median (-1 when none).
int32_t median_step(const std::vector<StepBreakdown>& steps, const BreakdownSummary& summary) {
  int32_t shown = -1;
  double best = 1e300;
  for (const auto& s : steps) {
    if (std::find(summary.steps.begin(), summary.steps.end(), s.step) == summary.steps.end())
      continue;
    const double d = std::abs(s.step_time - summary.step_time.median);
    if (d < best) {
      best = d;
      shown = s.step;
    }
  }
  return shown;
}

// One step's events as drawn (empty when the step is unknown). The optimizer is drawn from when
// every rank reached it: before that it is the all-reduce waiting for the slowest rank, counted as
// drain (as in the breakdown).
Timeline drawn_step(const std::map<int32_t, Timeline>& per_step, int32_t step) {
  const auto it = per_step.find(step);
  Timeline tl = it != per_step.end() ? it->second : Timeline();
  tl.time_unit = "s";
  double sync = 0;
  for (const auto& rt : tl.ranks)
    for (const auto& e : rt.events)
      if (e.kind == EventKind::kOptimizer) sync = std::max(sync, e.start);
  for (auto& rt : tl.ranks)
    for (auto& e : rt.events)
      if (e.kind == EventKind::kOptimizer) e.start = std::min(e.end, std::max(e.start, sync));
  return tl;
}

// When costs.json gave no cost table: calibrates one from the measured steps if the schedule is
// known and every rank's timeline is there (a warning says no link latency is known), else the
// reason goes to rep.prediction_error.
void calibrate_missing_costs(const std::map<int32_t, Timeline>& per_step, Report& rep) {
  RunData& run = rep.run;
  const auto present = std::count(run.rank_present.begin(), run.rank_present.end(), true);
  if (run.costs || !run.schedule || present != run.num_ranks) return;
  auto c = costs_from_timelines(per_step, rep.summary.steps, *run.schedule);
  if (c.ok()) {
    run.costs = std::move(*c);
    run.warnings.push_back("costs derived from the timelines (no link latency known)");
  } else {
    rep.prediction_error = c.status().message();
  }
}

// Prediction: the same lowered schedule under the run's costs. Fills rep.predicted and its
// breakdown, or says why not in rep.prediction_error.
void predict(Report& rep) {
  const RunData& run = rep.run;
  if (!run.schedule) {
    rep.prediction_error = "schedule.csv missing or unreadable";
    return;
  }
  if (!run.costs) {
    if (rep.prediction_error.empty()) rep.prediction_error = "no cost table (costs.json missing)";
    return;
  }
  if (Status st = run.costs->covers(*run.schedule); !st.ok()) {
    rep.prediction_error = st.message();
    return;
  }
  auto sim = simulate(*run.schedule, *run.costs, run_sim_options(run));
  if (!sim.ok()) {
    rep.prediction_error = sim.status().message();
    return;
  }
  rep.has_prediction = true;
  rep.predicted = std::move(*sim);
  rep.predicted_breakdown =
      breakdown_step(rep.predicted.timeline, run.num_ranks, 0, {run.overlap_p2p});
}

// Rank r's median end of its last compute over the measured steps.
double median_last_compute(const Report& rep, int32_t r) {
  const std::vector<int32_t>& measured = rep.summary.steps;
  std::vector<double> last;
  for (const auto& s : rep.steps)
    if (std::find(measured.begin(), measured.end(), s.step) != measured.end())
      last.push_back(s.ranks[r].last_compute);
  return median(last);
}

// Rank r's categories (busy kinds, then idle causes) whose measured median exceeds the prediction.
std::vector<GapItem> rank_gap_items(const Report& rep, int32_t r) {
  const std::string& unit = rep.predicted.time_unit;
  const RankBreakdown& pred = rep.predicted_breakdown.ranks[r];
  std::vector<GapItem> items;
  for (int k = 0; k < kNumBusyKinds; ++k) {
    const double m = rep.summary.rank_busy[r][k], p = pred.busy[k];
    if (m - p <= 0) continue;
    const std::string name(busy_kind_name(static_cast<BusyKind>(k)));
    items.push_back({r, name, m - p,
                     fmt::format("rank {}: {} took {} more than predicted ({} vs {})", r, name,
                                 fmt_time(m - p, unit), fmt_time(m, unit), fmt_time(p, unit))});
  }
  for (int c = 0; c < kNumIdleCauses; ++c) {
    const double m = rep.summary.rank_idle[r][c], p = pred.idle[c];
    if (m - p <= 0) continue;
    const std::string name(idle_cause_name(static_cast<IdleCause>(c)));
    items.push_back(
        {r, name, m - p,
         fmt::format("rank {}: {} of {} not in the prediction ({} measured, {} "
                     "predicted)",
                     r, fmt_time(m - p, unit), name, fmt_time(m, unit), fmt_time(p, unit))});
  }
  return items;
}

// The gap between the measured run and its prediction: rep.gap_total, rep.gap_per_rank and the
// largest contributors (at most 6, each at least 0.5% of the step).
// REQUIRES: rep.has_prediction.
void explain_gap(Report& rep) {
  const int32_t P = rep.run.num_ranks;
  rep.gap_total = rep.summary.step_time.median - rep.predicted.makespan;
  rep.gap_per_rank.assign(P, 0);
  std::vector<GapItem> items;
  for (int32_t r = 0; r < P; ++r) {
    if (!rep.run.rank_present[r]) continue;
    rep.gap_per_rank[r] =
        median_last_compute(rep, r) - rep.predicted_breakdown.ranks[r].last_compute;
    for (GapItem& it : rank_gap_items(rep, r)) items.push_back(std::move(it));
  }
  std::sort(items.begin(), items.end(),
            [](const GapItem& a, const GapItem& b) { return a.delta > b.delta; });
  const double floor = 0.005 * rep.summary.step_time.median;
  for (const auto& it : items) {
    if (rep.gap_contributors.size() >= 6 || it.delta < floor) break;
    rep.gap_contributors.push_back(it);
  }
}

// The what-if's lowered schedule and its costs (report_internal::what_if_schedule), the costs
// from candidate_costs().
Result<std::pair<Schedule, CostModel>> what_if_schedule(const WhatIfSpec& w, const RunData& run,
                                                        std::string& layout) {
  return report_internal::what_if_schedule(
      w, run.num_ranks, run.schedule->num_microbatches, [&](const Schedule& lowered) {
        return candidate_costs(run, lowered, w.auto_layout, layout);
      });
}

// What-if: the run's costs, per rank, re-simulated under another schedule with the same p and m.
WhatIfResult what_if(const WhatIfSpec& w, const Report& rep, Engine engine) {
  WhatIfResult res;
  res.label = w.label();
  if (!rep.has_prediction) {
    res.error = "no prediction for the run itself: " + rep.prediction_error;
    return res;
  }
  const RunData& run = rep.run;
  const int32_t P = run.num_ranks;
  auto built = what_if_schedule(w, run, res.layout);
  if (!built.ok()) {
    res.error = built.status().message();
    return res;
  }
  const auto& [lowered, derived] = *built;
  res.chunks = lowered.chunks();
  SimOptions so = run_sim_options(run);
  so.record_timeline = false;
  so.engine = engine;
  auto sim = report_internal::simulate_what_if(lowered, derived, so);
  if (!sim.ok()) {
    res.error = sim.status().message();
    return res;
  }
  res.engine_profile = sim->engine_description;
  res.makespan = sim->steady_state_step_time;
  res.bubble_ratio = sim->bubble_ratio;
  res.span_bubble_ratio = sim->span_bubble_ratio;
  res.step_saving = rep.predicted.makespan - res.makespan;
  res.bubble_saving = rep.predicted.bubble_ratio - sim->bubble_ratio;
  const double steps = static_cast<double>(std::max<size_t>(run.metrics.size(), rep.steps.size()));
  res.gpu_hours_saved = run.costs->time_unit() == "s" ? steps * res.step_saving * P / 3600.0 : 0;
  res.peak_act_bytes = max_peak(*sim);
  if (sim->optimizer_post_validation) {
    for (const RankSimStats& st : sim->ranks)
      res.kept_copy_bytes = std::max(res.kept_copy_bytes, st.static_bytes);
  }
  res.peak_act_delta = res.peak_act_bytes - max_peak(rep.predicted);
  res.max_span = sim->max_span;
  res.lower_bound = sim->lower_bound_makespan;  // 0 without a bound (has_lower_bound false)
  res.lower_bound_span = sim->lower_bound_span;
  res.lower_bound_memory = sim->lower_bound_memory;
  return res;
}

}  // namespace

Result<LayerCosts> run_layer_costs(const RunData& run) {
  auto missing = [&](const std::string& what) {
    return Status::failed_precondition(fmt::format(
        "run directory '{}': {}; hint: use a directory `tightpipe train --out-dir` wrote at the "
        "end of a run (summary.json and costs.json)",
        run.dir, what));
  };
  if (!run.costs) return missing("no cost table (costs.json missing or unreadable)");
  if (!run.model || run.layout.empty()) {
    return missing("summary.json names no model and layer split ('model', 'layout')");
  }
  auto split = nn::partition_layers(*run.model, run.costs->num_stages(), run.layout);
  if (!split.ok()) return missing(std::string(split.status().message()));
  auto layers = fit_layer_costs(*run.costs, stage_layers(*split));
  if (!layers.ok()) return layers.status().with_context("run directory '" + run.dir + "'");
  return layers;
}

Result<Report> build_report(const std::string& run_dir, const ReportOptions& options) {
  Report rep;
  TP_ASSIGN_OR_RETURN(rep.run, load_run(run_dir));
  RunData& run = rep.run;

  // The breakdown of every complete step.
  const StepTimelines by_step = group_by_step(run);
  for (int32_t k : by_step.complete) {
    rep.steps.push_back(
        breakdown_step(by_step.per_step.at(k), run.num_ranks, k, {run.overlap_p2p}));
  }
  if (!by_step.incomplete.empty()) {
    std::vector<std::string> s;
    for (int32_t k : by_step.incomplete) s.push_back(std::to_string(k));
    run.warnings.push_back(fmt::format(
        "step(s) {} are incomplete on some rank (truncated timeline?): left out", join(s, ", ")));
  }
  if (rep.steps.empty()) {
    return Status::corruption(fmt::format(
        "run directory '{}': no complete step in the rank timelines; hint: the run may have died "
        "in its first step",
        run_dir));
  }
  rep.summary = summarize_steps(rep.steps, run.warmup_steps_excluded);
  rep.shown_step = median_step(rep.steps, rep.summary);
  rep.measured = drawn_step(by_step.per_step, rep.shown_step);

  // Predicted vs measured, then the run's costs under other schedules.
  calibrate_missing_costs(by_step.per_step, rep);
  predict(rep);
  if (rep.has_prediction) explain_gap(rep);
  for (const WhatIfSpec& w : options.what_if)
    rep.what_ifs.push_back(what_if(w, rep, options.engine));
  return rep;
}

namespace {

// The run, its steps, the step time, the bubble and its causes.
std::string text_summary(const Report& rep) {
  const RunData& run = rep.run;
  const auto& sm = rep.summary;
  std::string out;
  out += fmt::format("tightpipe report: {}\n", run.dir);
  out += fmt::format("run: {}, p={}, v={}, m={}{}{}\n",
                     run.schedule_name.empty() ? "?" : run.schedule_name, run.num_ranks, run.vpp,
                     run.microbatches, run.transport.empty() ? "" : ", " + run.transport,
                     run.compute.empty() ? "" : ", " + run.compute + " compute");
  std::vector<std::string> missing;
  for (int32_t r = 0; r < run.num_ranks; ++r)
    if (!run.rank_present[r]) missing.push_back(std::to_string(r));
  if (!missing.empty())
    out += fmt::format("MISSING RANKS: {} (see warnings)\n", join(missing, ", "));
  if (run.oversubscribed) {
    out += fmt::format(
        "OVERSUBSCRIBED: {} computing ranks ({} busy threads with the loaders) on {} "
        "cores: the ranks took turns on the cores; the time a ready rank waited for "
        "one is 'cpu wait', and the bubble is the machine's, not the schedule's\n",
        run.rank_threads, run.busy_threads, run.cores);
  }
  out += fmt::format("steps: {} measured, {} warm-up left out; shown step {}\n", sm.steps.size(),
                     sm.warmup_steps.size(), rep.shown_step);
  out += fmt::format("step time: median {} (p10 {}, p90 {}, min {}, max {})\n",
                     fmt_time(sm.step_time.median, "s"), fmt_time(sm.step_time.p10, "s"),
                     fmt_time(sm.step_time.p90, "s"), fmt_time(sm.step_time.min, "s"),
                     fmt_time(sm.step_time.max, "s"));
  out += fmt::format("bubble: measured {} (p10 {}, p90 {})", pct(sm.bubble_ratio.median),
                     pct(sm.bubble_ratio.p10), pct(sm.bubble_ratio.p90));
  if (rep.has_prediction) {
    out += fmt::format(", predicted {} (simulator, measured costs)\n",
                       pct(rep.predicted.bubble_ratio));
  } else {
    out += fmt::format("; no prediction: {}\n", rep.prediction_error);
  }
  // The second measure (docs/bubble.md): each rank timed from its first to its last compute.
  out += fmt::format("span bubble: measured {} (longest rank span {})",
                     pct(sm.span_bubble_ratio.median), fmt_time(sm.max_span.median, "s"));
  if (rep.has_prediction) {
    out += fmt::format(", predicted {} (longest span {})", pct(rep.predicted.span_bubble_ratio),
                       fmt_time(rep.predicted.max_span, rep.predicted.time_unit));
  }
  out +=
      "\n  (bubble: every rank from the step start to the step end; span bubble: each rank from "
      "its first to its last F/I/W/B, the zero-bubble paper's measure)\n";
  out += "idle by cause (share of P x step time):";
  for (int c = 0; c < kNumIdleCauses; ++c)
    out += fmt::format(" {} {}{}", idle_cause_name(static_cast<IdleCause>(c)),
                       pct(sm.cause_ratio[c].median), c + 1 < kNumIdleCauses ? "," : "");
  return out + "\n";
}

// Per rank: the medians of every busy kind and idle cause in ms, the bubble, the prediction.
std::string text_rank_table(const Report& rep) {
  const RunData& run = rep.run;
  const auto& sm = rep.summary;
  std::string out = "\nper rank (median over measured steps, ms):\n";
  out += fmt::format(
      "{:<5} {:>8} {:>8} {:>8} {:>8} {:>8} | {:>7} {:>7} {:>7} {:>8} {:>7} {:>7} {:>7} {:>7} | "
      "{:>7}",
      "rank", "F", "I", "W", "B", "optim", "fill", "drain", "dep", "exp.comm", "data", "cpu",
      "exp.ar", "other", "bubble");
  if (rep.has_prediction) out += fmt::format(" {:>7} {:>9}", "pred", "gap");
  out += "\n";
  for (int32_t r = 0; r < run.num_ranks; ++r) {
    if (!run.rank_present[r]) {
      out += fmt::format("{:<5} missing\n", r);
      continue;
    }
    out += fmt::format("{:<5}", r);
    for (int k = 0; k < kNumBusyKinds; ++k)
      out += fmt::format(" {:>8.2f}", 1e3 * sm.rank_busy[r][k]);
    out += " |";
    for (int c = 0; c < kNumIdleCauses; ++c)
      out += fmt::format(" {:>{}.2f}", 1e3 * sm.rank_idle[r][c], c == 3 ? 8 : 7);
    out += fmt::format(" | {:>7}", pct(sm.rank_bubble_ratio[r]));
    if (rep.has_prediction) {
      out += fmt::format(" {:>7} {:>9}", pct(rep.predicted.ranks[r].bubble_ratio),
                         fmt_time(rep.gap_per_rank[r], rep.predicted.time_unit));
    }
    out += "\n";
  }
  return out;
}

// Predicted vs measured step time and the largest contributors to the gap.
std::string text_gap(const Report& rep) {
  if (!rep.has_prediction) return "";
  std::string out =
      fmt::format("\npredicted step {} vs measured {}: gap {}\n",
                  fmt_time(rep.predicted.makespan, rep.predicted.time_unit),
                  fmt_time(rep.summary.step_time.median, "s"), fmt_time(rep.gap_total, "s"));
  if (!rep.gap_contributors.empty()) out += "largest contributors to the gap:\n";
  for (const auto& g : rep.gap_contributors) out += "  " + g.text + "\n";
  return out;
}

std::string text_what_if(const Report& rep) {
  if (rep.what_ifs.empty()) return "";
  const std::string& unit = rep.predicted.time_unit;
  std::string out =
      "\nwhat-if (the run's measured costs per layer kind, re-simulated on each schedule's "
      "split):\n";
  out += fmt::format("{:<16} {:>3} {:>11} {:>8} {:>8} {:>12} {:>12} {:>14} {:>14}  {}\n",
                     "schedule", "v", "step", "bubble", "vs bound", "saves/step", "bubble -",
                     "GPU-h saved", "peak act (+)", "layout");
  for (const auto& w : rep.what_ifs) {
    if (!w.error.empty()) {
      out += fmt::format("{:<16} error: {}\n", w.label, w.error.substr(0, w.error.find('\n')));
      continue;
    }
    out += fmt::format(
        "{:<16} {:>3} {:>11} {:>8} {:>8} {:>12} {:>12} {:>14.4g} {:>14}  {}\n", w.label, w.chunks,
        fmt_time(w.makespan, unit), pct(w.bubble_ratio),
        w.lower_bound > 0 ? "+" + pct(std::max(0.0, lower_bound_gap(w.makespan, w.lower_bound)))
                          : std::string("-"),
        fmt_time(w.step_saving, unit), fmt::format("{:.1f} pp", 100 * w.bubble_saving),
        w.gpu_hours_saved,
        fmt::format("{} ({}{})", human_bytes(w.peak_act_bytes), w.peak_act_delta >= 0 ? "+" : "-",
                    human_bytes(std::abs(w.peak_act_delta))),
        w.layout);
  }
  out +=
      "vs bound: the step above the lower bound of the schedule's shape at its memory "
      "(docs/cost_model.md, \"Lower bound\")\n";
  std::vector<std::string> seen;  // the engine profile of every row, once each
  for (const auto& w : rep.what_ifs) {
    if (w.engine_profile.empty() ||
        std::find(seen.begin(), seen.end(), w.engine_profile) != seen.end()) {
      continue;
    }
    seen.push_back(w.engine_profile);
    out += "engine profile: " + w.engine_profile + "\n";
  }
  for (const auto& w : rep.what_ifs) {
    if (w.kept_copy_bytes > 0) {
      out += fmt::format("{}: post-validated, its kept copy adds {} on the fullest rank\n", w.label,
                         human_bytes(w.kept_copy_bytes));
    }
  }
  return out;
}

// report.json's entry for rank r.
nlohmann::ordered_json rank_json(const Report& rep, int32_t r) {
  const BreakdownSummary& sm = rep.summary;
  nlohmann::ordered_json o;
  o["rank"] = r;
  o["present"] = static_cast<bool>(rep.run.rank_present[r]);
  if (!rep.run.rank_present[r]) return o;
  o["measured_bubble_ratio"] = sm.rank_bubble_ratio[r];
  o["measured_span_bubble_ratio"] = sm.rank_span_bubble_ratio[r];
  if (rep.has_prediction) {
    o["predicted_bubble_ratio"] = rep.predicted.ranks[r].bubble_ratio;
    o["predicted_span_bubble_ratio"] = rep.predicted.ranks[r].span_bubble_ratio;
    o["gap_last_compute"] = rep.gap_per_rank[r];
  }
  nlohmann::ordered_json busy, idle;
  for (int k = 0; k < kNumBusyKinds; ++k)
    busy[std::string(busy_kind_name(static_cast<BusyKind>(k)))] = sm.rank_busy[r][k];
  for (int c = 0; c < kNumIdleCauses; ++c)
    idle[std::string(idle_cause_name(static_cast<IdleCause>(c)))] = sm.rank_idle[r][c];
  o["busy_s"] = busy;
  o["idle_s"] = idle;
  return o;
}

// report.json's entry for one what-if schedule.
nlohmann::ordered_json what_if_json(const WhatIfResult& w) {
  nlohmann::ordered_json o = {{"schedule", w.label}, {"vpp", w.chunks}};
  if (!w.error.empty()) {
    o["error"] = w.error;
  } else {
    o["predicted_bubble_ratio"] = w.bubble_ratio;
    o["predicted_span_bubble_ratio"] = w.span_bubble_ratio;
    o["predicted_step_time"] = w.makespan;
    o["engine_profile"] = w.engine_profile;
    o["step_saving"] = w.step_saving;
    o["gpu_hours_saved"] = w.gpu_hours_saved;
    o["peak_activation_bytes"] = w.peak_act_bytes;
    o["kept_copy_bytes"] = w.kept_copy_bytes;
    report_internal::add_lower_bound_json(o, {.makespan = w.makespan,
                                              .max_span = w.max_span,
                                              .lower_bound = w.lower_bound,
                                              .lower_bound_span = w.lower_bound_span,
                                              .memory_limit = w.lower_bound_memory});
    o["layout"] = w.layout;
  }
  return o;
}

}  // namespace

std::string format_report_text(const Report& rep) {
  std::string out = text_summary(rep) + text_rank_table(rep) + text_gap(rep) + text_what_if(rep);
  if (!rep.run.warnings.empty()) {
    out += "\nwarnings:\n";
    for (const auto& w : rep.run.warnings) out += "  " + w + "\n";
  }
  return out;
}

std::string report_json(const Report& rep) {
  using nlohmann::ordered_json;
  const BreakdownSummary& sm = rep.summary;
  ordered_json j;
  j["run_dir"] = rep.run.dir;
  j["schedule"] = rep.run.schedule_name;
  j["pp"] = rep.run.num_ranks;
  j["bubble_definition"] = "docs/bubble.md";
  j["bubble_measure"] = "makespan";
  j["measured_steps"] = sm.steps;
  j["measured_bubble_ratio"] = sm.bubble_ratio.median;
  j["measured_bubble_ratio_per_rank"] = sm.rank_bubble_ratio;
  j["measured_span_bubble_ratio"] = sm.span_bubble_ratio.median;
  j["measured_span_bubble_ratio_per_rank"] = sm.rank_span_bubble_ratio;
  j["measured_max_span_s"] = sm.max_span.median;
  j["step_time_s"] = sm.step_time.median;
  if (rep.has_prediction) {
    j["predicted_bubble_ratio"] = rep.predicted.bubble_ratio;
    std::vector<double> per_rank, span_per_rank;
    for (const auto& r : rep.predicted.ranks) {
      per_rank.push_back(r.bubble_ratio);
      span_per_rank.push_back(r.span_bubble_ratio);
    }
    j["predicted_bubble_ratio_per_rank"] = per_rank;
    j["predicted_span_bubble_ratio"] = rep.predicted.span_bubble_ratio;
    j["predicted_span_bubble_ratio_per_rank"] = span_per_rank;
    j["predicted_max_span"] = rep.predicted.max_span;
    j["predicted_step_time"] = rep.predicted.makespan;
    j["gap_bubble_ratio"] = sm.bubble_ratio.median - rep.predicted.bubble_ratio;
    j["gap_step_time"] = rep.gap_total;
    j["time_unit"] = rep.predicted.time_unit;
  } else {
    j["predicted_bubble_ratio"] = nullptr;
    j["predicted_span_bubble_ratio"] = nullptr;
    j["prediction_error"] = rep.prediction_error;
  }
  ordered_json causes;
  for (int c = 0; c < kNumIdleCauses; ++c)
    causes[std::string(idle_cause_name(static_cast<IdleCause>(c)))] = sm.cause_ratio[c].median;
  j["idle_ratio_by_cause"] = causes;
  ordered_json ranks = ordered_json::array();
  for (int32_t r = 0; r < rep.run.num_ranks; ++r) ranks.push_back(rank_json(rep, r));
  j["per_rank"] = ranks;
  j["cpu"] = {{"cores", rep.run.cores},
              {"rank_threads", rep.run.rank_threads},
              {"busy_threads", rep.run.busy_threads},
              {"oversubscribed", rep.run.oversubscribed}};
  ordered_json gaps = ordered_json::array();
  for (const auto& g : rep.gap_contributors)
    gaps.push_back(
        {{"rank", g.rank}, {"category", g.category}, {"delta", g.delta}, {"text", g.text}});
  j["gap_contributors"] = gaps;
  ordered_json wi = ordered_json::array();
  for (const auto& w : rep.what_ifs) wi.push_back(what_if_json(w));
  j["what_if"] = wi;
  return j.dump(2) + "\n";
}

Status check_report_outputs(const std::string& out_dir, const std::vector<std::string>& inputs) {
  for (const char* name : {kReportHtmlFile, kReportJsonFile, kReportTraceFile, kReportCostsFile}) {
    TP_RETURN_IF_ERROR(check_output_is_not_input(out_dir + "/" + name, inputs, "--out DIR"));
  }
  return OkStatus();
}

Status write_report(const Report& rep, const std::string& out_dir) {
  // The run directory's files (all but an earlier report's) are inputs: none may be written over.
  std::vector<std::string> inputs;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(rep.run.dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != kReportHtmlFile && name != kReportJsonFile && name != kReportTraceFile &&
        name != kReportCostsFile)
      inputs.push_back(it->path().string());
  }
  TP_RETURN_IF_ERROR(check_report_outputs(out_dir, inputs));
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return Status::io_error(fmt::format("--out '{}': {}", out_dir, ec.message()));
  TP_RETURN_IF_ERROR(write_file(out_dir + "/" + kReportHtmlFile, report_html(rep)));
  TP_RETURN_IF_ERROR(write_file(out_dir + "/" + kReportJsonFile, report_json(rep)));
  // The trace: every complete step one after another (each step's origin moved to the end of the
  // previous one), one process per rank.
  Timeline all;
  all.time_unit = "s";
  all.ranks.resize(rep.run.num_ranks);
  for (int32_t r = 0; r < rep.run.num_ranks; ++r) all.ranks[r].rank = r;
  std::map<int32_t, double> offset;
  double t = 0;
  for (const auto& s : rep.steps) {
    offset[s.step] = t;
    t += s.step_time;
  }
  for (int32_t r = 0; r < rep.run.num_ranks; ++r) {
    for (const auto& e : rep.run.ranks[r].events) {
      auto it = offset.find(e.step);
      if (it == offset.end()) continue;
      TimelineEvent x = e;
      x.start += it->second;
      x.end += it->second;
      all.ranks[r].events.push_back(std::move(x));
    }
  }
  TP_RETURN_IF_ERROR(write_chrome_trace(out_dir + "/" + kReportTraceFile, all));
  if (rep.run.costs) {
    TP_RETURN_IF_ERROR(
        write_file(out_dir + "/" + kReportCostsFile, cost_table_to_json(*rep.run.costs)));
  }
  return OkStatus();
}

}  // namespace tightpipe
