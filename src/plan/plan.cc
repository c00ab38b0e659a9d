// plan(): enumerate, check memory, bound, simulate, price, rank (plan.h; docs/plan.md).
#include "tightpipe/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "plan_format.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/flag_checks.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/model.h"
#include "tightpipe/prof.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"

namespace tightpipe {

// ----- model and options ------------------------------------------------------------------------

double PlanModel::parameters() const {
  // gpt_layer_costs' parameter counts (the one place the formulas live), at one byte each.
  GptCostConfig g;
  g.hidden = hidden_size;
  g.heads = num_attention_heads;
  g.seq = seq_length;
  g.vocab = vocab_size;
  g.ffn_hidden = ffn_hidden_size;
  g.param_dtype_bytes = 1;
  const LayerCosts c = gpt_layer_costs(g);
  return c.embedding.param_bytes + static_cast<double>(num_layers) * c.block.param_bytes +
         c.head.param_bytes;
}

std::string RecomputeChoice::label() const {
  switch (kind) {
    case Kind::kNone:
      return "none";
    case Kind::kFull:
      return "full";
    case Kind::kBlock:
      return fmt::format("block:{}", layers);
  }
  return "?";
}

Result<RecomputeChoice> parse_recompute_choice(std::string_view text) {
  if (text == "none") return RecomputeChoice{};
  if (text == "full") return RecomputeChoice{RecomputeChoice::Kind::kFull, 0};
  if (text.substr(0, 6) == "block:") {
    auto n = parse_int(text.substr(6));
    if (n.ok() && *n >= 1 && *n <= kMaxGptLayers) {
      return RecomputeChoice{RecomputeChoice::Kind::kBlock, static_cast<int32_t>(*n)};
    }
  }
  return Status::invalid_argument(fmt::format(
      "--recompute '{}' is not known; hint: none, full (every block of a stage) or block:N (the "
      "first N blocks of every stage, N >= 1)",
      printable(text)));
}

Status PlanOptions::validate() const {
  constexpr double kGiBytes = 1024.0 * 1024.0 * 1024.0;
  auto bad = [](std::string_view flag, auto value, std::string_view hint) {
    return Status::invalid_argument(fmt::format("{} {}: {}", flag, value, hint));
  };
  const PlanModel& m = model;
  if (module_costs) {
    // tune: the model is its measured modules; no GPT shape to check.
    if (!measured || static_cast<int64_t>(measured->block_each.size()) != m.num_layers) {
      return Status::internal(
          fmt::format("plan: module costs with {} per-block entries for {} blocks",
                      measured ? measured->block_each.size() : 0, m.num_layers));
    }
    for (const RecomputeChoice& rc : recompute) {
      if (rc.kind != RecomputeChoice::Kind::kNone) {
        return Status::invalid_argument(fmt::format(
            "--recompute {}: measured modules are planned without recompute; hint: drop it",
            rc.label()));
      }
    }
  } else {
    TP_RETURN_IF_ERROR(check_model_shape({.layers = m.num_layers,
                                          .hidden = m.hidden_size,
                                          .heads = m.num_attention_heads,
                                          .seq = m.seq_length,
                                          .vocab = m.vocab_size,
                                          .ffn_hidden = m.ffn_hidden_size},
                                         {}, {.layers = kMaxGptLayers}));
  }
  // simulate refuses the same pair: the flag is tightpipe's own, the other engines set it.
  if (optimizer_post_validation && engine != Engine::kTightpipe) {
    return Status::invalid_argument(fmt::format(
        "--enable-optimizer-post-validation with --engine {}: the engine sets how its optimizer "
        "runs ({}); the flag is tightpipe's own; hint: drop it, or --engine tightpipe",
        engine_name(engine), engine == Engine::kZb ? "zb always post-validates" : "synchronously"));
  }
  if (global_batch_size < 1 || global_batch_size > (int64_t{1} << 30)) {
    return bad("--global-batch-size", global_batch_size,
               "must be in [1, 2^30] sequences per step; hint: e.g. --global-batch-size 1024");
  }
  for (int64_t b : micro_batch_sizes) {
    if (b < 1 || b > 4096) {
      return bad("--micro-batch-size", b,
                 "must be in [1, 4096]; hint: e.g. --micro-batch-size 1,2,4");
    }
  }
  if (devices < 1 || devices > (int64_t{1} << 24)) {
    return bad("--devices", devices, "must be in [1, 2^24]; hint: e.g. --devices 64");
  }
  const double peak = device.bf16 ? device.peak_flops_bf16 : device.peak_flops_fp32;
  if (!measured && !(peak > 0)) {
    return Status::invalid_argument(fmt::format(
        "--device {}: no peak FLOP/s for its precision; hint: pick another preset or give --costs",
        device.name));
  }
  if (!(mfu > 0 && mfu <= 1)) {
    return bad("--mfu", mfu,
               "must be in (0, 1], the achieved fraction of peak; hint: 0.4-0.6 is "
               "typical for large models");
  }
  TP_RETURN_IF_ERROR(check_number_range(
      "--memory-budget-gib", memory_budget_bytes / kGiBytes, 0, kMaxPlanMemoryBudgetGib,
      "GiB per device, e.g. 72; 0 (the default) is 0.9 x the device's"));
  if (memory_budget_bytes == 0 && !(device.memory_bytes > 0)) {
    return Status::invalid_argument(fmt::format(
        "--device {}: its memory is unknown here; hint: pass --memory-budget-gib", device.name));
  }
  TP_RETURN_IF_ERROR(check_number_range("--price-per-device-hour", price_per_device_hour, 0,
                                        kMaxPlanPricePerDeviceHour,
                                        "dollars per device-hour, e.g. 2.50"));
  TP_RETURN_IF_ERROR(check_number_range("--train-tokens", train_tokens, 1, kMaxPlanTrainTokens,
                                        "tokens of the whole run, e.g. 1e11"));
  if (measured && measured_micro_batch_size < 1) {
    return bad("--costs micro batch size", measured_micro_batch_size, "must be >= 1");
  }
  for (int32_t p : pp) {
    if (p < 1 || p > kMaxRanks) {
      return bad("--pp", p, fmt::format("must be in [1, {}]; hint: e.g. --pp 8", kMaxRanks));
    }
  }
  for (int32_t v : vpp) {
    if (v < 1 || v > kMaxChunks) {
      return bad("--vpp", v, fmt::format("must be in [1, {}]; hint: e.g. --vpp 2", kMaxChunks));
    }
  }
  if (layers_per_virtual_stage != 0) {
    if (!vpp.empty()) {
      return Status::invalid_argument(
          "--num-layers-per-virtual-pipeline-stage: not with --vpp; hint: give one of them");
    }
    if (layers_per_virtual_stage < 1 || layers_per_virtual_stage > model.num_layers) {
      return bad("--num-layers-per-virtual-pipeline-stage", layers_per_virtual_stage,
                 fmt::format("must be in [1, {}] (--num-layers); hint: layers per chunk, e.g. 2",
                             model.num_layers));
    }
  }
  for (const std::string& s : schedules) {
    if (!find_generator(s) && !is_auto_schedule_name(s)) {
      return Status::invalid_argument(
          fmt::format("--schedules: '{}' is not a schedule; hint: one of {}, zb-1p, zb-2p, "
                      "zb-auto, zb-v-auto, v-half, v-min",
                      printable(s), generator_names()));
    }
  }
  if (top < 1 || top > kMaxPlanTop) {
    return bad("--top", top,
               fmt::format("must be in [1, {}]; hint: rows of the table, e.g. 10", kMaxPlanTop));
  }
  if (auto_search_budget_ms) {
    TP_RETURN_IF_ERROR(check_number_range("auto_search_budget_ms", *auto_search_budget_ms, 0,
                                          kZbMaxSearchBudgetMs, "0 for the greedy alone"));
  }
  if (!(simpler_within >= 0 && simpler_within < 1)) {
    return bad("simpler_within", simpler_within, "must be in [0, 1)");
  }
  return OkStatus();
}

// ----- the search
// ---------------------------------------------------------------------------------

namespace {

using plan_format::kGiB;

// How much a schedule asks of whoever runs it: the 1% rule prefers the lower number.
int32_t schedule_complexity(std::string_view name) {
  static const std::map<std::string, int32_t, std::less<>> kRank = {
      {"1f1b", 0},      {"gpipe", 1},  {"zb-h1", 2}, {"interleaved", 2}, {"looped-bfs", 3},
      {"zb-h2", 3},     {"zb-v", 4},   {"zb-1p", 5}, {"zb-2p", 5},       {"zb-auto", 5},
      {"zb-v-auto", 6}, {"v-half", 6}, {"v-min", 6}};
  auto it = kRank.find(name);
  return it == kRank.end() ? 7 : it->second;
}

// Every schedule name the search tries, canonical.
std::vector<std::string> all_schedules() {
  std::vector<std::string> names;
  for (const GeneratorInfo& g : schedule_generators()) names.push_back(g.name);
  for (const char* n : {"zb-1p", "zb-2p", "zb-auto", "zb-v-auto", "v-half", "v-min"}) {
    names.push_back(n);
  }
  return names;
}

std::string canonical_schedule(const std::string& name) {
  if (is_auto_schedule_name(name)) return auto_schedule_name(name);
  return find_generator(name)->name;
}

// The chunk counts a schedule takes for a pipeline of p ranks and L layers; with
// `layers_per_virtual_stage` (> 0) the free-v schedules take Megatron's v only.
std::vector<int32_t> chunk_choices(const std::string& name, int32_t p, int64_t layers,
                                   const std::vector<int32_t>& filter,
                                   int64_t layers_per_virtual_stage) {
  std::vector<int32_t> vs;
  bool free_chunks = false;  // --vpp filters only the schedules whose v is free
  if (is_auto_schedule_name(name)) {
    vs.push_back(auto_schedule_chunks(name));
  } else {
    const GeneratorInfo* g = find_generator(name);
    if (g->fixed_chunks > 0) {
      vs.push_back(g->fixed_chunks);
    } else {
      free_chunks = true;
      for (int32_t v = 2; v <= kMaxChunks; v *= 2) vs.push_back(v);  // 1 is plain 1F1B/GPipe
    }
  }
  std::vector<int32_t> out;
  for (int32_t v : vs) {
    if (free_chunks && !filter.empty() &&
        std::find(filter.begin(), filter.end(), v) == filter.end()) {
      continue;
    }
    if (free_chunks && layers_per_virtual_stage > 0) {
      const auto mv = chunks_from_layers_per_virtual_stage(layers, p, layers_per_virtual_stage);
      if (!mv.ok() || *mv != v) continue;
    }
    if (int64_t(p) * v > layers + 2) continue;  // every middle stage needs a block
    out.push_back(v);
  }
  return out;
}

struct Config {
  std::string schedule;
  int32_t p = 1, v = 1, dp = 1;
  int64_t mbs = 1, m = 1;
  // zb-auto, zb-v-auto: the memory limit in whole-rank microbatch activations (the most that
  // fits the budget, at most 2p); zb-1p and zb-2p imply theirs.
  double zb_limit = 0;
};

// A generator's or builder's refusal without its hint (which names flags plan does not take).
std::string refusal(const Status& st) {
  std::string why(st.message());
  why = why.substr(0, why.find('\n'));
  return why.substr(0, why.find("; hint:"));
}

std::string config_key(const Config& c, const RecomputeChoice& rc) {
  return fmt::format("{} p={} v={} mbs={} m={} recompute {}", c.schedule, c.p, c.v, c.mbs, c.m,
                     rc.label());
}

class Planner {
 public:
  explicit Planner(const PlanOptions& o) : o_(o) {}

  Result<PlanResult> run();

 private:
  // Costs per layer kind for microbatch size mbs (analytic or measured and scaled).
  const LayerCosts& layer_costs(int64_t mbs);
  // The link between adjacent pipeline stages and within a data-parallel group.
  LinkSpec p2p_link() const;
  LinkSpec dp_link(int32_t dp) const;
  double link_bandwidth(const LinkSpec& l) const;
  // The stage costs of a configuration under a recompute choice.
  CostModel stage_costs(const Config& c, const std::vector<StageLayers>& split,
                        const RecomputeChoice& rc, const std::string& layout);
  // DualPipe's sum of each model stage's two copies, per rank (0 for one direction).
  std::vector<double> copy_sum_times(const CostModel& costs,
                                     const std::vector<int32_t>& stage_to_rank,
                                     int32_t directions) const;
  // Per rank: the data-parallel all-reduce of its gradients, plus copy_sum_times (the search's
  // lower bound; a candidate's step simulates the all-reduce).
  std::vector<double> allreduce_times(const Config& c, const CostModel& costs,
                                      const std::vector<int32_t>& stage_to_rank,
                                      int32_t directions) const;
  // Per rank peak bytes: static + the activation peak of the program order (+ recompute transient).
  std::vector<double> peak_bytes(const Schedule& s, const CostModel& costs,
                                 const RecomputeChoice& rc, int64_t mbs);
  Result<Schedule> make_schedule(const Config& c, const CostModel& costs);
  void add_infeasible(const Config& c, const RecomputeChoice& rc, std::string reason,
                      std::vector<double> peak = {});
  std::string out_of_memory(const std::vector<double>& peak) const;
  void price(PlanCandidate& pc) const;
  Status enumerate();
  Status add_config(const Config& c, const std::vector<RecomputeChoice>& rcs);
  Status simulate_best();
  void choose();

  struct Pending {
    Config cfg;
    RecomputeChoice rc;
    std::string layout;              // of the model stages
    std::vector<StageLayers> split;  // per model stage (DualPipe: p, each held twice)
    double lower_bound = 0;
    int32_t complexity = 0;
    // Peak bytes per rank: exact for a fixed schedule (its program walked in add_config); for an
    // automatic one a bound from its memory limit, walked again once it is built.
    std::vector<double> peak;
  };

  const PlanOptions& o_;
  PlanResult res_;
  double budget_ = 0;
  std::map<int64_t, LayerCosts> costs_by_mbs_;
  std::map<std::pair<int32_t, int64_t>, std::vector<StageLayers>> splits_;
  std::vector<Pending> pending_;
  std::vector<PlanCandidate> fits_;
  std::vector<PlanCandidate> infeasible_;
  // The smallest peak of any configuration refused for memory, and which one (the error when
  // nothing fits).
  double least_need_ = std::numeric_limits<double>::infinity();
  std::string least_need_key_;
  std::string shape_error_;  // the first reason no configuration could even be formed
};

const LayerCosts& Planner::layer_costs(int64_t mbs) {
  auto it = costs_by_mbs_.find(mbs);
  if (it != costs_by_mbs_.end()) return it->second;
  const PlanModel& m = o_.model;
  const DevicePreset& d = o_.device;
  if (o_.module_costs) {
    // Measured modules (tune): times and activation bytes scale with the microbatch size, the
    // static bytes are the modules' own.
    const double k = static_cast<double>(mbs) / static_cast<double>(o_.measured_micro_batch_size);
    LayerCosts meas = *o_.measured;
    auto scale = [k](StageCost& c) {
      for (double StageCost::*f :
           {&StageCost::f, &StageCost::i, &StageCost::w, &StageCost::b, &StageCost::recompute,
            &StageCost::act_bytes, &StageCost::act_after_i_bytes, &StageCost::input_bytes}) {
        c.*f *= k;
      }
    };
    scale(meas.embedding);
    scale(meas.block);
    scale(meas.head);
    for (StageCost& c : meas.block_each) scale(c);
    meas.message_bytes = static_cast<int64_t>(std::llround(meas.message_bytes * k));
    if (mbs != o_.measured_micro_batch_size) {
      meas.source = fmt::format("{} scaled to micro batch size {}", o_.measured->source, mbs);
    }
    meas.link.overhead = d.message_overhead_s;
    return costs_by_mbs_.emplace(mbs, std::move(meas)).first->second;
  }
  GptCostConfig g;
  g.layers = m.num_layers;
  g.hidden = m.hidden_size;
  g.heads = m.num_attention_heads;
  g.seq = m.seq_length;
  g.micro_batch = mbs;
  g.vocab = m.vocab_size;
  g.ffn_hidden = m.ffn_hidden_size;
  g.flash_attention = o_.flash_attention;
  g.flops = (d.bf16 ? d.peak_flops_bf16 : d.peak_flops_fp32) * o_.mfu;
  if (!(g.flops > 0)) g.flops = 1;  // measured costs: the times come from the run
  const LinkSpec link = p2p_link();
  g.latency = link.latency_s;
  g.bandwidth = link_bandwidth(link);
  // BF16 mixed precision as Megatron-LM: bf16 activations and weights, fp32 gradients, fp32
  // master weights + Adam m, v. FP32 (this-cpu, tightpipe train): fp32 everything, Adam m, v.
  g.act_dtype_bytes = d.bf16 ? 2 : 4;
  g.param_dtype_bytes = d.bf16 ? 2 : 4;
  g.grad_dtype_bytes = 4;
  g.optimizer_bytes_per_param = d.bf16 ? 12 : 8;
  LayerCosts c = gpt_layer_costs(g);
  c.source = fmt::format("{} x {} at mfu {}", d.name, g.flops / o_.mfu / 1e12, o_.mfu);
  if (o_.measured) {
    // Measured times and activation bytes, scaled by the microbatch size; static bytes from the
    // parameter counts at the plan's dtypes (a run's costs.json holds the run's own FP32 ones).
    const double k = static_cast<double>(mbs) / static_cast<double>(o_.measured_micro_batch_size);
    LayerCosts meas = *o_.measured;
    for (auto [kind, analytic] :
         {std::pair{&meas.embedding, &c.embedding}, std::pair{&meas.block, &c.block},
          std::pair{&meas.head, &c.head}}) {
      for (double StageCost::*f :
           {&StageCost::f, &StageCost::i, &StageCost::w, &StageCost::b, &StageCost::recompute,
            &StageCost::act_bytes, &StageCost::act_after_i_bytes, &StageCost::input_bytes}) {
        kind->*f *= k;
      }
      kind->param_bytes = analytic->param_bytes;
      kind->grad_bytes = analytic->grad_bytes;
      kind->optimizer_bytes = analytic->optimizer_bytes;
    }
    meas.message_bytes = static_cast<int64_t>(std::llround(meas.message_bytes * k));
    meas.link = c.link;  // a run's compute times hold no message work (calibrate)
    meas.source = fmt::format("{} scaled to micro batch size {}", o_.measured->source, mbs);
    c = std::move(meas);
  }
  // What each message costs the compute lanes at both ends (LinkCost::overhead).
  c.link.overhead = d.message_overhead_s +
                    (d.message_overhead_bandwidth > 0
                         ? static_cast<double>(c.message_bytes) / d.message_overhead_bandwidth
                         : 0.0);
  return costs_by_mbs_.emplace(mbs, std::move(c)).first->second;
}

double Planner::link_bandwidth(const LinkSpec& l) const {
  if (!l.shared_by_node) return l.bandwidth;
  return l.bandwidth /
         std::max<int64_t>(1, std::min<int64_t>(o_.device.devices_per_node, o_.devices));
}

LinkSpec Planner::p2p_link() const {
  // Ranks are ordered data-parallel inner (Megatron-LM): adjacent stages are dp devices apart, so
  // a pipeline over more than one node crosses the network somewhere; its slowest boundary sets
  // the pace (one link model for every boundary).
  return o_.devices <= o_.device.devices_per_node ? o_.device.intra_node : o_.network;
}

LinkSpec Planner::dp_link(int32_t dp) const {
  return dp <= o_.device.devices_per_node ? o_.device.intra_node : o_.network;
}

CostModel Planner::stage_costs(const Config& c, const std::vector<StageLayers>& split,
                               const RecomputeChoice& rc, const std::string& layout) {
  const LayerCosts& lc = layer_costs(c.mbs);
  const CostModel summed = cost_model_for_layout(lc, split, layout);
  std::vector<StageCost> stages;
  const StageCost& blk = lc.block;
  const double input = static_cast<double>(lc.message_bytes);  // one block's input
  for (int32_t s = 0; s < summed.num_stages(); ++s) {
    StageCost st = summed.stage(s);
    const int32_t k = split[s].blocks;
    const int32_t n = rc.kind == RecomputeChoice::Kind::kNone   ? 0
                      : rc.kind == RecomputeChoice::Kind::kFull ? k
                                                                : std::min(rc.layers, k);
    // A recomputed block keeps only its input after F, re-runs its forward before I or B (time),
    // and then holds what W needs as without recompute (act_after_i unchanged).
    st.act_bytes -= n * std::max(0.0, blk.act_bytes - input);
    st.i += n * blk.recompute;
    st.b += n * blk.recompute;
    if (o_.distributed_optimizer) st.optimizer_bytes /= c.dp;
    stages.push_back(st);
  }
  CostModel out(std::move(stages), summed.link(), summed.time_unit(), summed.source());
  // PyTorch's runtime runs the first stage's whole backward in its W.
  if (o_.engine != Engine::kTorch) return out;
  std::vector<int32_t> modules;
  for (const StageLayers& l : split)
    modules.push_back(l.blocks + (l.embedding ? 1 : 0) + (l.head ? 1 : 0));
  return torch_runtime_costs(out, o_.host_time, modules);
}

std::vector<double> Planner::copy_sum_times(const CostModel& costs,
                                            const std::vector<int32_t>& stage_to_rank,
                                            int32_t directions) const {
  int32_t ranks = 0;
  for (int32_t r : stage_to_rank) ranks = std::max(ranks, r + 1);
  std::vector<double> t(ranks, 0.0);
  if (directions <= 1) return t;
  // DualPipe: the two copies of each model stage (ranks k and p-1-k) sum their gradients, a
  // two-member all-reduce over the pipeline's link: each rank sends and receives one copy's
  // gradient bytes, in 2 latency-bound steps.
  const LinkSpec link = p2p_link();
  const double bw = link_bandwidth(link);
  for (int32_t s = 0; s < costs.num_stages(); ++s) {
    t[stage_to_rank[s]] += (bw > 0 ? costs.stage(s).grad_bytes / bw : 0.0) + 2 * link.latency_s;
  }
  return t;
}

std::vector<double> Planner::allreduce_times(const Config& c, const CostModel& costs,
                                             const std::vector<int32_t>& stage_to_rank,
                                             int32_t directions) const {
  std::vector<double> t = copy_sum_times(costs, stage_to_rank, directions);
  if (c.dp <= 1) return t;
  const LinkSpec link = dp_link(c.dp);
  const double bw = link_bandwidth(link), d = c.dp;
  for (int32_t s = 0; s < costs.num_stages(); ++s) {
    // A ring all-reduce: 2(d-1)/d of the bytes cross each link, in 2(d-1) latency-bound steps
    // (once per rank here: a lower bound of the simulator's, which pays them per stage).
    const double bytes = costs.stage(s).grad_bytes;
    t[stage_to_rank[s]] += (bw > 0 ? 2 * (d - 1) / d * bytes / bw : 0.0);
  }
  for (double& x : t) x += 2 * (d - 1) * link.latency_s;
  return t;
}

std::vector<double> Planner::peak_bytes(const Schedule& s, const CostModel& costs,
                                        const RecomputeChoice& rc, int64_t mbs) {
  std::vector<double> units(costs.num_stages()), fractions(costs.num_stages());
  for (int32_t st = 0; st < costs.num_stages(); ++st) {
    const StageCost& c = costs.stage(st);
    units[st] = c.act_bytes;
    fractions[st] = c.act_bytes > 0 ? c.act_after_i_bytes / c.act_bytes : 0.0;
  }
  std::vector<double> peak = zb_peak_memory_units(s, fractions, units);
  // Recompute re-materializes one block at a time during I/B: that block's activations on top.
  const double transient =
      rc.kind == RecomputeChoice::Kind::kNone ? 0.0 : layer_costs(mbs).block.act_bytes;
  for (int32_t st = 0; st < costs.num_stages(); ++st) {
    const StageCost& c = costs.stage(st);
    peak[s.stage_to_rank[st]] += c.param_bytes + c.grad_bytes + c.optimizer_bytes;
  }
  for (double& x : peak) x += transient;
  return peak;
}

std::string Planner::out_of_memory(const std::vector<double>& peak) const {
  if (peak.empty()) return fmt::format("out of memory (budget {:.1f} GiB)", budget_ / kGiB);
  const auto it = std::max_element(peak.begin(), peak.end());
  return fmt::format("out of memory on rank {} by {:.1f} GiB (needs {:.1f} of {:.1f} GiB)",
                     it - peak.begin(), (*it - budget_) / kGiB, *it / kGiB, budget_ / kGiB);
}

Result<Schedule> Planner::make_schedule(const Config& c, const CostModel& costs) {
  if (is_auto_schedule_name(c.schedule)) {
    ZbAutoOptions zo;
    zo.objective =
        zb_objective_for(optimizer_post_validated(o_.engine, o_.optimizer_post_validation));
    if (auto_schedule_memory_limit(c.schedule, c.p) == 0) zo.memory_limit = c.zb_limit;
    // The planner prices the greedy's schedule unless a search budget is given: it builds one
    // per shape it simulates, and the search's gain is mostly under 1% (docs/plan.md).
    zo.search_budget_ms = o_.auto_search_budget_ms.value_or(0.0);
    return build_auto_schedule(c.schedule, c.p, static_cast<int32_t>(c.m), costs, zo);
  }
  return generate_schedule(
      c.schedule,
      {.ranks = c.p, .microbatches = static_cast<int32_t>(c.m), .chunks = c.v, .group_size = 0});
}

// The candidate's shape (what it is, not yet what it costs).
PlanCandidate candidate_of(const Config& c, const RecomputeChoice& rc) {
  PlanCandidate pc;
  pc.schedule = c.schedule;
  pc.pp = c.p;
  pc.vpp = c.v;
  pc.dp = c.dp;
  pc.micro_batch_size = c.mbs;
  pc.num_microbatches = c.m;
  pc.recompute = rc.label();
  return pc;
}

void Planner::add_infeasible(const Config& c, const RecomputeChoice& rc, std::string reason,
                             std::vector<double> peak) {
  PlanCandidate pc = candidate_of(c, rc);
  pc.fits = false;
  pc.reason = std::move(reason);
  pc.peak_memory_bytes = std::move(peak);
  pc.complexity = schedule_complexity(c.schedule);
  infeasible_.push_back(std::move(pc));
  ++res_.stats.infeasible;
}

void Planner::price(PlanCandidate& pc) const {
  const double tokens_per_step =
      static_cast<double>(o_.global_batch_size) * static_cast<double>(o_.model.seq_length);
  pc.tokens_per_s = pc.step_time_s > 0 ? tokens_per_step / pc.step_time_s : 0;
  pc.train_hours = pc.step_time_s * res_.steps / 3600.0;
  pc.cost_usd = pc.train_hours * static_cast<double>(o_.devices) * o_.price_per_device_hour;
}

Status Planner::enumerate() {
  const PlanModel& model = o_.model;
  std::vector<int64_t> mbs_list = o_.micro_batch_sizes;
  if (mbs_list.empty()) mbs_list = {1, 2, 4, 8};
  std::vector<std::string> names;
  const bool megatron = o_.engine == Engine::kMegatron || o_.engine == Engine::kMegatronOverlap;
  for (const std::string& s : o_.schedules.empty() ? all_schedules() : o_.schedules) {
    const std::string name = canonical_schedule(s);
    // Megatron-LM runs 1F1B and interleaved 1F1B only (engine_profile).
    if (megatron && name != "1f1b" && name != "interleaved") {
      if (o_.schedules.empty()) continue;
      return Status::invalid_argument(fmt::format(
          "--schedules {} with --engine {}: Megatron-LM runs 1f1b and interleaved only; hint: "
          "--engine zb or tightpipe for the others",
          name, engine_name(o_.engine)));
    }
    // DeepSpeed's PipelineEngine runs 1F1B only (TrainSchedule; engine_profile).
    if (o_.engine == Engine::kDeepSpeed && name != "1f1b") {
      if (o_.schedules.empty()) continue;
      return Status::invalid_argument(fmt::format(
          "--schedules {} with --engine deepspeed: DeepSpeed's PipelineEngine runs 1f1b only; "
          "hint: --engine megatron for interleaved, zb or tightpipe for the others",
          name));
    }
    // PyTorch's runtime has no form for two directions (check_torch_directions).
    if (o_.engine == Engine::kTorch && name == "dualpipe") {
      if (o_.schedules.empty()) continue;
      return Status::invalid_argument(
          "--schedules 'dualpipe' with --engine torch: PyTorch's runtime has no form for a "
          "schedule of 2 directions; hint: dualpipev (PyTorch's ScheduleDualPipeV), or --engine "
          "tightpipe");
    }
    names.push_back(name);
  }
  std::vector<RecomputeChoice> rcs = o_.recompute;
  if (rcs.empty() && o_.module_costs) rcs.push_back({});
  if (rcs.empty()) {
    rcs.push_back({});
    for (int32_t n = 1; n < model.num_layers; n *= 2) {
      rcs.push_back({RecomputeChoice::Kind::kBlock, n});
    }
    rcs.push_back({RecomputeChoice::Kind::kFull, 0});
  }
  bool any_p = false, any_batch = false;
  for (int64_t p64 = 1; p64 <= std::min<int64_t>(o_.devices, kMaxRanks); ++p64) {
    const int32_t p = static_cast<int32_t>(p64);
    if (o_.devices % p != 0) continue;
    if (!o_.pp.empty() && std::find(o_.pp.begin(), o_.pp.end(), p) == o_.pp.end()) continue;
    if (p > model.num_layers + 2 || (p > 2 && model.num_layers < p - 2)) continue;
    any_p = true;
    const int32_t dp = static_cast<int32_t>(o_.devices / p);
    for (int64_t mbs : mbs_list) {
      if (o_.global_batch_size % (int64_t(dp) * mbs) != 0) continue;
      const int64_t m = o_.global_batch_size / (int64_t(dp) * mbs);
      any_batch = true;
      for (const std::string& name : names) {
        // One rank: every schedule is gradient accumulation; 1F1B stands for them all.
        if (p == 1 && name != "1f1b" && !(o_.schedules.size() == 1)) continue;
        for (int32_t v :
             chunk_choices(name, p, model.num_layers, o_.vpp, o_.layers_per_virtual_stage)) {
          Config c{name, p, v, dp, mbs, m};
          if (!check_schedule_shape("", p, int64_t(p) * v, m).ok()) {
            ++res_.stats.configurations;
            add_infeasible(c, rcs.front(),
                           fmt::format("{} stages x {} microbatches is over tightpipe's limit of "
                                       "{}; hint: a larger micro batch size",
                                       int64_t(p) * v, m, kMaxStageMicrobatches));
            continue;
          }
          TP_RETURN_IF_ERROR(add_config(c, rcs));
        }
      }
    }
  }
  if (!any_p) {
    shape_error_ = fmt::format(
        "--devices {}: no pipeline size{} divides it with --num-layers {} (p must divide the "
        "devices and every middle stage needs a layer); hint: a device count that is a multiple "
        "of the pipeline size you want",
        o_.devices, o_.pp.empty() ? "" : fmt::format(" among --pp {}", fmt::join(o_.pp, ",")),
        model.num_layers);
  } else if (!any_batch) {
    shape_error_ = fmt::format(
        "--global-batch-size {}: no split into data-parallel size x micro batch size x "
        "microbatches fits it for --devices {} and --micro-batch-size {}; hint: a global batch "
        "that is a multiple of devices / pp x micro batch size",
        o_.global_batch_size, o_.devices, fmt::join(mbs_list, ","));
  }
  return OkStatus();
}

Status Planner::add_config(const Config& c, const std::vector<RecomputeChoice>& rcs) {
  const int32_t S = c.p * c.v;
  const bool is_auto = is_auto_schedule_name(c.schedule);
  // The layers are split over the model stages: S of them, or p for DualPipe, whose 2p stage ids
  // hold each model stage twice (Schedule::model_stage); expand_to_directions gives each stage id
  // its model stage's costs, so a rank's time and memory count both copies it holds.
  auto model_split = [&](int32_t stages) -> const std::vector<StageLayers>& {
    auto key = std::pair{stages, c.mbs};
    auto sp = splits_.find(key);
    if (sp == splits_.end()) {
      sp =
          splits_
              .emplace(key, balanced_layer_split(layer_costs(c.mbs),
                                                 static_cast<int32_t>(o_.model.num_layers), stages))
              .first;
    }
    return sp->second;
  };

  // A fixed schedule's order does not depend on the costs: generate it once for every recompute
  // choice. An automatic one is built from the costs when it is simulated (simulate_best); here
  // only its shape is checked, and only without recompute (its memory limit does the rest).
  Schedule sched;
  if (!is_auto) {
    auto g = generate_schedule(
        c.schedule,
        {.ranks = c.p, .microbatches = static_cast<int32_t>(c.m), .chunks = c.v, .group_size = 0});
    if (!g.ok()) {
      ++res_.stats.configurations;
      add_infeasible(c, rcs.front(), refusal(g.status()));
      return OkStatus();
    }
    sched = std::move(*g);
  }
  const std::vector<StageLayers>& split = model_split(is_auto ? S : sched.stages_per_direction());
  std::vector<int> blocks;
  for (const StageLayers& l : split) blocks.push_back(l.blocks);
  const std::string layout = nn::layout_from_blocks(blocks);
  std::vector<double> last_peak;
  for (size_t k = 0; k < rcs.size(); ++k) {
    const RecomputeChoice& rc = rcs[k];
    if (is_auto && rc.kind != RecomputeChoice::Kind::kNone) continue;
    ++res_.stats.configurations;
    const CostModel costs = is_auto
                                ? stage_costs(c, split, rc, layout)
                                : expand_to_directions(stage_costs(c, split, rc, layout), sched);
    std::vector<int32_t> stage_to_rank = sched.stage_to_rank;
    std::vector<double> peak;
    Config cfg = c;
    if (is_auto) {
      // Placement: loop for the single-chunk names, V for zb-v-auto.
      stage_to_rank.resize(S);
      for (int32_t s = 0; s < S; ++s) stage_to_rank[s] = s < c.p ? s : 2 * c.p - 1 - s;
      // Its memory limit bounds it: limit x the rank's whole-microbatch activations. zb-auto and
      // zb-v-auto take the most that fits the budget on every rank (at most 2p).
      std::vector<double> fixed(c.p, 0.0), act(c.p, 0.0);
      for (int32_t s = 0; s < S; ++s) {
        const StageCost& st = costs.stage(s);
        fixed[stage_to_rank[s]] += st.param_bytes + st.grad_bytes + st.optimizer_bytes;
        act[stage_to_rank[s]] += st.act_bytes;
      }
      double limit = auto_schedule_memory_limit(c.schedule, c.p);
      if (limit == 0) {
        limit = 2.0 * c.p;
        for (int32_t r = 0; r < c.p; ++r) {
          if (act[r] > 0) limit = std::min(limit, std::floor((budget_ - fixed[r]) / act[r]));
        }
        limit = std::max(limit, kZbAutoMinMemoryLimit);  // below: refused for memory just below
        cfg.zb_limit = limit;
      }
      peak.assign(c.p, 0.0);
      for (int32_t r = 0; r < c.p; ++r) peak[r] = fixed[r] + std::min<double>(limit, c.m) * act[r];
    } else {
      peak = peak_bytes(sched, costs, rc, c.mbs);
    }
    const double worst = *std::max_element(peak.begin(), peak.end());
    if (worst > budget_) {
      if (worst < least_need_) {
        least_need_ = worst;
        least_need_key_ = config_key(c, rc);
      }
      last_peak = std::move(peak);
      continue;
    }
    // No schedule of these costs is faster: the lower bound's fast terms (each rank's work
    // between its shortest head and tail; lower_bound.h), and each rank's work plus its
    // all-reduce.
    Schedule shape;
    shape.name = c.schedule;
    shape.num_ranks = c.p;
    shape.num_stages = static_cast<int32_t>(stage_to_rank.size());
    shape.num_microbatches = static_cast<int32_t>(c.m);
    shape.stage_to_rank = stage_to_rank;
    shape.directions = is_auto ? 1 : sched.directions;
    LowerBoundOptions lo;
    lo.fast = true;
    TP_ASSIGN_OR_RETURN(LowerBound bound, lower_bound(shape, costs, lo));
    const std::vector<double> ar = allreduce_times(c, costs, stage_to_rank, sched.directions);
    double lb = bound.makespan;
    for (int32_t r = 0; r < c.p; ++r) lb = std::max(lb, bound.rank_work[r] + ar[r]);
    pending_.push_back({cfg, rc, layout, split, lb,
                        schedule_complexity(c.schedule) * 2 + (k > 0 ? 1 : 0), std::move(peak)});
    // A heavier recompute of the same configuration fits too, and is slower (more compute in
    // the same order): dominated.
    for (size_t j = k + 1; j < rcs.size(); ++j) {
      if (!(is_auto && rcs[j].kind != RecomputeChoice::Kind::kNone)) {
        ++res_.stats.dominated;
        ++res_.stats.configurations;
      }
    }
    return OkStatus();
  }
  if (last_peak.empty()) {
    // No recompute choice applied: an automatic schedule plans only without recompute (its
    // memory limit bounds the activations instead).
    ++res_.stats.configurations;
    add_infeasible(c, rcs.front(),
                   fmt::format("{} plans without recompute (its memory limit bounds the "
                               "activations), and --recompute leaves out none; hint: add none to "
                               "--recompute, e.g. --recompute none,{}",
                               c.schedule, rcs.front().label()));
    return OkStatus();
  }
  add_infeasible(c, is_auto ? rcs.front() : rcs.back(), out_of_memory(last_peak), last_peak);
  return OkStatus();
}

Status Planner::simulate_best() {
  std::sort(pending_.begin(), pending_.end(), [](const Pending& a, const Pending& b) {
    return std::tie(a.lower_bound, a.complexity, a.cfg.schedule, a.cfg.p, a.cfg.v, a.cfg.mbs) <
           std::tie(b.lower_bound, b.complexity, b.cfg.schedule, b.cfg.p, b.cfg.v, b.cfg.mbs);
  });
  // Step times of the candidates simulated so far, ascending: the top-N threshold.
  std::vector<double> best;
  const size_t keep = static_cast<size_t>(o_.top);
  for (const Pending& pd : pending_) {
    if (!best.empty()) {
      const double threshold =
          std::max(best.size() >= keep ? best[keep - 1] : std::numeric_limits<double>::infinity(),
                   best.front() * (1 + o_.simpler_within));
      if (pd.lower_bound > threshold && pd.cfg.schedule != "1f1b") {
        ++res_.stats.pruned;
        continue;
      }
    }
    const Config& c = pd.cfg;
    const CostModel model_costs = stage_costs(c, pd.split, pd.rc, pd.layout);
    auto sched = make_schedule(c, model_costs);  // automatic: built from the costs
    if (!sched.ok()) {
      add_infeasible(c, pd.rc, refusal(sched.status()));
      continue;
    }
    const CostModel costs = expand_to_directions(model_costs, *sched);
    const std::vector<double> peak =
        is_auto_schedule_name(c.schedule) ? peak_bytes(*sched, costs, pd.rc, c.mbs) : pd.peak;
    if (*std::max_element(peak.begin(), peak.end()) > budget_) {
      add_infeasible(c, pd.rc, out_of_memory(peak), peak);
      continue;
    }
    TP_ASSIGN_OR_RETURN(Schedule low, lower(*sched));
    SimOptions so;
    so.record_timeline = false;
    // The step: the program, then each stage's gradient all-reduce on the data-parallel link
    // after the rank's program (the run-it line does not overlap it), the simulator's ring.
    const LinkSpec dl = dp_link(c.dp);
    so.data_parallel.size = c.dp;
    so.data_parallel.link = LinkCost{dl.latency_s, link_bandwidth(dl), 0};
    so.engine = o_.engine;
    so.core_sharing = o_.core_sharing;
    TP_ASSIGN_OR_RETURN(SimResult r, simulate(low, costs, so));
    ++res_.stats.simulated;
    // Post-validated (engine zb always; tightpipe for the zero-bubble schedules where it is
    // faster and the kept copy of each rank's weights, gradients and optimizer state fits).
    double pv_step = 0;
    std::vector<double> pv_peak;
    const bool zero_bubble =
        c.schedule.rfind("zb-", 0) == 0 || c.schedule == "v-half" || c.schedule == "v-min";
    if (low.directions == 1 &&
        (r.optimizer_post_validation ||
         (o_.engine == Engine::kTightpipe && o_.optimizer_post_validation && zero_bubble))) {
      SimOptions pv = so;
      if (o_.engine == Engine::kTightpipe) pv.optimizer_post_validation = true;
      TP_ASSIGN_OR_RETURN(SteadyState ss, steady_state_step_time(low, costs, pv));
      pv_peak = peak;
      for (int32_t rk = 0; rk < c.p; ++rk) pv_peak[rk] += r.ranks[rk].static_bytes;
      const bool fits_pv = *std::max_element(pv_peak.begin(), pv_peak.end()) <= budget_;
      if (r.optimizer_post_validation) {
        pv_step = ss.step_time;  // the engine always steps post-validated
      } else if (fits_pv && ss.step_time < r.makespan * (1 - 1e-9)) {
        pv_step = ss.step_time;
        so = pv;
      }
      if (r.optimizer_post_validation && !fits_pv) {
        add_infeasible(c, pd.rc,
                       out_of_memory(pv_peak) +
                           " with the post-validated optimizer's "
                           "kept copy",
                       pv_peak);
        continue;
      }
    }
    PlanCandidate pc = candidate_of(c, pd.rc);
    pc.layout = pd.layout;
    for (const StageLayers& l : pd.split) pc.blocks_per_stage.push_back(l.blocks);
    pc.compute_schedule = std::make_shared<const Schedule>(*sched);
    pc.stage_costs = std::make_shared<const CostModel>(costs);
    pc.fits = true;
    pc.simulated = true;
    pc.pipeline_time_s = r.makespan;
    pc.bubble_ratio = r.bubble_ratio;
    if (c.dp > 1) {
      // The pipeline alone, without the all-reduce: each rank's program, then (with an optimizer
      // phase) its optimizer from the moment the last program ended; step_bubble over that (the
      // busy time is the same: the all-reduce is idle).
      std::vector<double> opt(c.p, 0.0);
      for (int32_t s = 0; s < costs.num_stages(); ++s)
        opt[low.stage_to_rank[s]] += costs.stage(s).optimizer;
      double program_end = 0;
      for (const RankSimStats& st : r.ranks) program_end = std::max(program_end, st.program_end);
      std::vector<RankBusy> alone(c.p);
      for (int32_t rk = 0; rk < c.p; ++rk) {
        RankBusy& b = alone[rk];
        b.compute = r.ranks[rk].busy - (r.optimizer ? opt[rk] : 0.0);
        b.end = r.ranks[rk].program_end;
        if (r.optimizer) {
          b.optimizer_start = b.end;
          b.optimizer_end = b.end = program_end + opt[rk];
        }
      }
      const StepBubble pipe = step_bubble(alone);
      pc.pipeline_time_s = pipe.window;
      pc.bubble_ratio = pipe.ratio;
    }
    pc.peak_memory_bytes = pv_step > 0 ? pv_peak : peak;
    pc.optimizer_post_validation = pv_step > 0;
    pc.engine_profile = r.engine_description;
    if (pv_step > 0 && !r.optimizer_post_validation) {
      pc.engine_profile = fmt::format("{}: p2p {}, optimizer post-validated",
                                      engine_name(o_.engine), comm_mode_name(r.comm_mode));
    }
    pc.complexity = pd.complexity + (pv_step > 0 && !r.optimizer_post_validation ? 1 : 0);
    for (const RankSimStats& st : r.ranks)
      pc.allreduce_time_s = std::max(pc.allreduce_time_s, st.allreduce);
    pc.exposed_allreduce_ratio = r.exposed_allreduce_ratio;
    pc.step_time_s = pv_step > 0 ? pv_step : r.makespan;
    double copy_sum = 0;
    if (low.directions > 1) {
      // DualPipe's copy sum (not simulated): after the program and any data-parallel all-reduce,
      // before the optimizer, on every rank alike.
      const std::vector<double> copy = copy_sum_times(costs, low.stage_to_rank, low.directions);
      copy_sum = *std::max_element(copy.begin(), copy.end());
      pc.allreduce_time_s += copy_sum;
      pc.step_time_s += copy_sum;
    }
    if (pv_step > 0) {
      // Back-to-back steps: each rank does its work (compute and optimizer) once per period; the
      // one-step bound from a common start does not hold for the period.
      pc.lower_bound_s = 0;
      for (const RankSimStats& st : r.ranks) pc.lower_bound_s = std::max(pc.lower_bound_s, st.busy);
      pc.pipeline_time_s = std::min(pc.pipeline_time_s, pc.step_time_s);
    } else {
      TP_ASSIGN_OR_RETURN(LowerBound lb, lower_bound_for(low, costs, so, /*span=*/false));
      pc.lower_bound_s = lb.makespan + copy_sum;
    }
    // The table prints the bound beside the step: one above it is a bug, never a row.
    TP_RETURN_IF_ERROR(check_lower_bound(
        pc.step_time_s, pc.lower_bound_s,
        fmt::format("step time (s) of {} p={} v={} m={}", c.schedule, c.p, c.v, c.m)));
    price(pc);
    best.insert(std::upper_bound(best.begin(), best.end(), pc.step_time_s), pc.step_time_s);
    fits_.push_back(std::move(pc));
  }
  return OkStatus();
}

void Planner::choose() {
  using plan_format::dollars;
  using plan_format::percent;
  auto key = [](const PlanCandidate& c) {
    return std::tie(c.step_time_s, c.complexity, c.schedule, c.pp, c.vpp, c.micro_batch_size,
                    c.recompute);
  };
  std::sort(fits_.begin(), fits_.end(),
            [&](const PlanCandidate& a, const PlanCandidate& b) { return key(a) < key(b); });
  std::sort(infeasible_.begin(), infeasible_.end(),
            [](const PlanCandidate& a, const PlanCandidate& b) {
              return std::tie(a.pp, a.micro_batch_size, a.schedule, a.vpp, a.recompute) <
                     std::tie(b.pp, b.micro_batch_size, b.schedule, b.vpp, b.recompute);
            });
  res_.candidates = fits_;
  res_.candidates.insert(res_.candidates.end(), infeasible_.begin(), infeasible_.end());
  if (fits_.empty()) return;
  res_.fastest = 0;
  const PlanCandidate& fastest = fits_.front();
  // The simplest within simpler_within of the fastest (then the faster of equals).
  int32_t rec = 0;
  for (int32_t i = 1; i < static_cast<int32_t>(fits_.size()); ++i) {
    if (fits_[i].step_time_s > fastest.step_time_s * (1 + o_.simpler_within)) break;
    if (fits_[i].complexity < fits_[rec].complexity) rec = i;
  }
  res_.recommended = rec;
  const PlanCandidate& r = fits_[rec];
  // The baseline: plain 1F1B with the recommended's shape, else the fastest 1F1B that fits.
  for (int32_t i = 0; i < static_cast<int32_t>(fits_.size()); ++i) {
    const PlanCandidate& c = fits_[i];
    if (c.schedule != "1f1b") continue;
    if (c.pp == r.pp && c.micro_batch_size == r.micro_batch_size) {
      res_.baseline = i;
      break;
    }
    if (res_.baseline < 0) res_.baseline = i;
  }
  std::string why;
  if (rec != 0) {
    why = fmt::format(
        "{} ({}) is the fastest, {:.2f}% faster; within {:g}% the simpler {} is recommended. ",
        fastest.schedule,
        fmt::format("p={} v={} mbs={}", fastest.pp, fastest.vpp, fastest.micro_batch_size),
        100 * (r.step_time_s / fastest.step_time_s - 1), 100 * o_.simpler_within, r.schedule);
  }
  if (res_.baseline < 0) {
    why += "No plain 1F1B configuration fits, so there is no baseline to compare against.";
  } else if (res_.baseline == rec) {
    why += fmt::format(
        "Plain 1F1B is the pick: bubble {}; no other schedule saves {:g}% or more at this shape.",
        percent(r.bubble_ratio), 100 * o_.simpler_within);
  } else {
    const PlanCandidate& b = fits_[res_.baseline];
    why += fmt::format(
        "Against plain 1F1B (p={} m={}, bubble {}, {:.3g} s/step) it moves the bubble {} -> {} and "
        "the step to {:.3g} s: the bill drops by {:.1f}% ({} -> {}).",
        b.pp, b.num_microbatches, percent(b.bubble_ratio), b.step_time_s, percent(b.bubble_ratio),
        percent(r.bubble_ratio), r.step_time_s, 100 * (1 - r.step_time_s / b.step_time_s),
        dollars(b.cost_usd), dollars(r.cost_usd));
  }
  res_.why = why;
}

Result<PlanResult> Planner::run() {
  const auto t0 = std::chrono::steady_clock::now();
  TP_RETURN_IF_ERROR(o_.validate());
  res_.options = o_;
  budget_ = o_.memory_budget_bytes > 0 ? o_.memory_budget_bytes : 0.9 * o_.device.memory_bytes;
  res_.memory_budget_bytes = budget_;
  res_.steps = o_.train_tokens / (static_cast<double>(o_.global_batch_size) *
                                  static_cast<double>(o_.model.seq_length));
  TP_RETURN_IF_ERROR(enumerate());
  if (!shape_error_.empty()) return Status::invalid_argument(shape_error_);
  TP_RETURN_IF_ERROR(simulate_best());
  choose();
  if (res_.recommended < 0) {
    if (std::isfinite(least_need_)) {
      return Status::invalid_argument(fmt::format(
          "no configuration fits the memory budget of {:.1f} GiB per device: the smallest need is "
          "{:.1f} GiB ({}); hint: more --devices, a larger --memory-budget-gib, "
          "--use-distributed-optimizer, or --recompute full",
          budget_ / kGiB, least_need_ / kGiB, least_need_key_));
    }
    if (infeasible_.empty()) {
      // Every option filtered: no schedule takes the --vpp values at any pipeline size left.
      return Status::invalid_argument(fmt::format(
          "no configuration matches --pp {} --vpp {} --schedules {} for --num-layers {} on "
          "--devices {}; hint: loosen --pp, --vpp or --schedules (interleaved and looped-bfs "
          "take v = 2, 4, 8, ...; p x v must not exceed the layers + 2)",
          o_.pp.empty() ? "any" : fmt::format("{}", fmt::join(o_.pp, ",")),
          o_.vpp.empty() ? "any" : fmt::format("{}", fmt::join(o_.vpp, ",")),
          o_.schedules.empty() ? "any" : fmt::format("{}", fmt::join(o_.schedules, ",")),
          o_.model.num_layers, o_.devices));
    }
    const PlanCandidate& first = infeasible_.front();
    return Status::invalid_argument(fmt::format(
        "no configuration can run: {} (e.g. {} p={} v={}); hint: loosen --pp, --vpp, "
        "--schedules, --recompute or --micro-batch-size",
        first.reason.substr(0, first.reason.find("; hint:")), first.schedule, first.pp, first.vpp));
  }
  res_.search_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return std::move(res_);
}

}  // namespace

Result<PlanResult> plan(const PlanOptions& options) {
  Planner p(options);
  return p.run();
}

}  // namespace tightpipe
