// tune (tune.h): a PyTorch model's measured modules through the planner's search.
#include "tightpipe/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "plan_format.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/model.h"

namespace tightpipe {
namespace {

using json = nlohmann::json;

// The number under `key` of `obj`, finite and >= 0; errors name the source, the entry and key.
Result<double> non_negative(const json& obj, const std::string& key, std::string_view source,
                            std::string_view entry) {
  auto it = obj.find(key);
  if (it == obj.end()) {
    return Status::invalid_argument(
        fmt::format("{}: {} has no '{}'; hint: write the file with tightpipe.torch.measure_layers",
                    source, entry, key));
  }
  if (!it->is_number()) {
    return Status::invalid_argument(
        fmt::format("{}: {} '{}' is {}, not a number", source, entry, key, printable(it->dump())));
  }
  const double x = it->get<double>();
  if (!std::isfinite(x) || x < 0 || x > kMaxCostValue) {
    return Status::invalid_argument(
        fmt::format("{}: {} '{}' is {}; hint: a time in seconds or a byte count in [0, {:g}]",
                    source, entry, key, x, kMaxCostValue));
  }
  return x;
}

StageCost zero_cost() { return StageCost{0, 0, 0, 0, 0}; }

std::string split_text(const std::vector<std::vector<std::string>>& names) {
  std::vector<std::string> counts;
  for (const auto& s : names) counts.push_back(std::to_string(s.size()));
  return fmt::format("{}", fmt::join(counts, "|"));
}

using plan_format::kGiB;
using plan_format::kMiB;
using plan_format::percent;

// "r0 12.3%, r1 4.5%": each rank's simulated bubble.
std::string rank_bubbles(const SimResult& sim) {
  std::string out;
  for (const RankSimStats& r : sim.ranks) {
    out += fmt::format("{}r{} {}", out.empty() ? "" : ", ", r.rank, percent(r.bubble_ratio));
  }
  return out;
}

// The slowest stage's F + B per microbatch, in ms.
double slowest_stage_ms(const CostModel& costs) {
  double x = 0;
  for (int32_t s = 0; s < costs.num_stages(); ++s) {
    x = std::max(x, costs.stage(s).f + costs.stage(s).b);
  }
  return 1e3 * x;
}

// Module names per stage of a split in blocks per model stage (module 0 on stage 0, the last on
// the last), and which model stage each schedule stage holds.
std::vector<std::vector<std::string>> names_of(const MeasuredModules& m,
                                               const std::vector<int32_t>& blocks) {
  std::vector<std::vector<std::string>> out(blocks.size());
  size_t next = 1;
  for (size_t s = 0; s < blocks.size(); ++s) {
    if (s == 0) out[s].push_back(m.modules.front().name);
    for (int32_t b = 0; b < blocks[s]; ++b) out[s].push_back(m.modules.at(next++).name);
    if (s + 1 == blocks.size()) out[s].push_back(m.modules.back().name);
  }
  return out;
}

std::string placement_of(const Schedule& s) {
  if (s.num_stages == s.num_ranks) return "loop";
  for (int32_t st = 0; st < s.num_stages; ++st) {
    if (s.stage_to_rank[st] != st % s.num_ranks) return "v";
  }
  return "loop";
}

// simulate() as `tightpipe simulate --engine torch --json` runs it, the lower bound attached.
Result<SimResult> simulate_torch(const Schedule& compute_only, const CostModel& costs,
                                 const CoreSharing& sharing) {
  TP_ASSIGN_OR_RETURN(Schedule low,
                      compute_only.lowered ? Result<Schedule>(compute_only) : lower(compute_only));
  SimOptions so;
  so.engine = Engine::kTorch;
  so.core_sharing = sharing;
  TP_ASSIGN_OR_RETURN(SimResult r, simulate(low, costs, so));
  r.steady_state_step_time = r.makespan;
  TP_ASSIGN_OR_RETURN(LowerBound lb, lower_bound_for(low, costs, so));
  TP_RETURN_IF_ERROR(attach_lower_bound(r, lb, low.name));
  return r;
}

Result<TuneSetup> setup_of(const MeasuredModules& m, const Schedule& sched,
                           const std::vector<int32_t>& blocks, const CostModel& costs, int64_t mbs,
                           const CoreSharing& sharing) {
  TuneSetup t;
  t.schedule = sched.name;
  t.pp = sched.num_ranks;
  t.vpp = sched.chunks();
  t.micro_batch_size = mbs;
  t.microbatches = sched.num_microbatches;
  t.placement = placement_of(sched);
  t.stage_to_rank = sched.stage_to_rank;
  t.module_names = names_of(m, blocks);
  t.compute_schedule = std::make_shared<const Schedule>(sched);
  t.costs = std::make_shared<const CostModel>(costs);
  TP_ASSIGN_OR_RETURN(t.sim, simulate_torch(sched, costs, sharing));
  std::vector<int> b(blocks.begin(), blocks.end());
  t.sim.layout = nn::layout_from_blocks(b);
  t.step_s = t.sim.makespan;
  t.lower_bound_s = t.sim.lower_bound_makespan;
  return t;
}

std::string setup_label(const TuneSetup& t) {
  return fmt::format("{} {} p={} v={} m={}", t.schedule, t.placement, t.pp, t.vpp, t.microbatches);
}

}  // namespace

Result<MeasuredModules> parse_measured_modules(std::string_view text, std::string_view source) {
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status::invalid_argument(fmt::format(
        "{}: not a JSON object; hint: the file tightpipe.torch.measure_layers(out=...) writes",
        source));
  }
  const std::string format = doc.value("format", std::string());
  if (format != "tightpipe-layers/1") {
    return Status::invalid_argument(
        fmt::format("{}: format '{}', expected 'tightpipe-layers/1'; hint: the file "
                    "tightpipe.torch.measure_layers(out=...) writes",
                    source, printable(format)));
  }
  if (doc.value("time_unit", std::string("s")) != "s") {
    return Status::invalid_argument(fmt::format("{}: time_unit '{}', expected 's'", source,
                                                printable(doc.value("time_unit", std::string()))));
  }
  MeasuredModules out;
  out.source = std::string(source);
  for (auto [key, field] : {std::pair{"device", &MeasuredModules::device},
                            std::pair{"malloc", &MeasuredModules::malloc_mode}}) {
    if (!doc.contains(key)) continue;
    if (!doc[key].is_string()) {
      return Status::invalid_argument(
          fmt::format("{}: '{}' is {}, not a string; hint: the file "
                      "tightpipe.torch.measure_layers(out=...) writes",
                      source, key, printable(doc[key].dump())));
    }
    out.*field = doc[key].get<std::string>();
  }
  const json& shape =
      doc.contains("microbatch_input_shape") ? doc["microbatch_input_shape"] : json();
  if (!shape.is_array() || shape.empty()) {
    return Status::invalid_argument(fmt::format(
        "{}: 'microbatch_input_shape' is {}, not a non-empty list; hint: the shape of the "
        "microbatch measure_layers ran, e.g. [2, 64]",
        source, printable(shape.dump())));
  }
  for (const json& d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1) {
      return Status::invalid_argument(
          fmt::format("{}: 'microbatch_input_shape' holds {}, not a positive integer", source,
                      printable(d.dump())));
    }
    out.input_shape.push_back(d.get<int64_t>());
  }
  out.micro_batch_size = out.input_shape.front();
  const json& layers = doc.contains("layers") ? doc["layers"] : json();
  if (!layers.is_array()) {
    return Status::invalid_argument(fmt::format("{}: 'layers' is missing or not a list", source));
  }
  if (layers.size() < 2) {
    return Status::invalid_argument(fmt::format(
        "{}: {} module(s); a pipeline needs at least two to split; hint: measure the model as "
        "its list of top-level modules (embedding, blocks, head)",
        source, layers.size()));
  }
  std::set<std::string> seen;
  for (size_t k = 0; k < layers.size(); ++k) {
    const json& l = layers[k];
    const std::string entry = fmt::format("layers[{}]", k);
    if (!l.is_object() || !l.contains("name") || !l["name"].is_string() ||
        l["name"].get<std::string>().empty()) {
      return Status::invalid_argument(
          fmt::format("{}: {} has no module name; hint: each layer is {{\"name\": ..., \"f\": "
                      "...}}",
                      source, entry));
    }
    ModuleCost mc;
    mc.name = l["name"].get<std::string>();
    if (!seen.insert(mc.name).second) {
      return Status::invalid_argument(
          fmt::format("{}: module '{}' is listed twice; hint: one entry per top-level module",
                      source, printable(mc.name)));
    }
    const std::string named = fmt::format("{} ('{}')", entry, printable(mc.name));
    StageCost& c = mc.cost;
    c = zero_cost();
    struct Field {
      const char* key;
      double StageCost::*field;
    };
    for (const Field& f : {Field{"f", &StageCost::f}, Field{"i", &StageCost::i},
                           Field{"w", &StageCost::w}, Field{"act_bytes", &StageCost::act_bytes},
                           Field{"act_after_i_bytes", &StageCost::act_after_i_bytes},
                           Field{"param_bytes", &StageCost::param_bytes},
                           Field{"grad_bytes", &StageCost::grad_bytes},
                           Field{"optimizer_bytes", &StageCost::optimizer_bytes}}) {
      TP_ASSIGN_OR_RETURN(c.*f.field, non_negative(l, f.key, source, named));
    }
    TP_ASSIGN_OR_RETURN(double ob, non_negative(l, "output_bytes", source, named));
    mc.output_bytes = static_cast<int64_t>(std::llround(ob));
    c.act_after_i_bytes = std::min(c.act_after_i_bytes, c.act_bytes);
    // b: the whole backward as one autograd pass (measure_layers times it: cheaper than I then
    // W); a table without it costs a whole backward as i + w.
    if (l.contains("b")) {
      TP_ASSIGN_OR_RETURN(c.b, non_negative(l, "b", source, named));
    } else {
      c.b = c.i + c.w;
    }
    c.recompute = c.f;
    out.modules.push_back(std::move(mc));
  }
  return out;
}

Result<MeasuredModules> fit_modules_to_run(const MeasuredModules& probe,
                                           const std::vector<int32_t>& modules_per_stage,
                                           const StageTimes& run) {
  const size_t S = modules_per_stage.size();
  int64_t total = 0;
  for (int32_t n : modules_per_stage) {
    if (n < 1) {
      return Status::invalid_argument(fmt::format(
          "--current-split {}: every stage holds at least one module; hint: module counts per "
          "stage, e.g. 7,7",
          fmt::join(modules_per_stage, ",")));
    }
    total += n;
  }
  if (total != static_cast<int64_t>(probe.modules.size())) {
    return Status::invalid_argument(fmt::format(
        "--current-split {}: {} modules, but {} lists {}; hint: the module count of each stage "
        "of the run, summing to the model's",
        fmt::join(modules_per_stage, ","), total, probe.source, probe.modules.size()));
  }
  if (run.f.size() != S || run.i.size() != S || (!run.w.empty() && run.w.size() != S)) {
    return Status::invalid_argument(fmt::format(
        "--current-split {}: {} stages, but the run's traces have {}; hint: one count per stage "
        "of the run",
        fmt::join(modules_per_stage, ","), S, run.f.size()));
  }
  MeasuredModules out = probe;
  size_t first = 0;
  for (size_t s = 0; s < S; ++s) {
    const size_t end = first + static_cast<size_t>(modules_per_stage[s]);
    double pf = 0, pi = 0, pw = 0, pb = 0;
    for (size_t k = first; k < end; ++k) {
      pf += probe.modules[k].cost.f;
      pi += probe.modules[k].cost.i;
      pw += probe.modules[k].cost.w;
      pb += probe.modules[k].cost.b;
    }
    // The backward as a whole: a split run's I + W is held to the probe's i + w, a fused run's
    // (w empty: PyTorch's first stage, or a schedule without the split) to its b; one factor
    // scales i, w and b alike, so the probe's I : W share and its fused-over-split ratio stay.
    const double run_b = run.i[s] + (run.w.empty() ? 0.0 : run.w[s]);
    const double probe_b = run.w.empty() ? pb : pi + pw;
    const double kf = pf > 0 ? run.f[s] / pf : 1, kb = probe_b > 0 ? run_b / probe_b : 1;
    for (size_t k = first; k < end; ++k) {
      StageCost& c = out.modules[k].cost;
      c.f *= kf;
      c.i *= kb;
      c.w *= kb;
      c.b *= kb;
      c.recompute = c.f;
    }
    first = end;
  }
  out.source = probe.source + " fitted to the run's traces";
  return out;
}

LayerCosts module_layer_costs(const MeasuredModules& m) {
  LayerCosts lc;
  lc.embedding = m.modules.front().cost;
  lc.head = m.modules.back().cost;
  lc.block = zero_cost();
  for (size_t k = 1; k + 1 < m.modules.size(); ++k) lc.block_each.push_back(m.modules[k].cost);
  if (!lc.block_each.empty()) {
    for (const StageCost& c : lc.block_each) add_stage_cost(lc.block, c);
    lc.block = scale_stage_cost(lc.block, 1.0 / static_cast<double>(lc.block_each.size()));
  }
  for (size_t k = 0; k + 1 < m.modules.size(); ++k) {
    lc.message_bytes = std::max(lc.message_bytes, m.modules[k].output_bytes);
  }
  lc.time_unit = "s";
  lc.source = m.source;
  return lc;
}

Result<TuneResult> tune(const TuneOptions& o) {
  const MeasuredModules& m = o.modules;
  const int32_t n = static_cast<int32_t>(m.modules.size());
  if (o.pp < 1 || o.pp > kMaxRanks) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: must be in [1, {}]; hint: the ranks of the pipeline", o.pp, kMaxRanks));
  }
  if (o.pp > n) {
    return Status::invalid_argument(fmt::format(
        "--pp {}: {} lists {} modules, fewer than the stages; a module cannot be split further; "
        "hint: --pp {} at most, or measure the model at a finer grain (its blocks as modules)",
        o.pp, m.source, n, n));
  }
  if (o.microbatches < 1 || o.microbatches > kMaxStageMicrobatches) {
    return Status::invalid_argument(fmt::format("--microbatches {}: must be in [1, {}]",
                                                o.microbatches, kMaxStageMicrobatches));
  }
  if (!(o.min_gain >= 0 && o.min_gain < 1)) {
    return Status::invalid_argument(
        fmt::format("--min-gain {}: must be in [0, 1); hint: 0.03 asks for 3%", o.min_gain));
  }
  const LayerCosts layer_costs = module_layer_costs(m);
  TuneResult res;
  res.host_time = o.host_time;
  if (m.device == "cpu" && m.malloc_mode == "default") {
    // docs/torch.md section 7: glibc's default malloc maps every large tensor afresh, and the
    // page faults that costs move with the heap's history, so the probe's times and the run's
    // differ by them (an embedding's backward 22-25 ms against 4-5 ms at d = 384).
    res.notes.push_back(fmt::format(
        "note: {} was measured under glibc's default malloc, whose page faults on large tensors "
        "move with the heap's history and can put the predictions 5-10% off; hint: call "
        "tightpipe.torch.steady_malloc() before measure_layers and in every rank "
        "(spawn(..., steady_malloc=True))",
        m.source));
  }

  // The current setup, with the same costs.
  if (o.current) {
    const TuneCurrent& cur = *o.current;
    Schedule sched;
    if (cur.file) {
      sched = *cur.file;
    } else {
      auto g =
          generate_schedule(cur.schedule, {.ranks = o.pp,
                                           .microbatches = static_cast<int32_t>(o.microbatches),
                                           .chunks = cur.vpp > 0 ? cur.vpp : 1,
                                           .group_size = 0});
      if (!g.ok()) return g.status().with_context("--current-schedule " + cur.schedule);
      sched = std::move(*g);
    }
    const int32_t S = sched.stages_per_direction();
    if (sched.directions != 1) {
      return Status::invalid_argument(
          "the current schedule runs in two directions; hint: PyTorch's runtime has no form for "
          "it (dualpipev is the one-direction form)");
    }
    if (static_cast<int32_t>(cur.modules_per_stage.size()) != S) {
      return Status::invalid_argument(fmt::format(
          "--current-split {}: {} stages, but the current schedule ({}) has {}; hint: one module "
          "count per stage",
          fmt::join(cur.modules_per_stage, ","), cur.modules_per_stage.size(), sched.name, S));
    }
    int64_t total = 0;
    bool empty = false;
    for (int32_t k : cur.modules_per_stage) {
      total += k;
      empty = empty || k < 1;
    }
    if (empty || total != n) {
      return Status::invalid_argument(fmt::format(
          "--current-split {}: {} modules{}, but {} lists {}; hint: module counts per stage of "
          "the current run, each at least 1, summing to {}",
          fmt::join(cur.modules_per_stage, ","), total, empty ? " with an empty stage" : "",
          m.source, n, n));
    }
    std::vector<int32_t> blocks;
    std::vector<StageLayers> split;
    for (int32_t s = 0; s < S; ++s) {
      const int32_t b = cur.modules_per_stage[s] - (s == 0 ? 1 : 0) - (s == S - 1 ? 1 : 0);
      if (b < 0) {
        return Status::invalid_argument(fmt::format(
            "--current-split {}: one stage cannot hold both the first and the last module",
            fmt::join(cur.modules_per_stage, ",")));
      }
      blocks.push_back(b);
      split.push_back({s == 0, b, s == S - 1});
    }
    std::vector<int> bl(blocks.begin(), blocks.end());
    const CostModel costs = expand_to_directions(
        torch_runtime_costs(cost_model_for_layout(layer_costs, split, nn::layout_from_blocks(bl)),
                            o.host_time, cur.modules_per_stage),
        sched);
    TP_ASSIGN_OR_RETURN(TuneSetup t,
                        setup_of(m, sched, blocks, costs, m.micro_batch_size, o.core_sharing));
    if (cur.file) t.schedule = cur.schedule.empty() ? sched.name : cur.schedule;
    res.current = std::move(t);
  }

  // The search: the planner's, with the modules as its layers.
  PlanOptions po;
  po.model.num_layers = n - 2;
  po.model.seq_length = m.input_shape.size() >= 2 ? m.input_shape[1] : 1;
  po.global_batch_size = o.microbatches * m.micro_batch_size;
  po.micro_batch_sizes =
      o.micro_batch_sizes.empty() ? std::vector<int64_t>{m.micro_batch_size} : o.micro_batch_sizes;
  po.devices = o.pp;
  po.pp = {o.pp};
  po.device.name = "measured";
  po.device.description = "the modules' measured costs";
  po.device.bf16 = false;
  po.device.devices_per_node = o.pp;
  po.device.intra_node = LinkSpec{"measured", o.link.latency, o.link.bandwidth, "--link", false};
  po.device.message_overhead_s = o.link.overhead;
  po.network = po.device.intra_node;
  po.memory_budget_bytes =
      o.memory_limit_bytes > 0 ? o.memory_limit_bytes : kMaxPlanMemoryBudgetGib * kGiB;
  po.measured = layer_costs;
  po.measured_micro_batch_size = m.micro_batch_size;
  po.module_costs = true;
  po.host_time = o.host_time;
  po.engine = Engine::kTorch;
  po.core_sharing = o.core_sharing;
  po.train_tokens = 1;
  po.top = std::max(o.top, 1);
  if (o.schedules.empty()) {
    po.schedules = {"1f1b",    "interleaved", "zb-h1",     "zb-h2",  "zb-1p", "zb-2p",
                    "zb-auto", "zb-v",        "zb-v-auto", "v-half", "v-min", "dualpipev"};
  } else {
    po.schedules = o.schedules;
  }
  auto planned = plan(po);
  if (!planned.ok()) {
    std::string msg(planned.status().message());
    if (msg.rfind("no configuration fits the memory budget", 0) == 0) {
      // The planner's sentence, with tune's flag and fixes.
      const size_t need = msg.find("the smallest need is");
      const size_t hint = msg.find("; hint:");
      return Status::invalid_argument(fmt::format(
          "--memory-limit-gib {:g}: no candidate fits it per rank: {}; hint: a larger limit, a "
          "smaller micro batch (--micro-batch-size), or more ranks",
          o.memory_limit_bytes / kGiB,
          need == std::string::npos ? msg : msg.substr(need, hint - need)));
    }
    return planned.status().with_context("tune");
  }
  res.stats = planned->stats;
  int32_t plan_rec = planned->recommended;
  for (int32_t k = 0; k < static_cast<int32_t>(planned->candidates.size()); ++k) {
    const PlanCandidate& c = planned->candidates[k];
    if (!c.fits || !c.simulated || !c.compute_schedule) continue;
    if (static_cast<int32_t>(res.candidates.size()) >= std::max(o.top, 1) && k != plan_rec) {
      continue;
    }
    TP_ASSIGN_OR_RETURN(TuneSetup t, setup_of(m, *c.compute_schedule, c.blocks_per_stage,
                                              *c.stage_costs, c.micro_batch_size, o.core_sharing));
    if (k == plan_rec) res.recommended = static_cast<int32_t>(res.candidates.size());
    res.candidates.push_back(std::move(t));
  }
  if (res.candidates.empty()) {
    return Status::internal("tune: the planner simulated no candidate");
  }
  const TuneSetup& best = res.candidates[res.recommended];
  if (res.current) {
    const TuneSetup& cur = *res.current;
    const double gain = 1 - best.step_s / cur.step_s;
    const std::string bubbles = rank_bubbles(cur.sim);
    if (gain < o.min_gain) {
      res.change = false;
      res.why = fmt::format(
          "Keep the current setup ({}, split {}): predicted {:.4g} ms per step, bubble {} "
          "({}); the best candidate found ({}, split {}) is {:.4g} ms, {:.1f}% {}, under the "
          "{:g}% a change must gain (--min-gain). {}",
          setup_label(cur), split_text(cur.module_names), 1e3 * cur.step_s,
          percent(cur.sim.bubble_ratio), bubbles, setup_label(best), split_text(best.module_names),
          1e3 * best.step_s, 100 * std::abs(gain), gain >= 0 ? "faster" : "slower",
          100 * o.min_gain,
          cur.schedule == "1f1b"
              ? fmt::format("With m = {} >= {} microbatches the fill and drain of 1F1B are a small "
                            "share of the step and the stages are balanced: 1F1B is enough.",
                            cur.microbatches, cur.pp)
              : "Nothing the search can change pays for itself here.");
    } else {
      res.why = fmt::format(
          "Change to {} with split {}: predicted {:.4g} ms per step against {:.4g} ms now "
          "({:.2f}x); the bubble goes from {} ({}) to {} ({}); the slowest stage's F + B goes "
          "from {:.4g} to {:.4g} ms.",
          setup_label(best), split_text(best.module_names), 1e3 * best.step_s, 1e3 * cur.step_s,
          cur.step_s / best.step_s, percent(cur.sim.bubble_ratio), bubbles,
          percent(best.sim.bubble_ratio), rank_bubbles(best.sim), slowest_stage_ms(*cur.costs),
          slowest_stage_ms(*best.costs));
    }
  } else {
    res.why = fmt::format("{} with split {} is predicted fastest: {:.4g} ms per step, bubble {}.",
                          setup_label(best), split_text(best.module_names), 1e3 * best.step_s,
                          percent(best.sim.bubble_ratio));
    if (!planned->why.empty()) res.why += " " + planned->why;
  }
  return res;
}

std::string format_tune(const TuneResult& r) {
  std::string out;
  const size_t ranks = r.candidates.front().sim.ranks.size();
  std::string head =
      fmt::format("{:<9} {:<11} {:<5} {:>2} {:>3} {:>4}  {:<14} {:>10} {:>8}", "setup", "schedule",
                  "place", "v", "mbs", "m", "split", "step ms", "vs now");
  for (size_t k = 0; k < ranks; ++k) head += fmt::format(" {:>8}", fmt::format("bubble{}", k));
  for (size_t k = 0; k < ranks; ++k) head += fmt::format(" {:>9}", fmt::format("peakMiB{}", k));
  head += fmt::format(" {:>10}\n", "bound ms");
  out += head;
  auto row = [&](const std::string& label, const TuneSetup& t) {
    std::string line = fmt::format(
        "{:<9} {:<11} {:<5} {:>2} {:>3} {:>4}  {:<14} {:>10.4g} {:>8}", label, t.schedule,
        t.placement, t.vpp, t.micro_batch_size, t.microbatches, split_text(t.module_names),
        1e3 * t.step_s,
        r.current ? fmt::format("{:.2f}x", r.current->step_s / t.step_s) : std::string("-"));
    for (const RankSimStats& s : t.sim.ranks)
      line += fmt::format(" {:>8}", percent(s.bubble_ratio));
    for (const RankSimStats& s : t.sim.ranks) line += fmt::format(" {:>9.1f}", s.peak_bytes / kMiB);
    line += fmt::format(" {:>10.4g}\n", 1e3 * t.lower_bound_s);
    out += line;
  };
  if (r.current) row("current", *r.current);
  for (size_t k = 0; k < r.candidates.size(); ++k) {
    row(static_cast<int32_t>(k) == r.recommended ? fmt::format("{} *", k + 1)
                                                 : std::to_string(k + 1),
        r.candidates[k]);
  }
  out += fmt::format(
      "searched {} configurations: {} simulated, {} pruned by their lower bound, {} "
      "do not fit\n",
      r.stats.configurations, r.stats.simulated, r.stats.pruned, r.stats.infeasible);
  out += (r.change ? "recommended (*): " : "recommended: no change. ") + r.why + "\n";
  for (const std::string& note : r.notes) out += note + "\n";
  return out;
}

ComputeByKind compute_by_kind(const TuneSetup& setup, int32_t rank) {
  TP_CHECK(rank >= 0 && rank < setup.pp, "compute_by_kind: rank ", rank, " of ", setup.pp);
  ComputeByKind out;
  for (const Action& pair : setup.compute_schedule->programs[rank]) {
    for (const Action& a : sub_actions(pair)) {
      if (!is_compute(a.type)) continue;
      const double t = setup.costs->compute_time(a.stage, a.type);
      switch (a.type) {
        case ActionType::kForward:
          out.f += t;
          break;
        case ActionType::kBackwardInput:
          out.i += t;
          break;
        case ActionType::kBackwardWeight:
          out.w += t;
          break;
        default:
          out.b += t;
          break;
      }
    }
  }
  return out;
}

std::string tune_setup_json(const TuneResult& result, const TuneSetup& setup,
                            std::string_view compute_comms_file, std::string_view compute_file) {
  const TuneResult& r = result;
  const TuneSetup& t = setup;
  json j;
  j["format"] = "tightpipe-tune/1";
  j["schedule"] = t.schedule;
  j["pp"] = t.pp;
  j["vpp"] = t.vpp;
  j["num_stages"] = t.compute_schedule->num_stages;
  j["microbatches"] = t.microbatches;
  j["micro_batch_size"] = t.micro_batch_size;
  j["placement"] = t.placement;
  j["stage_to_rank"] = t.stage_to_rank;
  j["module_fqns_per_model_part"] = t.module_names;
  j["files"] = {{"compute_comms", compute_comms_file}, {"compute", compute_file}};
  const RuntimeHostTime& h = r.host_time;
  j["host_time_s"] = {{"f", h.f},
                      {"i", h.i},
                      {"w", h.w},
                      {"b", h.b},
                      {"f_module", h.f_module},
                      {"i_module", h.i_module},
                      {"w_module", h.w_module},
                      {"b_module", h.b_module}};
  j["change"] = r.change;
  j["why"] = r.why;
  j["notes"] = r.notes;
  auto prediction = [](const TuneSetup& s) {
    json p;
    p["engine"] = "torch";
    if (cores_shared(s.sim.core_sharing, s.pp)) {  // the key only then, as simulate's JSON
      p["core_sharing"] = {{"cores", s.sim.core_sharing.cores},
                           {"slowdown", s.sim.core_sharing.slowdown}};
    }
    p["step_s"] = s.step_s;
    p["bubble_ratio"] = s.sim.bubble_ratio;
    p["lower_bound_s"] = s.lower_bound_s;
    json ranks = json::array();
    for (const RankSimStats& st : s.sim.ranks) {
      const ComputeByKind k = compute_by_kind(s, st.rank);
      ranks.push_back({{"rank", st.rank},
                       {"bubble_ratio", st.bubble_ratio},
                       {"busy_s", st.busy},
                       {"compute_s", {{"f", k.f}, {"i", k.i}, {"w", k.w}, {"b", k.b}}},
                       {"peak_bytes", st.peak_bytes}});
    }
    p["ranks"] = ranks;
    return p;
  };
  j["prediction"] = prediction(t);
  if (r.current) {
    json c;
    c["schedule"] = r.current->schedule;
    c["vpp"] = r.current->vpp;
    c["microbatches"] = r.current->microbatches;
    c["placement"] = r.current->placement;
    c["module_fqns_per_model_part"] = r.current->module_names;
    c["prediction"] = prediction(*r.current);
    j["current"] = c;
  }
  return j.dump(2) + "\n";
}

}  // namespace tightpipe
