// resolve_auto_layout (train_internal.h): `train --pipeline-layout auto` becomes a layout string.
#include <fmt/format.h>

#include "tightpipe/checkpoint.h"
#include "tightpipe/simulator.h"
#include "train_internal.h"

namespace tightpipe::train_internal {

// The analytic costs of the trained model: gpt_cost_model's formulas with the model's activation
// dtype (float32, or bf16 under --bf16: the stash and the stage boundaries are bf16), float32
// parameters, gradients and AdamW moments, plus under bf16 the bf16 copy of the matmul weights
// (2 bytes per weight of the 4 matmuls of a block and of the LM head), and a free link (every
// split sends the same messages).
namespace {

GptCostConfig analytic_config(const nn::GptConfig& m) {
  GptCostConfig g;
  g.layers = m.num_layers;
  g.hidden = m.hidden_size;
  g.heads = m.num_heads;
  g.seq = m.seq_length;
  g.micro_batch = m.micro_batch_size;
  g.vocab = m.vocab_size;
  g.latency = 0;
  g.bandwidth = 0;
  const bool bf16 = m.precision == nn::Precision::kBf16;
  g.act_dtype_bytes = bf16 ? 2 : 4;
  g.param_dtype_bytes = 4;
  g.grad_dtype_bytes = 4;
  g.optimizer_bytes_per_param = 8;
  return g;
}

}  // namespace

LayerCosts analytic_layer_costs(const nn::GptConfig& m) {
  LayerCosts c = gpt_layer_costs(analytic_config(m));
  const bool bf16 = m.precision == nn::Precision::kBf16;
  if (bf16) {
    const double h = m.hidden_size;
    c.block.param_bytes += 2 * 12 * h * h;
    c.head.param_bytes += 2 * double(m.vocab_size) * h;
  }
  c.source = fmt::format("analytic FLOPs of {} layers x {}, T={}, B={}, V={}{}", m.num_layers,
                         m.hidden_size, m.seq_length, m.micro_batch_size, m.vocab_size,
                         bf16 ? ", bf16" : "");
  return c;
}

std::vector<RankFlops> step_flops_per_rank(const RunPlan& plan) {
  GptCostConfig g = analytic_config(plan.opt.model);
  g.flops = 1;  // every time of the costs is then its FLOPs
  const LayerCosts layers = gpt_layer_costs(g);
  const std::vector<StageLayers> split = stage_layers(plan.specs);
  const Schedule& sched = plan.lowered;
  const CostModel per_stage = expand_to_directions(cost_model_for_layout(layers, split, ""), sched);
  std::vector<RankFlops> out(sched.num_ranks);
  for (int32_t r = 0; r < sched.num_ranks; ++r) {
    for (const Action& a : sched.programs[r]) {
      if (a.type != ActionType::kForward) continue;  // each F has its I + W (or B) on the same rank
      const StageCost& c = per_stage.stage(a.stage);
      out[r].model += c.f + c.i + c.w;
      // Full recompute re-runs each block's forward before its backward (not the head's).
      if (plan.opt.recompute.enabled())
        out[r].recompute += layers.block.f * split[sched.model_stage(a.stage)].blocks;
    }
  }
  return out;
}

std::vector<StageLayers> stage_layers(const std::vector<nn::StageSpec>& specs) {
  std::vector<StageLayers> out;
  for (const nn::StageSpec& s : specs) out.push_back({s.has_embedding, s.num_layers, s.has_head});
  return out;
}

Status resolve_auto_layout(RunPlan& plan) {
  TrainOptions& opt = plan.opt;
  if (opt.pipeline_layout != "auto") {
    if (opt.layout_costs) {
      return Status::invalid_argument(fmt::format(
          "--layout-costs-from needs --pipeline-layout auto (got '{}'): the measured costs only "
          "choose a split; hint: pass --pipeline-layout auto, or drop --layout-costs-from",
          opt.pipeline_layout));
    }
    return OkStatus();
  }
  if (opt.megatron_split.any()) {
    return Status::invalid_argument(
        "--pipeline-layout auto with --decoder-first/last-pipeline-num-layers or "
        "--account-for-*-in-pipeline-split: auto chooses the whole split itself; hint: drop the "
        "Megatron split flags, or give them without --pipeline-layout");
  }
  // A resumed run keeps the split its checkpoint was trained with (costs re-measured since, or an
  // auto schedule built since, could choose another one, which the weights do not fit).
  if (!opt.load_dir.empty()) {
    opt.pipeline_layout = nn::format_layout(plan.load.manifest.stages);
    plan.layout_note =
        fmt::format("--pipeline-layout auto: {} (the split of the checkpoint --load {})",
                    opt.pipeline_layout, opt.load_dir);
    return OkStatus();
  }
  const LayerCosts costs = opt.layout_costs ? *opt.layout_costs : analytic_layer_costs(opt.model);
  LayerSplitOptions so;
  so.sim = run_sim_options(plan);
  so.sim.recompute = opt.recompute.enabled() ? Recompute::kFull : Recompute::kNone;
  auto best = choose_layer_split(costs, plan.lowered, opt.model.num_layers, so);
  if (!best.ok()) return best.status().with_context("--pipeline-layout auto");
  std::vector<int> blocks;
  for (const StageLayers& l : best->stages) blocks.push_back(l.blocks);
  opt.pipeline_layout = nn::layout_from_blocks(blocks);

  // The balanced default under the same costs, for comparison.
  std::string versus;
  auto def = nn::partition_layers(opt.model, plan.lowered.num_stages, "");
  if (def.ok()) {
    const std::string name = nn::format_layout(*def);
    SimOptions sim = so.sim;
    sim.record_timeline = false;
    auto r = simulate(plan.lowered, cost_model_for_layout(costs, stage_layers(*def), name), sim);
    if (r.ok()) {
      versus =
          fmt::format(" vs {:.1f}% for the balanced default {}", 100.0 * r->bubble_ratio, name);
    }
  }
  plan.layout_note = fmt::format(
      "--pipeline-layout auto: {} (predicted bubble {:.1f}%{}; {} split(s) simulated{}; costs: {})",
      opt.pipeline_layout, 100.0 * best->bubble_ratio, versus, best->simulated,
      best->exhaustive ? ", all of them" : ", local search", costs.source);
  return OkStatus();
}

}  // namespace tightpipe::train_internal
