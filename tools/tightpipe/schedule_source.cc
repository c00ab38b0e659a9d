#include "schedule_source.h"

#include <fmt/format.h>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/flag_checks.h"
#include "tightpipe/input_file.h"
#include "tightpipe/model.h"

namespace tightpipe::cli {

CLI::Validator count_flag(int64_t limit, const std::string& what, const std::string& hint) {
  return CLI::Validator(
      [=](std::string& in) -> std::string {
        auto v = parse_int(in);
        if (!v.ok()) return v.status().message();
        if (*v >= 1 && *v <= limit) return "";
        return fmt::format("{} is outside [1, {}] ({}, tightpipe's limit); hint: {}", *v, limit,
                           what, hint);
      },
      fmt::format("INT in [1, {}]", limit));
}

void add_schedule_flags(CLI::App& app, ScheduleFlags& f) {
  app.add_option("--schedule,--pipeline-schedule", f.schedule,
                 "schedule name (" + generator_names() +
                     "; zb-auto, zb-1p, zb-2p, zb-v-auto, v-half, v-min from the costs) or a "
                     "CSV/JSON schedule file")
      ->capture_default_str();
  app.add_option("--pp,--pipeline-model-parallel-size", f.pp, "pipeline ranks p")
      ->capture_default_str()
      ->check(count_flag(kMaxRanks, "pipeline ranks", "pass --pp 1 or more"));
  app.add_option("--microbatches,--num-microbatches", f.microbatches, "microbatches per step m")
      ->capture_default_str()
      ->check(
          count_flag(kMaxMicrobatches, "microbatches per step", "pass --microbatches 1 or more"));
  add_chunk_flags(app, f.vpp, f.group_size, f.layers_per_virtual_stage);
  app.add_option("--num-layers", f.num_layers,
                 "the model's transformer layers, for --num-layers-per-virtual-pipeline-stage")
      ->check(count_flag(nn::kMaxNumLayers, "transformer layers", "e.g. --num-layers 32"));
}

void add_chunk_flags(CLI::App& app, int32_t& vpp, int32_t& group_size,
                     int64_t& layers_per_virtual_stage) {
  auto* v = app.add_option(
                   "--vpp,--num-virtual-stages-per-pipeline-rank,"
                   "--virtual-pipeline-model-parallel-size",
                   vpp,
                   "chunks (virtual stages) per rank v; default 1, and 2 for zb-v, zb-v-auto, "
                   "dualpipev and dualpipe")
                ->check(count_flag(kMaxChunks, "chunks per rank",
                                   "leave --vpp out for the schedule's default (1, or 2 for zb-v "
                                   "and dualpipe)"));
  app.add_option("--num-layers-per-virtual-pipeline-stage", layers_per_virtual_stage,
                 "Megatron's way to set v: transformer layers per chunk, v = --num-layers / "
                 "(--pp x this); not with --vpp")
      ->check(count_flag(nn::kMaxNumLayers, "layers per virtual pipeline stage", "e.g. 2"))
      ->excludes(v);
  app.add_option("--microbatch-group-size,--microbatch-group-size-per-virtual-pipeline-stage",
                 group_size, "interleaved: microbatches per group (default --pp)")
      ->check(count_flag(kMaxMicrobatches, "microbatches per group",
                         "leave it out for the default, --pp (as Megatron)"));
}

void add_cost_flags(CLI::App& app, CostFlags& f) {
  auto* o_cost = app.add_option_function<std::string>(
      "--cost", [&f](const std::string& v) { f.cost = v; },
      "uniform whole-rank costs f=1,i=1,w=1[,b=i+w][,comm=0][,overhead=0][,bytes=0][,act=1]"
      "[,act_after_i=1][,input=0][,params=N,hbm=BYTES_PER_UNIT (the optimizer step per rank)]; per "
      "chunk the compute costs divide by v (default f=1,i=1,w=1)");
  auto* o_costs =
      app.add_option("--costs", f.costs, "per-stage cost table, JSON (docs/cost_model.md)");
  auto* o_model = app.add_option(
      "--model", f.model,
      "costs derived from a GPT config and device: layers=..,hidden=..,heads=..,seq=..[,mbs=1]"
      "[,vocab=0][,flops=100e12][,latency=1e-5][,bandwidth=25e9][,overhead=0][,hbm=0 (bytes/s: "
      "times the optimizer step)][,opt_step_bytes=54][,tied=0] (times in seconds)");
  o_cost->excludes(o_costs)->excludes(o_model);
  o_costs->excludes(o_model);
  app.add_flag("--bf16", f.bf16,
               "BF16 mixed precision (Megatron's flag): with --model, 2-byte activations, "
               "messages and parameters (the --model default already; act_bytes= or "
               "param_bytes= other than 2 is refused with it); with --cost or --costs it changes "
               "nothing: those carry their own bytes (a table measured by a --bf16 run already "
               "holds bf16 messages)");
  app.add_option("--pipeline-layout", f.layout,
                 "with --model: how the layers split over the stages, a layout like "
                 "\"E,t*3|t*3|t,L\" (docs/cost_model.md), or auto: the split with the smallest "
                 "simulated makespan of this schedule (default: even, the first stages get the "
                 "remainder)");
}

void add_host_time_flag(CLI::App& app, CostFlags& f) {
  app.add_option("--host-time-us", f.host_time_us,
                 "the engine's host time around each compute action, microseconds, added to "
                 "every stage's costs: f=..,i=..,w=..,b=..[,f_module=..] (a module a stage; "
                 "keys left out are 0), as measured once per machine by "
                 "tightpipe.peers.compare.measure_engine_host_time (Megatron-Core, DeepSpeed) or "
                 "tightpipe.torch.measure_host_time (PyTorch); the costs need a time unit");
}

void add_zb_auto_flags(CLI::App& app, ZbAutoFlags& f) {
  app.add_option_function<double>(
      "--memory-limit", [&f](const double& v) { f.memory_limit = v; },
      "zb-auto, zb-v-auto: the most whole-rank microbatch activations any rank may hold (at "
      "least 1; default --pp, 1F1B's memory; zb-1p and zb-2p set p and 2p)");
  app.add_option_function<double>(
      "--w-memory-fraction", [&f](const double& v) { f.w_memory_fraction = v; },
      "zb-auto, zb-v-auto: share of an F's activations that I keeps until W, in [0, 1] (default: "
      "act_after_i of the costs (--cost: 1 unless it sets act_after_i), 0.5 where they have no "
      "activation sizes)");
  app.add_option("--objective", f.objective,
                 "zb-auto, zb-v-auto: makespan (the step, every stage from 0) or span (max "
                 "per-stage span); default: span where the optimizer is post-validated (--engine "
                 "zb, --optimizer-post-validation), makespan otherwise");
  app.add_option_function<double>(
      "--search-budget-ms", [&f](const double& v) { f.search_budget_ms = v; },
      fmt::format("zb-auto, zb-v-auto: milliseconds of local search after the greedy, in [0, "
                  "{}]; 0: the greedy's schedule (default: {} simulations, the same schedule on "
                  "every machine)",
                  kZbMaxSearchBudgetMs, kZbDefaultSearchEvaluations));
}

namespace {

std::string layout_string(const std::vector<StageLayers>& split) {
  std::vector<int> blocks;
  for (const StageLayers& l : split) blocks.push_back(l.blocks);
  return nn::layout_from_blocks(blocks);
}

// --model costs under the split --pipeline-layout asks for.
Result<CostChoice> gpt_costs(const CostFlags& f, const Schedule& schedule, const SimOptions& sim) {
  TP_ASSIGN_OR_RETURN(GptCostConfig g, parse_gpt_cost_config(f.model));
  if (f.bf16) {  // the --model default is Megatron's bf16 already: only an explicit key differs
    for (const auto& [key, bytes] : {std::pair{"act_bytes", g.act_dtype_bytes},
                                     std::pair{"param_bytes", g.param_dtype_bytes}}) {
      if (bytes != 2) {
        return Status::invalid_argument(fmt::format(
            "--model {}={} with --bf16: bf16 values are 2 bytes; hint: drop {}= (--bf16 sets 2) "
            "or drop --bf16",
            key, bytes, key));
      }
    }
  }
  if (f.layout.empty()) {
    TP_ASSIGN_OR_RETURN(CostModel m, gpt_cost_model(g, schedule.num_ranks, schedule.num_stages));
    return CostChoice{std::move(m), layout_string(even_layer_split(g.layers, schedule.num_stages))};
  }
  std::vector<StageLayers> split;
  if (f.layout == "auto") {
    if (schedule.programs.empty()) {
      return Status::invalid_argument(fmt::format(
          "--pipeline-layout auto with schedule '{}': its programs are built from the costs, so "
          "no split can be chosen for them; hint: give a layout string, or choose one with "
          "`simulate --schedule NAME --pipeline-layout auto` first",
          schedule.name));
    }
    TP_ASSIGN_OR_RETURN(LayerSplit best,
                        choose_layer_split(gpt_layer_costs(g), schedule,
                                           static_cast<int32_t>(g.layers), {.sim = sim}));
    split = std::move(best.stages);
  } else {
    nn::GptConfig shape;  // only the layer count matters to the partition
    shape.num_layers = static_cast<int>(g.layers);
    auto specs = nn::partition_layers(shape, schedule.num_stages, f.layout);
    if (!specs.ok()) {
      return specs.status().with_context(fmt::format("--model layers={}", g.layers));
    }
    for (const nn::StageSpec& s : *specs) {
      split.push_back({s.has_embedding, s.num_layers, s.has_head});
    }
  }
  const std::string layout = layout_string(split);
  return CostChoice{gpt_cost_model_for_layout(g, split, layout), layout};
}

}  // namespace

Result<CostModel> make_cost_model(const CostFlags& f, const Schedule& schedule) {
  TP_ASSIGN_OR_RETURN(CostChoice c, make_costs(f, schedule));
  return std::move(c.model);
}

namespace {

Result<CostChoice> costs_from_flags(const CostFlags& f, const Schedule& schedule,
                                    const SimOptions& sim);

// DualPipe's costs: those of its model stages, the same for both copies of each (a --costs table
// gives every stage id its own row and is taken as it is).
Result<CostChoice> costs_for_directions(const CostFlags& f, const Schedule& schedule,
                                        const SimOptions& sim) {
  if (f.layout == "auto") {
    return Status::invalid_argument(fmt::format(
        "--pipeline-layout auto: not yet for schedule '{}' ({} directions); hint: give a layout "
        "string for its {} model stages",
        schedule.name, schedule.directions, schedule.stages_per_direction()));
  }
  Schedule one = schedule;  // the shape of one direction: the model stages
  one.directions = 1;
  one.num_stages = schedule.stages_per_direction();
  one.stage_to_rank.resize(one.num_stages);
  one.programs.clear();
  TP_ASSIGN_OR_RETURN(CostChoice c, costs_from_flags(f, one, sim));
  c.model = expand_to_directions(c.model, schedule);
  return c;
}

// The costs the flags name, as given (make_costs checks their values).
Result<CostChoice> costs_from_flags(const CostFlags& f, const Schedule& schedule,
                                    const SimOptions& sim) {
  if (schedule.directions > 1 && f.costs.empty()) return costs_for_directions(f, schedule, sim);
  if (!f.layout.empty() && f.model.empty()) {
    return Status::invalid_argument(
        fmt::format("--pipeline-layout '{}': only --model costs know the layers; hint: add --model "
                    "layers=..,hidden=..,heads=..,seq=.. or drop --pipeline-layout",
                    printable(f.layout)));
  }
  if (!f.costs.empty()) {
    auto read = read_input_file("--costs", f.costs, input_kind::kCostTable);
    // A flag's file that cannot be read is a usage error (exit 2), as the flag's other errors.
    if (!read.ok()) return Status::invalid_argument(std::string(read.status().message()));
    std::string text = std::move(read.value());
    TP_ASSIGN_OR_RETURN(CostModel m, parse_cost_table(text, "--costs " + f.costs));
    TP_RETURN_IF_ERROR(m.covers(schedule));
    return CostChoice{std::move(m), ""};
  }
  if (!f.model.empty()) return gpt_costs(f, schedule, sim);
  TP_ASSIGN_OR_RETURN(UniformCosts u, parse_uniform_costs(f.cost.value_or("f=1,i=1,w=1")));
  return CostChoice{uniform_cost_model(u, schedule.num_ranks, schedule.num_stages), ""};
}

}  // namespace

Result<CostChoice> make_costs(const CostFlags& f, const Schedule& schedule, const SimOptions& sim) {
  TP_ASSIGN_OR_RETURN(CostChoice c, costs_from_flags(f, schedule, sim));
  TP_RETURN_IF_ERROR(c.model.validate());
  if (!f.host_time_us.empty()) {
    constexpr std::string_view kFlag = "--host-time-us";
    TP_ASSIGN_OR_RETURN(RuntimeHostTime h, parse_runtime_host_time_us(f.host_time_us, kFlag));
    TP_ASSIGN_OR_RETURN(h, host_time_in_unit(h, c.model.time_unit(), kFlag, c.model.source()));
    // No engine here knows more than one module a stage (tune's PyTorch stages do).
    c.model = with_host_time(c.model, h, std::vector<int32_t>(c.model.num_stages(), 1));
    TP_RETURN_IF_ERROR(c.model.validate());
  }
  return c;
}

Result<ZbAutoOptions> zb_auto_options(const ZbAutoFlags& f, const std::string& schedule) {
  ZbAutoOptions o;
  if (!is_auto_schedule_name(schedule)) {
    const char* flag = f.memory_limit         ? "--memory-limit"
                       : f.w_memory_fraction  ? "--w-memory-fraction"
                       : !f.objective.empty() ? "--objective"
                       : f.search_budget_ms   ? "--search-budget-ms"
                                              : nullptr;
    if (flag == nullptr) return o;
    return Status::invalid_argument(
        fmt::format("{}: only zb-auto, zb-1p, zb-2p, zb-v-auto, v-half and v-min take it, not "
                    "'{}'; hint: pass --schedule "
                    "zb-auto (or zb-v-auto), or drop {}",
                    flag, schedule, flag));
  }
  o.memory_limit = f.memory_limit;  // build_auto_schedule applies (and checks) zb-1p's, zb-2p's
  o.w_memory_fraction = f.w_memory_fraction;
  o.search_budget_ms = f.search_budget_ms;
  o.objective = zb_objective_for(f.post_validated);
  if (!f.objective.empty()) {
    TP_ASSIGN_OR_RETURN(o.objective, parse_zb_objective(f.objective));
  }
  TP_RETURN_IF_ERROR(o.validate());
  return o;
}

namespace {

// zb-auto, zb-1p, zb-2p or zb-v-auto for the flags' shape and costs.
Result<Schedule> load_auto_schedule(const ScheduleFlags& f) {
  const int32_t chunks = auto_schedule_chunks(f.schedule);
  TP_RETURN_IF_ERROR(check_auto_schedule_vpp(f.schedule, f.vpp));
  TP_ASSIGN_OR_RETURN(ZbAutoOptions o, zb_auto_options(f.zb, f.schedule));
  if (f.pp < 1) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: {} needs at least 1 pipeline rank; hint: pass --pp 1 or more", f.pp, f.schedule));
  }
  Schedule shape;  // what the cost model must cover: chunks * p stages
  shape.name = f.schedule;
  shape.num_ranks = f.pp;
  shape.num_stages = chunks * f.pp;
  TP_ASSIGN_OR_RETURN(CostModel costs, make_cost_model(f.costs, shape));
  return build_auto_schedule(f.schedule, f.pp, f.microbatches, costs, o);
}

}  // namespace

Status resolve_chunks(int32_t& vpp, int64_t layers_per_virtual_stage, int64_t num_layers,
                      int32_t pp) {
  if (layers_per_virtual_stage <= 0) return OkStatus();
  TP_ASSIGN_OR_RETURN(
      vpp, chunks_from_layers_per_virtual_stage(num_layers, pp, layers_per_virtual_stage));
  return OkStatus();
}

Result<Schedule> load_schedule(const ScheduleFlags& f) {
  if (is_auto_schedule_name(f.schedule)) return load_auto_schedule(f);
  TP_RETURN_IF_ERROR(zb_auto_options(f.zb, f.schedule).status());  // refuses the zb flags
  return schedule_from_name_or_file(
      f.schedule,
      {.ranks = f.pp, .microbatches = f.microbatches, .chunks = f.vpp, .group_size = f.group_size});
}

}  // namespace tightpipe::cli
