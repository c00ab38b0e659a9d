#include "train_pipeline.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "tightpipe/base.h"

namespace tightpipe::cli {

namespace {
constexpr double kMaxPipelineTimeout = 7 * 24 * 3600.0;  // a week (docs/train_limits.md)
}  // namespace

void add_pipeline_flags(CLI::App& app, PipelineFlags& f) {
  std::vector<std::string> names;
  for (const auto& g : schedule_generators()) names.push_back(g.name);
  auto* g = app.add_option_group("pipeline", "pipeline schedule, ranks and measurement");
  g->add_option("--schedule,--pipeline-schedule", f.schedule,
                "schedule: " + join(names, ", ") +
                    ", zb-auto, zb-1p, zb-2p, zb-v-auto (built from costs measured in the first "
                    "steps), or a CSV/JSON file (default 1f1b)");
  add_chunk_flags(*g, f.vpp, f.group_size, f.layers_per_virtual_stage);
  g->add_option("--transport", f.transport,
                "threads (one process, the default) or mpi (mpirun -np P tightpipe train ...)")
      ->capture_default_str();
  g->add_option("--emulate-link", f.emulate_link,
                "add latency and bandwidth to every message, e.g. latency_us=50,gbps=10");
  g->add_option("--compute", f.compute,
                "real (the model) or emulated (each action sleeps its --cost)")
      ->capture_default_str();
  g->add_option("--cost", f.cost,
                "emulated compute: f=,i=,w=[,b=] milliseconds per microbatch through a whole rank")
      ->capture_default_str();
  g->add_flag("--no-overlap-p2p-communication", f.no_overlap,
              "blocking receives just before use and blocking sends just after (default: receives "
              "posted early, sends never block compute)");
  g->add_flag("--overlap-p2p-communication{false}", f.no_overlap,
              "the default: receives posted early, sends never block compute");
  g->add_option("--trace", f.trace,
                "write a Chrome trace (Perfetto) of the last step, or of the steps "
                "--profile-step-start..end");
  g->add_option("--profile-step-start", f.profile_step_start,
                "Megatron's: the first step --trace records (counted from 0; with "
                "--profile-step-end)")
      ->check(CLI::Range(int64_t{0}, kMaxTrainIters));
  g->add_option("--profile-step-end", f.profile_step_end,
                "Megatron's: the step after the last one --trace records")
      ->check(CLI::Range(int64_t{0}, kMaxTrainIters));
  g->add_option("--pipeline-timeout", f.timeout_s,
                "seconds any rank waits for a peer before the run stops with an error")
      ->capture_default_str();
  g->add_option("--num-workers", f.num_workers, "data loader threads")->capture_default_str();
  g->add_option("--prefetch", f.prefetch, "data loader prefetch depth")->capture_default_str();
  g->add_option("--on-corrupt", f.on_corrupt, "corrupt shard: fail or skip")->capture_default_str();
  g->add_option("--emulate-data-delay-ms", f.data_delay_ms,
                "make the loader sleep this long per batch (to study data waits)");
  g->add_option("--measure-warmup-steps", f.warmup_steps, "steps left out of the summary's medians")
      ->capture_default_str();
  add_zb_auto_flags(*g, f.zb);
  g->add_option("--auto-schedule-profile-steps", f.auto_profile_steps,
                "zb-auto, zb-1p, zb-2p (zb-v-auto): steps run on zb-h1 (zb-v) to measure the costs "
                "the schedule is built from")
      ->capture_default_str();
}

Status run_pipeline(TrainOptions o, const PipelineFlags& f) {
  o.schedule = f.schedule.empty() ? "1f1b" : f.schedule;
  ZbAutoFlags zb = f.zb;
  zb.post_validated = o.optimizer_post_validation;
  TP_ASSIGN_OR_RETURN(o.auto_schedule, zb_auto_options(zb, o.schedule));
  o.auto_schedule_profile_steps = f.auto_profile_steps;
  o.vpp = f.vpp;
  TP_RETURN_IF_ERROR(resolve_chunks(o.vpp, f.layers_per_virtual_stage, o.model.num_layers, o.pp));
  o.group_size = f.group_size;
  TP_ASSIGN_OR_RETURN(o.world.kind, parse_transport_kind(f.transport));
  if (!f.emulate_link.empty()) {
    auto link = parse_link_options(f.emulate_link);
    if (!link.ok()) return link.status().with_context("--emulate-link");
    o.world.link = *link;
  }
  if (f.compute != "real" && f.compute != "emulated") {
    return Status::invalid_argument(
        fmt::format("--compute '{}': expected real or emulated; hint: --compute emulated "
                    "--cost f=4,b=8 times each action instead of computing it",
                    f.compute));
  }
  o.exec.emulated = f.compute == "emulated";
  if (o.exec.emulated) {
    TP_ASSIGN_OR_RETURN(o.exec.costs, EmulatedCompute::parse(f.cost));
  }
  o.exec.overlap_p2p = !f.no_overlap;
  if (!(f.timeout_s > 0 && f.timeout_s <= kMaxPipelineTimeout)) {  // NaN and inf refused
    return Status::invalid_argument(fmt::format(
        "--pipeline-timeout {}: must be in (0, {}] seconds; hint: seconds a rank waits for a "
        "peer, e.g. 120",
        f.timeout_s, kMaxPipelineTimeout));
  }
  o.exec.timeout_s = f.timeout_s;
  o.trace_path = f.trace;
  o.profile_step_start = f.profile_step_start;
  o.profile_step_end = f.profile_step_end;
  o.data.num_workers = f.num_workers;
  o.data.prefetch = f.prefetch;
  TP_ASSIGN_OR_RETURN(o.data.on_corrupt, parse_on_corrupt(f.on_corrupt));
  o.data_delay_ms = f.data_delay_ms;
  o.warmup_steps_excluded = f.warmup_steps;
  o.log = [](const std::string& line) {
    std::fputs(line.c_str(), stdout);
    std::fputc('\n', stdout);
    std::fflush(stdout);
  };
  TP_ASSIGN_OR_RETURN(TrainSummary s, run_training(o));
  (void)s;
  return OkStatus();
}

}  // namespace tightpipe::cli
