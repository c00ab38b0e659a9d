#include "schedule_source.h"

#include <fmt/format.h>

#include "tightpipe/base.h"

namespace tightpipe::cli {

void add_schedule_flags(CLI::App& app, ScheduleFlags& f) {
  std::vector<std::string> names;
  for (const auto& g : schedule_generators()) names.push_back(g.name);
  app.add_option("--schedule,--pipeline-schedule", f.schedule,
                 "schedule name (" + join(names, ", ") + ") or a CSV/JSON schedule file")
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
  const std::string& name = f.schedule;
  const bool is_file = name.ends_with(".csv") || name.ends_with(".json");
  if (is_file) {
    TP_ASSIGN_OR_RETURN(std::string text, read_file(name));
    TP_ASSIGN_OR_RETURN(Schedule s, name.ends_with(".csv") ? parse_csv(text, name)
                                                            : parse_json(text, name));
    return compute_only(s);
  }
  GeneratorOptions o;
  o.ranks = f.pp;
  o.microbatches = f.microbatches;
  o.group_size = f.group_size;
  o.chunks = f.vpp;
  if (o.chunks == 0) {
    const GeneratorInfo* g = find_generator(name);
    o.chunks = g && g->fixed_chunks > 1 ? g->fixed_chunks : 1;
  }
  return generate_schedule(name, o);
}

}  // namespace tightpipe::cli
