#include "schedule_source.h"

#include <fmt/format.h>

#include <cctype>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"

namespace tightpipe::cli {

void add_schedule_flags(CLI::App& app, ScheduleFlags& f) {
  app.add_option("--schedule,--pipeline-schedule", f.schedule,
                 "schedule name (" + generator_names() +
                     "; zb-auto, zb-1p, zb-2p from the costs) or a CSV/JSON schedule file")
      ->capture_default_str();
  app.add_option("--pp,--pipeline-model-parallel-size", f.pp, "pipeline ranks p")
      ->capture_default_str();
  app.add_option("--microbatches,--num-microbatches", f.microbatches, "microbatches per step m")
      ->capture_default_str();
  app.add_option(
      "--vpp,--num-virtual-stages-per-pipeline-rank,--virtual-pipeline-model-parallel-size", f.vpp,
      "chunks (virtual stages) per rank v; default 1, and 2 for zb-v");
  app.add_option("--microbatch-group-size,--microbatch-group-size-per-virtual-pipeline-stage",
                 f.group_size, "interleaved: microbatches per group (default --pp)");
}

void add_cost_flags(CLI::App& app, CostFlags& f) {
  auto* o_cost = app.add_option(
      "--cost", f.cost,
      "uniform whole-rank costs f=1,i=1,w=1[,b=i+w][,comm=0][,bytes=0][,act=1][,act_after_i=1]"
      "[,input=0]; per chunk the compute costs divide by v (default f=1,i=1,w=1)");
  auto* o_costs =
      app.add_option("--costs", f.costs, "per-stage cost table, JSON (docs/cost_model.md)");
  auto* o_model = app.add_option(
      "--model", f.model,
      "costs derived from a GPT config and device: layers=..,hidden=..,heads=..,seq=..[,mbs=1]"
      "[,vocab=0][,flops=100e12][,latency=1e-5][,bandwidth=25e9] (times in seconds)");
  o_cost->excludes(o_costs)->excludes(o_model);
  o_costs->excludes(o_model);
}

void add_zb_auto_flags(CLI::App& app, ZbAutoFlags& f) {
  app.add_option_function<double>(
      "--memory-limit", [&f](const double& v) { f.memory_limit = v; },
      "zb-auto: the most whole-rank microbatch activations any rank may hold (at "
      "least 1; default --pp, 1F1B's memory; zb-1p and zb-2p set p and 2p)");
  app.add_option_function<double>(
      "--w-memory-fraction", [&f](const double& v) { f.w_memory_fraction = v; },
      "zb-auto: share of an F's activations that I keeps until W, in [0, 1] (default: "
      "act_after_i of the costs, 0.5 where they have no activation sizes)");
  app.add_option("--objective", f.objective,
                 "zb-auto: makespan (the step, every stage from 0) or span (max per-stage span)");
  app.add_option_function<double>(
      "--search-budget-ms", [&f](const double& v) { f.search_budget_ms = v; },
      fmt::format("zb-auto: milliseconds of local search after the greedy, in [0, {}]; 0: the "
                  "greedy's schedule (default {})",
                  kZbMaxSearchBudgetMs, kZbDefaultSearchBudgetMs));
}

Result<CostModel> make_cost_model(const CostFlags& f, const Schedule& schedule) {
  if (!f.costs.empty()) {
    auto text = read_file(f.costs);
    if (!text.ok()) {
      return Status::invalid_argument(fmt::format(
          "--costs {}: {}; hint: give the path of a JSON cost table (docs/cost_model.md)", f.costs,
          text.status().message()));
    }
    TP_ASSIGN_OR_RETURN(CostModel m, parse_cost_table(*text, "--costs " + f.costs));
    TP_RETURN_IF_ERROR(m.covers(schedule));
    return m;
  }
  if (!f.model.empty()) {
    TP_ASSIGN_OR_RETURN(GptCostConfig g, parse_gpt_cost_config(f.model));
    return gpt_cost_model(g, schedule.num_ranks, schedule.num_stages);
  }
  TP_ASSIGN_OR_RETURN(UniformCosts u, parse_uniform_costs(f.cost.empty() ? "f=1,i=1,w=1" : f.cost));
  return uniform_cost_model(u, schedule.num_ranks, schedule.num_stages);
}

namespace {

// zb-auto, zb-1p or zb-2p for the flags' shape and costs.
Result<Schedule> load_zb_auto(const ScheduleFlags& f) {
  if (f.vpp > 1) {
    return Status::invalid_argument(fmt::format(
        "--vpp {}: schedule '{}' runs exactly 1 chunk per rank; hint: drop --vpp, or use zb-v "
        "for 2 chunks",
        f.vpp, f.schedule));
  }
  ZbAutoOptions o;
  o.memory_limit = f.zb.memory_limit;
  if (const double implied = zb_auto_name_memory_limit(f.schedule, f.pp); implied > 0) {
    if (f.zb.memory_limit && *f.zb.memory_limit != implied) {
      return Status::invalid_argument(fmt::format(
          "--memory-limit {}: schedule '{}' implies {}; hint: use --schedule zb-auto with "
          "--memory-limit, or drop --memory-limit",
          *f.zb.memory_limit, f.schedule, implied));
    }
    o.memory_limit = implied;
  }
  o.w_memory_fraction = f.zb.w_memory_fraction;
  if (!f.zb.objective.empty()) {
    TP_ASSIGN_OR_RETURN(o.objective, parse_zb_objective(f.zb.objective));
  }
  o.search_budget_ms = f.zb.search_budget_ms.value_or(kZbDefaultSearchBudgetMs);
  TP_RETURN_IF_ERROR(o.validate());
  if (f.pp < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: zb-auto needs at least 1 pipeline rank; hint: pass --pp 1 or more", f.pp));
  }
  Schedule shape;  // what the cost model must cover: p stages
  shape.name = f.schedule;
  shape.num_ranks = f.pp;
  shape.num_stages = f.pp;
  TP_ASSIGN_OR_RETURN(CostModel costs, make_cost_model(f.costs, shape));
  TP_ASSIGN_OR_RETURN(Schedule s, build_zb_auto(f.pp, f.microbatches, costs, o));
  s.name = f.schedule;  // zb-1p and zb-2p keep their names in tables and JSON
  for (char& c : s.name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

Result<Schedule> load_schedule(const ScheduleFlags& f) {
  if (is_zb_auto_name(f.schedule)) return load_zb_auto(f);
  const char* zb_flag = f.zb.memory_limit         ? "--memory-limit"
                        : f.zb.w_memory_fraction  ? "--w-memory-fraction"
                        : !f.zb.objective.empty() ? "--objective"
                        : f.zb.search_budget_ms   ? "--search-budget-ms"
                                                  : nullptr;
  if (zb_flag != nullptr) {
    return Status::invalid_argument(fmt::format(
        "{}: only zb-auto, zb-1p and zb-2p take it, not '{}'; hint: pass --schedule zb-auto, or "
        "drop {}",
        zb_flag, f.schedule, zb_flag));
  }
  return schedule_from_name_or_file(
      f.schedule,
      {.ranks = f.pp, .microbatches = f.microbatches, .chunks = f.vpp, .group_size = f.group_size});
}

}  // namespace tightpipe::cli
