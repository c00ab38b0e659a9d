#include "table4.h"

#include <string>
#include <utility>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/check.h"

namespace tightpipe::testutil {

const ZbPaperSetting& table4_setting(const Table4Row& t) {
  for (const ZbPaperSetting& s : zb_paper_settings()) {
    if (std::string(s.model) == t.model && s.p == t.p && s.m == t.m && s.zb2p >= 0) return s;
  }
  TP_CHECK(false, "no profiled costs for Table 4's ", t.model, " p=", t.p, " m=", t.m);
  return zb_paper_settings().front();
}

std::vector<StageLayers> table4_layout(int32_t layers, int32_t p, int32_t v) {
  const int32_t stages = p * v;
  const int32_t per_rank = (layers + p - 1) / p;
  TP_CHECK(per_rank % v == 0, "layers=", layers, " p=", p, " v=", v);
  std::vector<StageLayers> out(stages);
  for (StageLayers& l : out) l.blocks = per_rank / v;
  for (int32_t k = -1; k < per_rank * p - layers - 1; ++k) out[(k + stages) % stages].blocks -= 1;
  out.front().embedding = true;
  out.back().head = true;
  return out;
}

CostModel table4_costs(const Table4Row& t, int32_t chunks, bool step_costs) {
  const ZbPaperSetting& s = table4_setting(t);
  CostModel compute = zb_paper_costs(s, chunks);  // not const: returned by move
  if (!step_costs) return compute;
  GptCostConfig g;
  g.layers = t.layers;
  g.hidden = s.h;
  g.heads = s.a;
  g.seq = kTable4Seq;
  g.micro_batch = 1;
  g.vocab = kTable4Vocab;
  g.param_dtype_bytes = 2;  // --fp16: fp16 parameters and gradients
  g.memory_bandwidth = kA100Sxm80GbHbmBytesPerSecond / 1000;  // bytes per ms, the costs' unit
  g.tied_embedding = true;
  g.latency = 0;
  g.bandwidth = static_cast<double>(kTable4Seq * s.h * 2) / s.c;
  const CostModel shape = gpt_cost_model_for_layout(g, table4_layout(t.layers, t.p, chunks), "");
  std::vector<StageCost> stages;
  for (int32_t st = 0; st < compute.num_stages(); ++st) {
    stages.push_back(compute.stage(st));
    stages.back().optimizer = shape.stage(st).optimizer;
  }
  return CostModel(std::move(stages), compute.link(), compute.time_unit(),
                   compute.source() + " + step costs of " + shape.source(), compute.real_bytes());
}

namespace {

SimOptions sim_options(Engine engine) {
  SimOptions o;
  o.engine = engine;
  o.record_timeline = false;
  return o;
}

}  // namespace

Result<double> table4_makespan(const Schedule& compute_only, const CostModel& c, Engine engine) {
  TP_ASSIGN_OR_RETURN(const Schedule low, lower(compute_only));
  TP_ASSIGN_OR_RETURN(const SimResult r, simulate(low, c, sim_options(engine)));
  return r.makespan;
}

Result<double> table4_steady_step(const Schedule& compute_only, const CostModel& c, Engine engine) {
  TP_ASSIGN_OR_RETURN(const Schedule low, lower(compute_only));
  TP_ASSIGN_OR_RETURN(const SteadyState ss, steady_state_step_time(low, c, sim_options(engine)));
  return ss.step_time;
}

Result<Table4Prediction> predict_table4(const Table4Row& t) {
  TP_ASSIGN_OR_RETURN(const Schedule one_f_one_b,
                      generate_schedule("1f1b", {.ranks = t.p, .microbatches = t.m}));
  TP_ASSIGN_OR_RETURN(
      const Schedule interleaved,
      generate_schedule("interleaved", {.ranks = t.p, .microbatches = t.m, .chunks = t.v}));
  auto build = [&](const char* name) {
    auto [c, o] = zb_paper_problem(table4_setting(t), name);
    o.objective = zb_objective_for(optimizer_post_validated(Engine::kZb, false));
    return build_auto_schedule(name, t.p, t.m, c, o);
  };
  TP_ASSIGN_OR_RETURN(const Schedule zb1p, build("zb-1p"));
  TP_ASSIGN_OR_RETURN(const Schedule zb2p, build("zb-2p"));
  auto ratios = [&](bool step_costs) -> Result<Table4Ratios> {
    const CostModel one = table4_costs(t, 1, step_costs);
    TP_ASSIGN_OR_RETURN(const double base, table4_makespan(one_f_one_b, one, Engine::kMegatron));
    TP_ASSIGN_OR_RETURN(
        const double il,
        table4_makespan(interleaved, table4_costs(t, t.v, step_costs), Engine::kMegatron));
    TP_ASSIGN_OR_RETURN(const double one_p, table4_steady_step(zb1p, one, Engine::kZb));
    TP_ASSIGN_OR_RETURN(const double two_p, table4_steady_step(zb2p, one, Engine::kZb));
    return Table4Ratios{base / il, base / one_p, base / two_p};
  };
  TP_ASSIGN_OR_RETURN(const Table4Ratios pipeline, ratios(false));
  TP_ASSIGN_OR_RETURN(const Table4Ratios full, ratios(true));
  return Table4Prediction{pipeline, full};
}

std::vector<Table4Compared> table4_compared(const Table4Row& t, const Table4Ratios& r) {
  return {{"1F1B-I", r.interleaved, t.interleaved / t.one_f_one_b, t.interleaved},
          {"ZB-1p", r.zb1p, t.zb1p / t.one_f_one_b, t.zb1p},
          {"ZB-2p", r.zb2p, t.zb2p / t.one_f_one_b, t.zb2p}};
}

}  // namespace tightpipe::testutil
