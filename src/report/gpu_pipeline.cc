// The pipeline analysis of GPU traces (gpu_trace.h; docs/gpu_trace_pipeline.md): the schedule the
// user says ran, costs fitted to the traces (from PP:<action> or forward/backward annotations, or
// from the kernels alone), that schedule simulated with them (predicted against measured) and the
// what-ifs, all through the simulator and the calibration our own runs use.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "report/gpu_internal.h"
#include "report/report_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/prof.h"
#include "tightpipe/report.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe {

namespace {

// The flag a spec field comes from when --pp is missing (the first one set), or "".
std::string_view first_pipeline_flag(const GpuPipelineSpec& s) {
  if (!s.schedule.empty()) return "--schedule";
  if (!s.schedule_file.empty()) return "--schedule-file";
  if (s.vpp != 0) return "--vpp";
  if (s.microbatches != 0) return "--num-microbatches";
  if (!s.what_if.empty()) return "--what-if";
  return "";
}

// The schedule the spec says ran, compute-only: generated (--schedule, --num-microbatches,
// --vpp) or read from --schedule-file. The one place both validate() and the analysis get it.
// REQUIRES: spec.pp >= 1 and exactly one of schedule, schedule_file set.
Result<Schedule> schedule_that_ran(const GpuPipelineSpec& spec) {
  if (!spec.schedule_file.empty()) {
    auto loaded = load_schedule_file(spec.schedule_file);
    if (!loaded.ok()) {
      const Status st = loaded.status().with_context("--schedule-file");
      if (st.message().find("hint:") != std::string::npos) return st;
      return Status(st.code(),
                    st.message() +
                        "; hint: the schedule that ran as a CSV in PyTorch's layout (one row "
                        "per rank), e.g. from `tightpipe schedule NAME --format csv`");
    }
    Schedule s = loaded->lowered ? compute_only(*loaded) : std::move(*loaded);
    const std::string file = printable(spec.schedule_file);
    if (s.num_ranks != spec.pp) {
      return Status::invalid_argument(fmt::format(
          "--schedule-file '{}': holds {} rank(s) but --pp is {}; hint: the file's rows are the "
          "pipeline ranks, one per trace: give --pp {} or the schedule of this run",
          file, s.num_ranks, spec.pp, s.num_ranks));
    }
    if (spec.microbatches > 0 && spec.microbatches != s.num_microbatches) {
      return Status::invalid_argument(fmt::format(
          "--num-microbatches {}: --schedule-file '{}' runs {} microbatch(es); hint: drop "
          "--num-microbatches (the file says it)",
          spec.microbatches, file, s.num_microbatches));
    }
    if (spec.vpp > 0 && spec.vpp != s.chunks()) {
      return Status::invalid_argument(
          fmt::format("--vpp {}: --schedule-file '{}' has {} chunk(s) per rank; hint: drop --vpp "
                      "(the file says it)",
                      spec.vpp, file, s.chunks()));
    }
    return s;
  }
  const GeneratorInfo* g = find_generator(spec.schedule);
  if (g == nullptr) {
    return Status::invalid_argument(fmt::format(
        "--schedule '{}': not a schedule generator; hint: one of {}; a schedule built from costs "
        "(zb-auto, zb-v-auto) or your own: write it as a CSV (one row per rank) and give "
        "--schedule-file",
        printable(spec.schedule), generator_names()));
  }
  if (spec.vpp > 0 && g->fixed_chunks > 0 && spec.vpp != g->fixed_chunks) {
    return Status::invalid_argument(fmt::format(
        "--vpp {}: {} runs {} chunk(s) per rank; hint: drop --vpp, or name the schedule that ran "
        "with {} chunks (e.g. interleaved)",
        spec.vpp, g->name, g->fixed_chunks, spec.vpp));
  }
  GeneratorOptions go;
  go.ranks = spec.pp;
  go.microbatches = spec.microbatches;
  go.chunks = spec.vpp > 0 ? spec.vpp : g->fixed_chunks > 0 ? g->fixed_chunks : 1;
  return generate_schedule(g->name, go);
}

Result<std::vector<WhatIfSpec>> what_if_specs(const GpuPipelineSpec& spec) {
  TP_ASSIGN_OR_RETURN(std::vector<WhatIfSpec> specs, parse_what_if(join(spec.what_if, ",")));
  for (const WhatIfSpec& w : specs) {
    if (w.auto_layout) {
      return Status::invalid_argument(fmt::format(
          "--what-if '{}': @auto re-splits the model's layers, which a GPU trace does not "
          "describe; hint: drop @auto (each rank's fitted cost is spread evenly over its chunks)",
          printable(w.label())));
    }
  }
  return specs;
}

// ----- fitting ---------------------------------------------------------------------------------

// One sample: `seconds` of compute for one (stage, type), through calibrate()'s sample set.
void add_sample(CostSamples& samples, int32_t stage, ActionType type, double seconds) {
  TimelineEvent e;
  e.kind = event_kind(type);
  e.stage = stage;
  e.end = seconds;
  samples.add_event(e);
}

// The union of the compute kernels among trace.events[k] for k in `which` (gpu_usage's union).
double union_compute_s(const GpuTraceRank& trace, const std::vector<uint32_t>& which) {
  std::vector<GpuEvent> events;
  events.reserve(which.size());
  for (uint32_t k : which) events.push_back(trace.events[k]);
  return gpu_usage(events).compute_s;
}

bool in_steps(const std::vector<int32_t>& steps, int32_t step) {
  return std::binary_search(steps.begin(), steps.end(), step);
}

// True when the schedule splits the backward into I and W (zb-h1, zb-v...), false when it runs B.
bool splits_backward(const Schedule& sched) {
  return std::any_of(sched.programs.begin(), sched.programs.end(), [](const auto& program) {
    return std::any_of(program.begin(), program.end(),
                       [](const Action& a) { return a.type == ActionType::kBackwardWeight; });
  });
}

enum class Annotations { kNone, kPipelining, kStepFunctions };

// What the traces' ranges are (annotated_action, the reader's rule): PP:<action> ranges name a
// stage; forward/backward ranges do not.
Annotations annotations_in(const std::vector<GpuTraceRank>& traces) {
  bool step_functions = false;
  for (const GpuTraceRank& t : traces) {
    for (const CpuRange& r : t.ranges) {
      const auto a = report_internal::annotated_action(r.name);
      if (a && a->stage >= 0) return Annotations::kPipelining;
      if (a) step_functions = true;
    }
  }
  return step_functions ? Annotations::kStepFunctions : Annotations::kNone;
}

struct Fit {
  CostSamples samples;
  std::vector<std::string> notes;
};

// For each range of a trace, the compute action whose sample its kernels join: (type, stage,
// group). For PP:<action> the group is the microbatch (every range of one action in one step is
// one sample), a forward/backward range inside one (a module's "DistributedDataParallel.forward")
// belongs to it, and a PP: range that names no action of `rank` in `sched` counts in `bad`. For
// step functions the stage is the rank's one stage and the group the outermost range of the same
// type around it (nested "forward" ranges such as "## forward ##" around
// "DistributedDataParallel.forward" are one sample); a range that holds a range of the other type
// (an outer "forward_backward_step") is no action. nullopt: no compute action.
using RangeAction = std::optional<std::tuple<ActionType, int32_t, int32_t>>;

std::vector<RangeAction> range_actions(const GpuTraceRank& t, const Schedule& sched, int32_t rank,
                                       Annotations kind, int64_t& bad) {
  const size_t n = t.ranges.size();
  std::vector<std::optional<Action>> named(n);
  for (size_t i = 0; i < n; ++i) named[i] = report_internal::annotated_action(t.ranges[i].name);
  std::vector<RangeAction> out(n);
  if (kind == Annotations::kPipelining) {
    std::vector<size_t> open;  // the PP: ranges around range i, innermost last
    for (size_t i = 0; i < n; ++i) {
      const std::optional<Action>& a = named[i];
      if (!a) continue;
      const CpuRange& r = t.ranges[i];
      while (!open.empty() && t.ranges[open.back()].end_ns < r.start_ns) open.pop_back();
      if (a->stage < 0) {  // a forward/backward range inside an action is part of it
        if (!open.empty() && r.end_ns <= t.ranges[open.back()].end_ns) out[i] = out[open.back()];
        continue;
      }
      if (a->stage >= sched.num_stages || a->microbatch < 0 ||
          a->microbatch >= sched.num_microbatches || sched.rank_of(a->stage) != rank) {
        ++bad;
        continue;
      }
      out[i] = {{a->type, a->stage, a->microbatch}};
      open.push_back(i);
    }
    return out;
  }
  const int32_t stage = sched.stages_of(rank).front();
  std::map<ActionType, size_t> outer;  // type -> the latest outermost range of that type
  for (size_t i = 0; i < n; ++i) {
    if (!named[i]) continue;
    const ActionType type = named[i]->type;
    const CpuRange& r = t.ranges[i];
    bool mixed = false;  // holds a range of the other type (ranges are sorted by start)
    for (size_t j = i + 1; j < n && t.ranges[j].start_ns <= r.end_ns && !mixed; ++j) {
      mixed = named[j] && named[j]->type != type && t.ranges[j].end_ns <= r.end_ns;
    }
    if (mixed) continue;
    auto it = outer.find(type);
    if (it == outer.end() || t.ranges[it->second].end_ns < r.end_ns) {
      outer[type] = i;
      out[i] = {{type, stage, static_cast<int32_t>(i)}};
    } else {
      out[i] = out[it->second];
    }
  }
  return out;
}

// Samples from annotations: per rank, step and action, the union of the compute kernels whose
// launch ran in the action's ranges. False (with a note) when they do not cover every stage.
bool fit_from_annotations(const std::vector<GpuTraceRank>& traces,
                          const std::vector<GpuRankReport>& ranks, const Schedule& sched,
                          const std::vector<int32_t>& steps, Annotations kind, Fit& fit) {
  int64_t bad = 0;
  double outside_s = 0;  // the largest median compute per step outside the annotated actions
  int32_t outside_rank = 0;
  for (size_t r = 0; r < traces.size(); ++r) {
    const GpuTraceRank& t = traces[r];
    const int32_t rank = static_cast<int32_t>(r);
    const std::vector<RangeAction> actions = range_actions(t, sched, rank, kind, bad);
    // (step, type, stage, group) -> its kernels; step -> every annotated kernel (event indices).
    std::map<std::tuple<int32_t, ActionType, int32_t, int32_t>, std::vector<uint32_t>> groups;
    std::map<int32_t, std::vector<uint32_t>> annotated;
    for (uint32_t k = 0; k < t.events.size(); ++k) {
      const GpuEvent& e = t.events[k];
      if (e.kind != GpuEventKind::kCompute || e.range < 0 || !in_steps(steps, e.step)) continue;
      const RangeAction& a = actions[e.range];
      if (!a) continue;
      const auto& [type, stage, group] = *a;
      groups[{e.step, type, stage, group}].push_back(k);
      annotated[e.step].push_back(k);
    }
    for (const auto& [key, events] : groups) {
      add_sample(fit.samples, std::get<2>(key), std::get<1>(key), union_compute_s(t, events));
    }
    std::vector<double> outside;
    for (const GpuStepReport& s : ranks[r].steps) {
      if (!in_steps(steps, s.step)) continue;
      auto it = annotated.find(s.step);
      outside.push_back(s.usage.compute_s -
                        (it == annotated.end() ? 0.0 : union_compute_s(t, it->second)));
    }
    if (const double m = median(outside); m > outside_s) {
      outside_s = m;
      outside_rank = rank;
    }
  }
  if (bad > 0) {
    fit.notes.push_back(
        fmt::format("{} PP: range(s) name no compute action of their rank in the schedule that ran "
                    "(ignored); check --pp, --schedule and --num-microbatches",
                    bad));
  }
  for (int32_t s = 0; s < sched.num_stages; ++s) {
    const bool f = fit.samples.time.contains({s, cost_slot(EventKind::kForward)});
    const bool b = fit.samples.time.contains({s, cost_slot(EventKind::kBackward)}) ||
                   fit.samples.time.contains({s, cost_slot(EventKind::kBackwardInput)});
    if (!f || !b) {
      fit.notes.push_back(fmt::format(
          "the annotations give stage {} (rank {}) no {} kernels: costs fitted from the kernels "
          "instead",
          s, sched.rank_of(s), f ? "backward" : "forward"));
      return false;
    }
  }
  fit.notes.push_back(
      kind == Annotations::kPipelining
          ? "costs: per stage and action type, the median over actions and steps of the union of "
            "the compute kernels launched in the action's PP:<action> range"
          : "costs: per stage, the median over steps and microbatches of the union of the compute "
            "kernels launched in a forward or a backward range (one stage per rank)");
  if (!splits_backward(sched)) {
    fit.notes.push_back("the backward ran fused (B): a what-if that splits it takes I = W = B / 2");
  }
  if (outside_s > 1e-6) {
    fit.notes.push_back(fmt::format(
        "up to {} of compute per step (rank {}) ran outside the annotated actions (optimizer, "
        "loss, ...): not simulated",
        report_internal::fmt_time(outside_s, "s"), outside_rank));
  }
  return true;
}

// Samples from the kernels alone: each rank's compute time per step divided among its actions
// by the schedule's counts, under B = 2F (I = W = F where the backward is split) and equal
// chunks.
void fit_from_kernels(const std::vector<GpuRankReport>& ranks, const Schedule& sched,
                      const std::vector<int32_t>& steps, Fit& fit) {
  auto weight = [](ActionType t) { return t == ActionType::kBackward ? 2.0 : 1.0; };
  for (size_t r = 0; r < ranks.size(); ++r) {
    double units = 0;
    std::set<std::pair<int32_t, ActionType>> kinds;
    for (const Action& pa : sched.programs[r]) {
      for (const Action& a : sub_actions(pa)) {  // an OVERLAP_F_B pair: its F and its B
        if (!is_compute(a.type)) continue;
        units += weight(a.type);
        kinds.insert({a.stage, a.type});
      }
    }
    if (units == 0) continue;
    for (const GpuStepReport& s : ranks[r].steps) {
      if (!in_steps(steps, s.step)) continue;
      const double f = s.usage.compute_s / units;
      for (const auto& [stage, type] : kinds)
        add_sample(fit.samples, stage, type, weight(type) * f);
    }
  }
  fit.notes.push_back(fmt::format(
      "costs from the kernels alone (no PP:<action> annotations): each rank's compute time per "
      "step divided among its actions assuming B = 2F{} and chunks of equal cost; compute outside "
      "the pipeline actions (optimizer, loss) is counted in",
      splits_backward(sched) ? " (I = W = F: the backward ran split)" : ""));
}

// The time of one P2P message: a low quantile of the P2P kernels' durations in the steps (a P2P
// kernel runs from its launch until the transfer is done, so it includes waiting for the peer;
// the shortest ones are closest to the transfer alone).
double fit_message_s(const std::vector<GpuTraceRank>& traces, const std::vector<int32_t>& steps,
                     Fit& fit) {
  std::vector<double> durations;
  for (const GpuTraceRank& t : traces) {
    for (const GpuEvent& e : t.events) {
      if (e.kind == GpuEventKind::kP2P && in_steps(steps, e.step)) {
        durations.push_back(static_cast<double>(e.end_ns - e.start_ns) * 1e-9);
      }
    }
  }
  if (durations.empty()) {
    fit.notes.push_back("no P2P kernels in the steps: messages cost nothing in the simulation");
    return 0;
  }
  const double p10 = spread_of(durations).p10;
  fit.notes.push_back(fmt::format(
      "message time {}: the 10th percentile of {} P2P kernel durations (a P2P kernel also waits "
      "for its peer, so longer ones measure waiting, not the transfer)",
      report_internal::fmt_time(p10, "s"), durations.size()));
  return p10;
}

// The steps every rank has (ascending).
std::vector<report_internal::StepAcrossRanks> common_steps(
    const std::vector<GpuRankReport>& ranks) {
  std::vector<report_internal::StepAcrossRanks> out;
  for (auto& x : report_internal::steps_across_ranks(ranks))
    if (x.ranks.size() == ranks.size()) out.push_back(std::move(x));
  return out;
}

// The median over `steps` of the longest rank window.
double measured_step_s(const std::vector<report_internal::StepAcrossRanks>& steps) {
  std::vector<double> longest;
  for (const auto& x : steps) longest.push_back(x.longest_window_s());
  return median(longest);
}

// The median over `steps` of step_bubble with busy = compute, on a common origin per step.
double measured_bubble_ratio(const std::vector<report_internal::StepAcrossRanks>& steps) {
  std::vector<double> ratios;
  for (const auto& x : steps) {
    int64_t origin = INT64_MAX;
    for (const GpuUsage* u : x.ranks) origin = std::min(origin, u->start_ns);
    std::vector<RankBusy> busy;
    for (const GpuUsage* u : x.ranks) {
      RankBusy b;
      b.compute = u->compute_s;
      b.end = static_cast<double>(u->end_ns - origin) * 1e-9;
      busy.push_back(b);
    }
    ratios.push_back(step_bubble(busy).ratio);
  }
  return median(ratios);
}

}  // namespace

Status GpuPipelineSpec::validate() const {
  if (pp < 0) {
    return Status::invalid_argument(
        fmt::format("--pp {}: the pipeline ranks must be >= 1; hint: --pp N with one trace file "
                    "per pipeline rank",
                    pp));
  }
  if (pp == 0) {
    const std::string_view flag = first_pipeline_flag(*this);
    if (flag.empty()) return Status::Ok();
    return Status::invalid_argument(fmt::format(
        "{}: describes a pipelined run, but --pp (its pipeline ranks) is not given; hint: add "
        "--pp N, N the number of trace files (one per pipeline rank)",
        flag));
  }
  if (vpp < 0) {
    return Status::invalid_argument(fmt::format(
        "--vpp {}: chunks per rank must be >= 1 (0: the schedule's own); hint: e.g. --vpp 2 for "
        "interleaved with two chunks per rank",
        vpp));
  }
  if (!schedule.empty() && !schedule_file.empty()) {
    return Status::invalid_argument(fmt::format(
        "--schedule '{}' and --schedule-file '{}': both say what ran; hint: give one of them",
        printable(schedule), printable(schedule_file)));
  }
  if (schedule.empty() && schedule_file.empty()) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: no schedule given; hint: say what ran with --schedule NAME (one of {}) and "
        "--num-microbatches M, or --schedule-file CSV",
        pp, generator_names()));
  }
  if (microbatches < 0 || (!schedule.empty() && microbatches < 1)) {
    return Status::invalid_argument(fmt::format(
        "--num-microbatches {}: the microbatches per step must be >= 1; hint: the number the run "
        "used (Megatron: global batch / (micro batch x data-parallel size)); with "
        "--schedule-file drop it",
        microbatches));
  }
  if (!what_if.empty()) TP_RETURN_IF_ERROR(what_if_specs(*this).status());
  return schedule_that_ran(*this).status();
}

namespace report_internal {

Status check_pipeline_ranks(const std::vector<GpuTraceRank>& traces, int32_t pp) {
  if (traces.empty() || traces.front().rank_from_file_order) return OkStatus();
  std::vector<int64_t> r;
  for (const GpuTraceRank& t : traces) r.push_back(t.rank);
  std::sort(r.begin(), r.end());
  const int64_t world = traces.front().world_size;  // the same in every trace (one job)
  const std::string found = fmt::format("{}", fmt::join(r, ", "));
  const std::string of_world = world > 0 ? fmt::format(" of a world of {}", world) : "";
  auto refuse = [&](std::string hint) {
    return Status::invalid_argument(
        fmt::format("--pp {}: the traces are ranks {}{}, which are not one pipeline; hint: {}", pp,
                    found, of_world, hint));
  };
  auto evenly = [&](int64_t first, int64_t gap) {
    for (size_t k = 0; k < r.size(); ++k) {
      if (r[k] != first + static_cast<int64_t>(k) * gap) return false;
    }
    return true;
  };
  auto list = [&](int64_t first, int64_t gap) {
    std::vector<int64_t> v;
    for (int64_t k = 0; k < pp; ++k) v.push_back(first + k * gap);
    return fmt::format("{}", fmt::join(v, ", "));
  };
  if (world <= 0) {
    if (r.size() < 2 || evenly(r[0], r[1] - r[0])) return OkStatus();
    return refuse(
        fmt::format("the ranks of one pipeline are evenly spaced (e.g. {})", list(r[0], 1)));
  }
  if (world % pp != 0) {
    return refuse(
        fmt::format("a world of {} does not split into pipelines of {} ranks; give "
                    "--pp that divides {}",
                    world, pp, world));
  }
  const int64_t gap = world / pp;
  // Pipeline outermost (Megatron, DeepSpeed, torchtitan): ranks world / pp apart; innermost: pp
  // contiguous ranks from a multiple of pp.
  if ((r[0] < gap && evenly(r[0], gap)) || (r[0] % pp == 0 && evenly(r[0], 1))) return OkStatus();
  return refuse(fmt::format(
      "give the traces of one pipeline: ranks {} apart from one below {} (Megatron's layout, "
      "e.g. {}) or {} contiguous ranks from a multiple of {} (e.g. {})",
      gap, gap, list(r[0] % gap, gap), pp, pp, list(r[0] / pp * pp, 1)));
}

GpuPipelineReport analyze_gpu_pipeline(const std::vector<GpuTraceRank>& traces,
                                       const std::vector<GpuRankReport>& ranks,
                                       const GpuPipelineSpec& spec) {
  GpuPipelineReport rep;
  auto failed = [&](std::string why) {
    rep.error = std::move(why);
    return rep;
  };
  auto ran = schedule_that_ran(spec);
  if (!ran.ok()) return failed(ran.status().message());
  if (traces.size() != static_cast<size_t>(spec.pp)) {
    return failed(fmt::format(
        "--pp {}: {} trace file(s) given, the pipeline has {} rank(s); hint: give one trace per "
        "pipeline rank, in rank order (e.g. the ranks of one data-parallel replica)",
        spec.pp, traces.size(), spec.pp));
  }
  auto lowered = lower(*ran);
  if (!lowered.ok()) return failed(lowered.status().message());
  const std::vector<report_internal::StepAcrossRanks> common = common_steps(ranks);
  std::vector<int32_t> steps;
  for (const auto& x : common) steps.push_back(x.step);
  if (steps.empty()) {
    return failed(
        "no ProfilerStep#N is in every trace: the pipeline analysis fits and compares steps; "
        "hint: profile the same steps on every rank and call prof.step() every iteration");
  }
  rep.measured_step_s = measured_step_s(common);
  rep.measured_bubble_ratio = measured_bubble_ratio(common);

  // Costs.
  Fit fit;
  Annotations kind = annotations_in(traces);
  if (kind == Annotations::kStepFunctions && ran->chunks() > 1) {
    fit.notes.push_back(fmt::format(
        "forward/backward ranges cannot tell the {} chunks of a rank apart: costs fitted from "
        "the kernels instead (PP:<action> ranges name the stage)",
        ran->chunks()));
    kind = Annotations::kNone;
  }
  rep.costs.method = "annotations";
  if (kind == Annotations::kNone || !fit_from_annotations(traces, ranks, *ran, steps, kind, fit)) {
    rep.costs.method = "kernels";
    fit.samples = CostSamples();
    fit_from_kernels(ranks, *ran, steps, fit);
  }
  CalibrationOptions co;
  co.durations = DurationStatistic::kMedian;  // the median over actions and steps (docs)
  co.link.latency = fit_message_s(traces, steps, fit);
  co.time_unit = "s";
  co.source = "fitted to the GPU traces (" + rep.costs.method + ")";
  rep.costs.message_s = co.link.latency;
  rep.costs.notes = fit.notes;
  auto costs = calibrate(fit.samples, *lowered, co);
  if (!costs.ok()) return failed(costs.status().message());
  const bool split = splits_backward(*ran);
  for (int32_t s = 0; s < costs->num_stages(); ++s) {
    rep.costs.f_s.push_back(costs->stage(s).f);
    rep.costs.b_s.push_back(costs->stage(s).b);
    if (split) rep.costs.w_s.push_back(costs->stage(s).w);
  }

  // The schedule that ran, simulated.
  SimOptions so;
  so.record_timeline = false;
  auto predicted = simulate(*lowered, *costs, so);
  if (!predicted.ok()) return failed(predicted.status().message());
  rep.predicted_step_s = predicted->makespan;
  rep.predicted_bubble_ratio = predicted->bubble_ratio;
  if (const double gap = rep.measured_step_s - rep.predicted_step_s;
      std::abs(gap) > 0.05 * rep.measured_step_s) {
    rep.costs.notes.push_back(fmt::format(
        "the measured step is {} {} than the simulated one ({} of it): what the simulation does "
        "not model (host stalls, exposed collectives, the optimizer: see the causes), or costs "
        "that vary from step to step",
        report_internal::fmt_time(std::abs(gap), "s"), gap > 0 ? "longer" : "shorter",
        report_internal::pct(std::abs(gap) / rep.measured_step_s)));
  }

  // What-ifs: the same p and m; the fitted costs as they are for the same stages and placement,
  // else each rank's cost spread evenly over its chunks.
  if (spec.what_if.empty()) return rep;
  auto specs = what_if_specs(spec);
  if (!specs.ok()) {  // validate() refuses these; here for callers that did not call it
    rep.what_ifs.push_back({join(spec.what_if, ","), specs.status().message()});
    return rep;
  }
  const CostModel& fitted = *costs;
  const Schedule& ran_lowered = *lowered;
  so.engine = spec.engine;
  for (const WhatIfSpec& w : *specs) {
    GpuWhatIf wi;
    wi.label = w.label();
    auto built = what_if_schedule(w, spec.pp, ran->num_microbatches,
                                  [&](const Schedule& target) -> Result<CostModel> {
                                    if (target.num_stages == ran_lowered.num_stages &&
                                        target.stage_to_rank == ran_lowered.stage_to_rank) {
                                      return fitted;
                                    }
                                    return derive_costs(fitted, ran_lowered, target);
                                  });
    if (!built.ok()) {
      wi.error = built.status().message();
    } else if (auto sim = simulate_what_if(built->first, built->second, so); !sim.ok()) {
      wi.error = sim.status().message();
    } else {
      wi.engine_profile = sim->engine_description;
      wi.step_s = sim->steady_state_step_time;
      wi.bubble_ratio = sim->bubble_ratio;
      wi.saving_s = rep.predicted_step_s - wi.step_s;
      wi.max_span_s = sim->max_span;
      wi.lower_bound_s = sim->lower_bound_makespan;  // 0 without a bound
      wi.lower_bound_span_s = sim->lower_bound_span;
      wi.lower_bound_memory = sim->lower_bound_memory;
    }
    rep.what_ifs.push_back(std::move(wi));
  }
  return rep;
}

}  // namespace report_internal
}  // namespace tightpipe
