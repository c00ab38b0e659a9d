// tightpipe tune: a PyTorch model's measured modules (and its current run's traces) to the split
// and schedule that run fastest in PyTorch's runtime, written in PyTorch's and torchtitan's forms
// (tune.h, docs/torch.md "Measure, decide, apply").
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "commands.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/flag_checks.h"
#include "tightpipe/gpu_trace.h"
#include "tightpipe/input_file.h"
#include "tightpipe/output_file.h"
#include "tightpipe/schedule_torch.h"
#include "tightpipe/simulator.h"
#include "tightpipe/tune.h"

namespace tightpipe::cli {
namespace {

constexpr std::string_view kTuneCmd = "tune";

// PyTorch's and torchtitan's schedule class names for the generators that run the same order
// (docs/torch.md section 4), and tightpipe's own names.
Result<std::string> generator_for(const std::string& name) {
  static const std::map<std::string, std::string, std::less<>> kTorch = {
      {"schedule1f1b", "1f1b"},
      {"1f1b", "1f1b"},
      {"schedulegpipe", "gpipe"},
      {"gpipe", "gpipe"},
      {"scheduleinterleaved1f1b", "interleaved"},
      {"interleaved1f1b", "interleaved"},
      {"scheduleloopedbfs", "looped-bfs"},
      {"loopedbfs", "looped-bfs"},
      {"schedulezbvzerobubble", "zb-v"},
      {"zbvzerobubble", "zb-v"},
      {"scheduledualpipev", "dualpipev"},
      {"dualpipev", "dualpipev"}};
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (auto it = kTorch.find(lower); it != kTorch.end()) return it->second;
  if (find_generator(name)) return find_generator(name)->name;
  if (lower == "scheduleinterleavedzerobubble" || lower == "interleavedzerobubble") {
    return Status::invalid_argument(fmt::format(
        "--current-schedule {}: tightpipe has no generator of that order; hint: give the CSV "
        "PyTorch dumps for it (schedule._dump_csv) as --schedule-file",
        printable(name)));
  }
  return Status::invalid_argument(fmt::format(
      "--current-schedule '{}': not a schedule; hint: a tightpipe generator ({}) or PyTorch's "
      "class name (Schedule1F1B, ScheduleInterleaved1F1B, ScheduleZBVZeroBubble, ...)",
      printable(name), generator_names()));
}

// Per-stage F, I, W of the run the traces recorded, from PyTorch's PP: ranges.
Result<StageTimes> run_stage_times(const std::vector<std::string>& traces,
                                   const std::string& schedule_file, int32_t pp) {
  if (static_cast<int32_t>(traces.size()) != pp) {
    return Status::invalid_argument(fmt::format(
        "--traces: {} file(s) for --pp {}; hint: one profiler trace per rank of the run (a "
        "rank's trace is missing?)",
        traces.size(), pp));
  }
  GpuPipelineSpec spec;
  spec.pp = pp;
  spec.schedule_file = schedule_file;
  spec.engine = Engine::kTorch;
  TP_ASSIGN_OR_RETURN(GpuTraceReport rep, build_gpu_trace_report(traces, spec));
  if (!rep.pipeline || !rep.pipeline->error.empty()) {
    return Status::invalid_argument(fmt::format(
        "--traces: the run's stage costs cannot be read: {}; hint: profile a schedule PyTorch "
        "records PP: ranges for (_PipelineScheduleRuntime-based: tightpipe.torch.build_runtime, "
        "ScheduleInterleaved1F1B, ScheduleZBVZeroBubble...; Schedule1F1B and ScheduleGPipe "
        "record none), or drop --traces and tune from the measured modules alone",
        rep.pipeline ? rep.pipeline->error : std::string("no pipeline analysis")));
  }
  const GpuFittedCosts& c = rep.pipeline->costs;
  if (c.method != "annotations") {
    return Status::invalid_argument(fmt::format(
        "--traces: the traces hold no PyTorch PP: action ranges (costs fitted from '{}'); hint: "
        "Schedule1F1B and ScheduleGPipe record none: profile the run with "
        "tightpipe.torch.build_runtime or a multi-stage PyTorch schedule, or drop --traces",
        c.method));
  }
  StageTimes t;
  t.f = c.f_s;
  for (size_t s = 0; s < c.b_s.size(); ++s) {
    t.i.push_back(c.w_s.empty() ? c.b_s[s] : c.b_s[s] - c.w_s[s]);
  }
  t.w = c.w_s;
  return t;
}

}  // namespace

int cmd_tune(int argc, char** argv) {
  CLI::App app(
      "From a PyTorch model's measured modules (tightpipe.torch.measure_layers) and, optionally, "
      "the profiler traces of its current pipeline run: the split (modules per stage), placement, "
      "schedule and microbatch size that run fastest in PyTorch's runtime under a memory limit, "
      "searched by the planner and simulated as PyTorch runs them; writes the split, the schedule "
      "in PyTorch's forms and the prediction (docs/torch.md).",
      "tightpipe tune");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string layers_path, out_dir, schedule_file, current_schedule;
  std::vector<std::string> traces, schedules;
  std::vector<int32_t> current_split;
  std::vector<int64_t> mbs_list;
  TuneOptions o;
  int64_t microbatches = 0;
  int32_t current_vpp = 0;
  double memory_gib = 0, latency_us = 0, bandwidth_gbs = 0;
  bool json_out = false;
  app.add_option("--layers", layers_path,
                 "the modules' costs: the JSON tightpipe.torch.measure_layers writes")
      ->required();
  app.add_option("--pp", o.pp, "pipeline ranks")->required();
  app.add_option("--microbatches,--num-microbatches", microbatches,
                 "microbatches per step at the measured micro batch size (default: the "
                 "--schedule-file's)");
  app.add_option("--micro-batch-size", mbs_list,
                 "micro batch sizes to try, the batch kept (default: the measured one)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option(
      "--memory-limit-gib", memory_gib,
      "per rank: parameters, gradients, optimizer state and activations (default: none)");
  app.add_option("--schedules", schedules,
                 "schedules to search (default: every one PyTorch's runtime runs)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--link-latency-us", latency_us, "per message between ranks (default 0)");
  app.add_option("--link-bandwidth-gbs", bandwidth_gbs,
                 "GB/s between ranks (default 0: bytes cost nothing)");
  double overhead_us = 0;
  std::string host_time_us;
  app.add_option("--action-overhead-us", overhead_us,
                 "the runtime's host time per compute action, the same for every kind and "
                 "none per module (default 0; --host-time-us is finer)");
  app.add_option("--host-time-us", host_time_us,
                 "the runtime's host time around each action, microseconds, per kind and per "
                 "module: f=,i=,w=,b=,f_module=,i_module=,w_module=,b_module= (measured once per "
                 "machine by tightpipe.torch.measure_host_time)");
  add_core_sharing_flags(app, o.core_sharing);
  app.add_option("--current-split", current_split, "modules per stage of the current run, e.g. 7,7")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--current-schedule", current_schedule,
                 "the current schedule: a tightpipe name or PyTorch's class (Schedule1F1B, ...)");
  app.add_option("--current-vpp", current_vpp, "stages per rank of the current schedule");
  app.add_option("--schedule-file", schedule_file,
                 "the schedule the current run ran (a PyTorch CSV, either form); with --traces");
  app.add_option("--traces", traces,
                 "the current run's profiler traces, one per rank: the modules' times are "
                 "refitted to its stages")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--min-gain", o.min_gain,
                 "recommend a change only when predicted at least this much faster")
      ->capture_default_str();
  app.add_option("--top", o.top, "candidates to show")->capture_default_str();
  app.add_option("--out", out_dir,
                 "write tune.json, schedule.csv (compute_comms), schedule_compute.csv, "
                 "costs.json and prediction.json of the recommendation here");
  app.add_flag("--json", json_out, "print tune.json instead of the table");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  auto fail = [](const Status& st) { return report_error(kTuneCmd, st); };
  auto text = read_input_file("--layers", layers_path, input_kind::kConfig);
  if (!text.ok()) return fail(text.status());
  auto measured = parse_measured_modules(*text, printable(layers_path));
  if (!measured.ok()) return fail(measured.status().with_context("--layers"));
  if (memory_gib < 0 || !std::isfinite(memory_gib) || memory_gib > kMaxPlanMemoryBudgetGib) {
    return fail(Status::invalid_argument(
        fmt::format("--memory-limit-gib {}: must be in [0, {:g}] GiB per rank; hint: e.g. 16",
                    memory_gib, kMaxPlanMemoryBudgetGib)));
  }
  for (auto [flag, v] : {std::pair{"--link-latency-us", latency_us},
                         std::pair{"--link-bandwidth-gbs", bandwidth_gbs}}) {
    if (!(v >= 0 && v < 1e9)) {
      return fail(Status::invalid_argument(
          fmt::format("{} {}: must be a number >= 0; hint: 0 leaves it out", flag, v)));
    }
  }
  if (o.top < 1 || o.top > kMaxPlanTop) {
    return fail(
        Status::invalid_argument(fmt::format("--top {}: must be in [1, {}]", o.top, kMaxPlanTop)));
  }
  o.memory_limit_bytes = memory_gib * 1024.0 * 1024.0 * 1024.0;
  o.link.latency = latency_us * 1e-6;
  if (!(overhead_us >= 0 && overhead_us < 1e6)) {
    return fail(Status::invalid_argument(
        fmt::format("--action-overhead-us {:g}: must be in [0, 1e6); hint: measure it with "
                    "tightpipe.torch.measure_host_time",
                    overhead_us)));
  }
  if (!host_time_us.empty() && overhead_us > 0) {
    return fail(Status::invalid_argument(
        "--action-overhead-us and --host-time-us both given; hint: give one (--host-time-us "
        "f=X,i=X,w=X,b=X is --action-overhead-us X)"));
  }
  o.host_time = RuntimeHostTime::uniform(overhead_us * 1e-6);
  if (!host_time_us.empty()) {
    auto h = parse_runtime_host_time_us(host_time_us, "--host-time-us");
    if (!h.ok()) return fail(h.status());
    o.host_time = *h;
  }
  if (Status st = check_core_sharing(o.core_sharing); !st.ok()) return fail(st);
  o.link.bandwidth = bandwidth_gbs * 1e9;
  o.micro_batch_sizes = mbs_list;
  o.schedules = schedules;

  std::optional<Schedule> ran;
  if (!schedule_file.empty()) {
    auto s = load_schedule_file(schedule_file, nullptr);
    if (!s.ok()) return fail(s.status().with_context("--schedule-file"));
    if (s->num_ranks != o.pp) {
      return fail(Status::invalid_argument(fmt::format(
          "--schedule-file {}: {} ranks, but --pp {}; hint: the file of the run, with --pp its "
          "ranks",
          printable(schedule_file), s->num_ranks, o.pp)));
    }
    ran = std::move(*s);
  }
  if (!traces.empty() && !ran) {
    return fail(Status::invalid_argument(
        "--traces without --schedule-file: the traces' actions need the schedule that ran; "
        "hint: pass the CSV the run loaded (or PyTorch's dump of its schedule)"));
  }
  if ((!traces.empty() || ran || !current_schedule.empty()) && current_split.empty()) {
    return fail(Status::invalid_argument(
        "--current-split is needed with --traces, --schedule-file or --current-schedule: which "
        "modules each stage of the run held; hint: module counts per stage, e.g. 7,7"));
  }
  if (!current_split.empty() && !ran && current_schedule.empty()) {
    return fail(Status::invalid_argument(
        "--current-split without --current-schedule or --schedule-file; hint: name the schedule "
        "the run used, e.g. --current-schedule Schedule1F1B"));
  }
  if (microbatches == 0) microbatches = ran ? ran->num_microbatches : 0;
  if (microbatches == 0) {
    return fail(Status::invalid_argument(
        "--microbatches is needed (or a --schedule-file to read it from); hint: the run's "
        "n_microbatches, e.g. --microbatches 8"));
  }
  if (ran && ran->num_microbatches != microbatches) {
    return fail(Status::invalid_argument(fmt::format(
        "--microbatches {}: the --schedule-file runs {}; hint: drop --microbatches, or give the "
        "file of the run",
        microbatches, ran->num_microbatches)));
  }
  o.microbatches = microbatches;
  MeasuredModules modules = std::move(*measured);
  if (!traces.empty()) {
    auto times = run_stage_times(traces, schedule_file, o.pp);
    if (!times.ok()) return fail(times.status());
    auto fitted = fit_modules_to_run(modules, current_split, *times);
    if (!fitted.ok()) return fail(fitted.status());
    modules = std::move(*fitted);
  }
  o.modules = std::move(modules);
  if (!current_split.empty()) {
    TuneCurrent cur;
    cur.modules_per_stage = current_split;
    cur.vpp = current_vpp;
    if (ran) {
      cur.file = *ran;
      cur.schedule = current_schedule;
    } else {
      auto g = generator_for(current_schedule);
      if (!g.ok()) return fail(g.status());
      cur.schedule = *g;
    }
    o.current = std::move(cur);
  }
  auto res = tune(o);
  if (!res.ok()) return fail(res.status());
  const TuneSetup& rec =
      res->change || !res->current ? res->candidates[res->recommended] : *res->current;
  const std::string tune_json = tune_setup_json(*res, rec, "schedule.csv", "schedule_compute.csv");
  if (!out_dir.empty()) {
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    if (ec) {
      return fail(Status::io_error(fmt::format("--out {}: {}; hint: a folder you can write",
                                               printable(out_dir), ec.message())));
    }
    auto torch_csv = to_torch_csv(*rec.compute_schedule);
    if (!torch_csv.ok()) return fail(torch_csv.status());
    auto sim_json = sim_result_to_json(rec.sim);
    for (auto [name, body] : {std::pair<std::string, std::string>{"tune.json", tune_json},
                              {"schedule.csv", *torch_csv},
                              {"schedule_compute.csv", to_csv(*rec.compute_schedule)},
                              {"costs.json", cost_table_to_json(*rec.costs)},
                              {"prediction.json", sim_json + "\n"}}) {
      if (Status st = write_output_file((fs::path(out_dir) / name).string(), body); !st.ok()) {
        return fail(st.with_context("--out"));
      }
    }
  }
  if (json_out) {
    std::fputs(tune_json.c_str(), stdout);
  } else {
    std::fputs(format_tune(*res).c_str(), stdout);
    if (!out_dir.empty()) {
      std::printf(
          "wrote %s/{tune.json,schedule.csv,schedule_compute.csv,costs.json,"
          "prediction.json}\n",
          out_dir.c_str());
    }
  }
  return kExitOk;
}

}  // namespace tightpipe::cli
