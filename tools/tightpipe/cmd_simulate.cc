// tightpipe simulate: predict step time, bubble and memory of a schedule from a cost model, or
// compare several schedules side by side (--compare).
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "schedule_source.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/prof.h"
#include "tightpipe/simulator.h"

namespace tightpipe::cli {
namespace {

constexpr std::string_view kCmd = "simulate";

Result<Schedule> lowered(Schedule s) {
  if (s.lowered) return s;
  return lower(s);
}

Result<SimResult> run_one(const Schedule& compute_only_schedule, const CostFlags& cf,
                          const SimOptions& opt) {
  TP_ASSIGN_OR_RETURN(Schedule s, lowered(compute_only_schedule));
  TP_ASSIGN_OR_RETURN(CostChoice cost, make_costs(cf, s, opt));
  if (opt.data_parallel.size > 1) {
    bool bytes = false;
    for (int32_t st = 0; st < cost.model.num_stages(); ++st)
      bytes =
          bytes || cost.model.stage(st).allreduce_bytes > 0 || cost.model.stage(st).grad_bytes > 0;
    if (!bytes) {
      return Status::invalid_argument(fmt::format(
          "--data-parallel-size {}: the costs ({}) give no stage gradient bytes to all-reduce; "
          "hint: use --model, or a --costs table with allreduce_bytes (a data-parallel run's "
          "costs.json has them)",
          opt.data_parallel.size, cost.model.source()));
    }
  }
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(s, cost.model, opt));
  r.layout = cost.layout;
  r.steady_state_step_time = r.makespan;  // synchronous: every step starts together
  if (r.optimizer_post_validation) {
    TP_ASSIGN_OR_RETURN(SteadyState ss, steady_state_step_time(s, cost.model, opt));
    r.steady_state_step_time = ss.step_time;
  }
  TP_ASSIGN_OR_RETURN(LowerBound lb, lower_bound_for(s, cost.model, opt));
  TP_RETURN_IF_ERROR(attach_lower_bound(r, lb, s.name));
  return r;
}

}  // namespace

int cmd_simulate(int argc, char** argv) {
  CLI::App app(
      "Predict step time, bubble ratio and memory of a pipeline schedule from a cost model "
      "(discrete-event simulation of the lowered per-rank programs), or compare schedules "
      "(--compare).",
      "tightpipe simulate");
  ScheduleFlags sf;
  add_schedule_flags(app, sf);
  add_cost_flags(app, sf.costs);
  add_host_time_flag(app, sf.costs);
  add_zb_auto_flags(app, sf.zb);
  const CostFlags& cf = sf.costs;
  std::string compare, comm_mode = "overlap", recompute = "none", trace, svg;
  bool json = false;
  app.add_option("--comm-mode", comm_mode,
                 "overlap: messages on the dependency edges, compute lanes free; blocking: "
                 "SEND/RECV hold the compute lanes")
      ->capture_default_str();
  app.add_option("--recompute", recompute,
                 "none, or full: F keeps only its input and I/B re-run the forward first")
      ->capture_default_str();
  double overlap_fb_factor = 0;
  CoreSharing opt_sharing;
  app.add_option("--overlap-fb-factor", overlap_fb_factor,
                 "how much of an OVERLAP_F_B pair (dualpipev, dualpipe) the hardware overlaps, in "
                 "[0, 1]: a pair takes F + B - X min(F, B)")
      ->capture_default_str();
  int32_t dp_size = 1;
  bool overlap_grad_reduce = false, opt_post_validation = false;
  int64_t bucket_size = int64_t{1} << 20;
  app.add_option("--data-parallel-size", dp_size,
                 "replicas of the pipeline: adds each stage's gradient all-reduce (a ring over "
                 "the cost model's link) after the program")
      ->capture_default_str();
  app.add_flag("--overlap-grad-reduce", overlap_grad_reduce,
               "start a stage's all-reduce after its last W/B instead of after the program");
  app.add_option("--bucket-size", bucket_size,
                 "gradient values per all-reduce bucket, 8 bytes each (the trainer sums doubles)")
      ->capture_default_str();
  app.add_flag("--optimizer-post-validation,--enable-optimizer-post-validation",
               opt_post_validation,
               "each rank runs its optimizer as soon as its own step ends and starts the next "
               "step, the global inf/NaN and norm check validated later (the zero-bubble "
               "runtime's flag): prints the steady-state step of back-to-back iterations "
               "(JSON steady_state_step_time)");
  std::string engine = "tightpipe";
  add_engine_flag(app, engine,
                  "the simulation (tightpipe: --comm-mode and "
                  "--optimizer-post-validation as given)");
  add_core_sharing_flags(app, opt_sharing);
  app.add_flag("--json", json, "print the result as JSON (docs/simulate_json.md)");
  app.add_option("--trace", trace, "write a Chrome trace (Perfetto, chrome://tracing) here");
  app.add_option("--svg", svg, "write an SVG timeline here");
  auto* o_compare = app.add_option(
      "--compare", compare,
      "comma-separated schedules to simulate side by side, name[:v] (e.g. "
      "gpipe,1f1b,interleaved:2,zb-h1,zb-v,dualpipev); interleaved and looped-bfs without :v "
      "use --vpp, default 2");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (Status st = resolve_chunks(sf.vpp, sf.layers_per_virtual_stage, sf.num_layers, sf.pp);
      !st.ok()) {
    return report_error(kCmd, st);
  }

  SimOptions opt;
  {
    auto cm = parse_comm_mode(comm_mode);
    if (!cm.ok()) return report_error(kCmd, cm.status());
    opt.comm_mode = *cm;
    auto rc = parse_recompute(recompute);
    if (!rc.ok()) return report_error(kCmd, rc.status());
    opt.recompute = *rc;
    if (Status st = check_overlap_fb_factor(overlap_fb_factor); !st.ok()) {
      return report_error(kCmd, st);
    }
    opt.overlap_fb_factor = overlap_fb_factor;
    if (bucket_size < 1 || bucket_size > (int64_t{1} << 30)) {
      return report_error(kCmd, Status::invalid_argument(fmt::format(
                                    "--bucket-size {}: must be in [1, 2^30] values; hint: "
                                    "gradient values per all-reduce, e.g. 1048576",
                                    bucket_size)));
    }
    opt.data_parallel = trainer_data_parallel(dp_size, overlap_grad_reduce, bucket_size);
    opt.optimizer_post_validation = opt_post_validation;
    auto en = parse_engine(engine);
    if (!en.ok()) return report_error(kCmd, en.status());
    opt.engine = *en;
    if (opt.engine != Engine::kTightpipe && (app.count("--comm-mode") > 0 || opt_post_validation)) {
      return report_error(
          kCmd, Status::invalid_argument(fmt::format(
                    "--engine {} sets how messages and the optimizer run; --comm-mode and "
                    "--optimizer-post-validation are tightpipe's own; hint: drop them, or "
                    "--engine tightpipe",
                    engine)));
    }
    if (Status st = check_data_parallel(opt.data_parallel); !st.ok()) return report_error(kCmd, st);
    if (Status st = check_core_sharing(opt_sharing); !st.ok()) return report_error(kCmd, st);
    opt.core_sharing = opt_sharing;
    sf.zb.post_validated = optimizer_post_validated(opt.engine, opt.optimizer_post_validation);
  }

  if (o_compare->count() > 0) {
    if (app.count("--schedule") > 0) {
      return report_error(
          kCmd, Status::invalid_argument("--compare and --schedule exclude each other; hint: list "
                                         "every schedule in --compare"));
    }
    if (!trace.empty() || !svg.empty()) {
      return report_error(kCmd, Status::invalid_argument(
                                    "--trace and --svg draw one schedule; hint: use --schedule "
                                    "NAME with them, not --compare"));
    }
    opt.record_timeline = false;
    auto specs = parse_schedule_specs("--compare", compare);
    if (!specs.ok()) return report_error(kCmd, specs.status());
    std::vector<SimResult> results;
    for (const ScheduleSpec& spec : *specs) {
      ScheduleFlags one = sf;
      one.schedule = spec.name;
      const GeneratorInfo* g = find_generator(spec.name);
      if (spec.chunks > 0) {
        one.vpp = spec.chunks;
      } else if (g->takes_chunks && g->fixed_chunks == 0) {
        one.vpp = sf.vpp > 0 ? sf.vpp : 2;
      } else {
        one.vpp = 0;  // the schedule's own (1, or 2 for zb-v)
      }
      auto s = load_schedule(one);
      if (!s.ok()) return report_error(kCmd, s.status().with_context("--compare " + spec.label()));
      auto r = run_one(*s, cf, opt);
      if (!r.ok()) return report_error(kCmd, r.status().with_context("--compare " + spec.label()));
      results.push_back(std::move(r).value());
    }
    const std::string text =
        json ? compare_results_to_json(results) + "\n" : format_compare_table(results);
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }

  opt.record_timeline = !trace.empty() || !svg.empty();
  auto s = load_schedule(sf);
  if (!s.ok()) return report_error(kCmd, s.status());
  auto r = run_one(*s, cf, opt);
  if (!r.ok()) return report_error(kCmd, r.status());
  const std::string text = json ? sim_result_to_json(*r) + "\n" : format_sim_table(*r);
  std::fputs(text.c_str(), stdout);
  if (!trace.empty()) {
    if (Status st = write_chrome_trace(trace, r->timeline); !st.ok()) return report_error(kCmd, st);
  }
  if (!svg.empty()) {
    SvgOptions so;
    so.title = fmt::format("{}  p={} v={} m={}  makespan {:.6g} {}  bubble {:.1f}%", r->schedule,
                           r->num_ranks, r->num_ranks ? r->num_stages / r->num_ranks : 0,
                           r->num_microbatches, r->makespan, r->time_unit, 100.0 * r->bubble_ratio);
    if (Status st = write_svg(svg, r->timeline, so); !st.ok()) return report_error(kCmd, st);
  }
  return kExitOk;
}

}  // namespace tightpipe::cli
