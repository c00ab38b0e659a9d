#include "schedule_source.h"

#include <fmt/format.h>

#include "tightpipe/base.h"

namespace tightpipe::cli {

void add_schedule_flags(CLI::App& app, ScheduleFlags& f) {
  app.add_option("--schedule,--pipeline-schedule", f.schedule,
                 "schedule name (" + generator_names() + ") or a CSV/JSON schedule file")
      ->capture_default_str();
  app.add_option("--pp,--pipeline-model-parallel-size", f.pp, "pipeline ranks p")
      ->capture_default_str();
  app.add_option("--microbatches,--num-microbatches", f.microbatches,
                 "microbatches per step m")
      ->capture_default_str();
  app.add_option("--vpp,--num-virtual-stages-per-pipeline-rank,--virtual-pipeline-model-parallel-size",
                 f.vpp,
                 "chunks (virtual stages) per rank v; default 1, and 2 for zb-v");
  app.add_option("--microbatch-group-size,--microbatch-group-size-per-virtual-pipeline-stage",
                 f.group_size, "interleaved: microbatches per group (default --pp)");
}

Result<Schedule> load_schedule(const ScheduleFlags& f) {
  return schedule_from_name_or_file(f.schedule, {.ranks = f.pp,
                                                 .microbatches = f.microbatches,
                                                 .chunks = f.vpp,
                                                 .group_size = f.group_size});
}

}  // namespace tightpipe::cli
