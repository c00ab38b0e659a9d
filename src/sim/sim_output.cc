#include <algorithm>
// Human and JSON forms of SimResult (docs/simulate_json.md).
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/simulator.h"

namespace tightpipe {
namespace {

using nlohmann::ordered_json;

ordered_json result_json(const SimResult& r) {
  ordered_json j;
  j["schema"] = "tightpipe.simulate/1";
  j["schedule"] = r.schedule;
  j["ranks"] = r.num_ranks;
  j["stages"] = r.num_stages;
  j["chunks"] = r.num_ranks ? r.num_stages / r.num_ranks : 0;
  j["microbatches"] = r.num_microbatches;
  j["comm_mode"] = comm_mode_name(r.comm_mode);
  j["engine"] = engine_name(r.engine);
  j["engine_profile"] = r.engine_description;
  j["recompute"] = recompute_name(r.recompute);
  j["cost_source"] = r.cost_source;
  if (!r.layout.empty()) j["layout"] = r.layout;
  j["time_unit"] = r.time_unit;
  j["makespan"] = r.makespan;
  j["total_compute"] = r.total_compute;
  j["bubble_ratio"] = r.bubble_ratio;
  j["bubble_percent"] = 100.0 * r.bubble_ratio;
  j["bubble_measure"] = "makespan";
  j["bubble_definition"] =
      "idle / (ranks x makespan); busy = F, I, W, B and the optimizer after every rank reached it";
  j["max_span"] = r.max_span;
  j["span_bubble_ratio"] = r.span_bubble_ratio;
  j["span_bubble_percent"] = 100.0 * r.span_bubble_ratio;
  j["span_bubble_definition"] =
      "1 - busy / (ranks x max_span); a rank's span runs from its first compute start to its last "
      "compute end; busy = F, I, W, B (the zero-bubble paper's measure)";
  if (r.has_lower_bound) {  // only then: outputs without a bound keep their keys
    j["lower_bound_makespan"] = r.lower_bound_makespan;
    j["lower_bound_span"] = r.lower_bound_span;
    j["lower_bound_memory_limit"] = r.lower_bound_memory;
    j["gap_to_lower_bound"] = lower_bound_gap(r.makespan, r.lower_bound_makespan);
    j["gap_to_lower_bound_span"] = lower_bound_gap(r.max_span, r.lower_bound_span);
  }
  j["optimizer_modelled"] = r.optimizer;
  j["optimizer_post_validation"] = r.optimizer_post_validation;
  if (r.steady_state_step_time > 0) j["steady_state_step_time"] = r.steady_state_step_time;
  const bool dp = r.data_parallel.size > 1;  // the keys below only then: older outputs stay
  if (dp) {
    j["data_parallel"] = {{"size", r.data_parallel.size},
                          {"overlap_grad_reduce", r.data_parallel.overlap},
                          {"bucket_bytes", r.data_parallel.bucket_bytes}};
    j["exposed_allreduce_ratio"] = r.exposed_allreduce_ratio;
    j["exposed_allreduce_percent"] = 100.0 * r.exposed_allreduce_ratio;
  }
  // Only where it acted (the replicas share the cores too): older outputs stay as they were.
  if (cores_shared(r.core_sharing, r.num_ranks * r.data_parallel.size)) {
    j["core_sharing"] = {{"cores", r.core_sharing.cores}, {"slowdown", r.core_sharing.slowdown}};
  }
  j["messages"] = r.messages;
  j["message_bytes"] = r.message_bytes;
  j["actions"] = r.actions;
  j["activation_unit_bytes"] = r.activation_unit_bytes;
  j["real_bytes"] = r.real_bytes;
  ordered_json ranks = ordered_json::array();
  for (const RankSimStats& s : r.ranks) {
    ordered_json o;
    o["rank"] = s.rank;
    o["first_start"] = s.first_start;
    o["last_end"] = s.last_end;
    o["busy"] = s.busy;
    o["idle"] = s.idle;
    o["bubble_ratio"] = s.bubble_ratio;
    o["internal_idle"] = s.internal_idle;
    o["span"] = s.span;
    o["span_bubble_ratio"] = s.span_bubble_ratio;
    o["comm"] = s.comm;
    if (dp) {
      o["allreduce"] = s.allreduce;
      o["exposed_allreduce"] = s.exposed_allreduce;
    }
    o["compute_actions"] = s.compute_actions;
    o["messages_sent"] = s.messages_sent;
    o["bytes_sent"] = s.bytes_sent;
    o["peak_activations"] = s.peak_activations;
    o["peak_activation_bytes"] = s.peak_activation_bytes;
    o["static_bytes"] = s.static_bytes;
    o["peak_bytes"] = s.peak_bytes;
    ranks.push_back(std::move(o));
  }
  j["per_rank"] = std::move(ranks);
  return j;
}

std::string join_ranks(const SimResult& r, auto field) {
  std::vector<std::string> parts;
  for (const RankSimStats& s : r.ranks) parts.push_back(field(s));
  return join(parts, " ");
}

}  // namespace

std::string sim_result_to_json(const SimResult& r, int indent) {
  return result_json(r).dump(indent);
}

std::string compare_results_to_json(const std::vector<SimResult>& results, int indent) {
  ordered_json j;
  j["schema"] = "tightpipe.simulate.compare/1";
  ordered_json arr = ordered_json::array();
  for (const SimResult& r : results) arr.push_back(result_json(r));
  j["results"] = std::move(arr);
  return j.dump(indent);
}

std::string format_sim_table(const SimResult& r) {
  std::string out;
  const int32_t v = r.num_ranks ? r.num_stages / r.num_ranks : 0;
  out +=
      fmt::format("schedule {}  p={} v={} m={}  comm={} recompute={}\n", r.schedule, r.num_ranks, v,
                  r.num_microbatches, comm_mode_name(r.comm_mode), recompute_name(r.recompute));
  out += fmt::format("engine   {}\n", r.engine_description);
  out += fmt::format("costs    {} (time unit: {})\n", r.cost_source, r.time_unit);
  if (!r.layout.empty()) out += fmt::format("layout   {}\n", r.layout);
  if (cores_shared(r.core_sharing, r.num_ranks * r.data_parallel.size)) {
    out += fmt::format("cores    {} (docs/cost_model.md \"Shared cores\")\n",
                       core_sharing_text(r.core_sharing));
  }
  auto bound = [&](double value, double lb) {
    return r.has_lower_bound ? " " + format_lower_bound(value, lb) : std::string();
  };
  out +=
      fmt::format("makespan {:.6g}{}   bubble {:.1f}%   compute {:.6g}   messages {} ({})\n",
                  r.makespan, bound(r.makespan, r.lower_bound_makespan), 100.0 * r.bubble_ratio,
                  r.total_compute, r.messages, human_bytes(static_cast<double>(r.message_bytes)));
  out += fmt::format(
      "max span {:.6g}{}   span bubble {:.1f}%   (bubble: all ranks from 0 to the makespan; span "
      "bubble: each rank from its first to its last compute)\n",
      r.max_span, bound(r.max_span, r.lower_bound_span), 100.0 * r.span_bubble_ratio);
  if (r.optimizer_post_validation && r.steady_state_step_time > 0) {
    out += fmt::format(
        "steady-state step {:.6g} (optimizer post-validation: each rank steps at its own end and "
        "starts the next iteration; the makespan above is one step alone)\n",
        r.steady_state_step_time);
  }
  if (r.has_lower_bound) {
    out += fmt::format(
        "lower bound: no schedule of this shape holding at most {:.4g} activations per rank is "
        "faster (docs/cost_model.md, \"Lower bound\")\n",
        r.lower_bound_memory);
  }
  if (r.data_parallel.size > 1) {
    std::vector<std::string> ar, ex;
    for (const RankSimStats& s : r.ranks) {
      ar.push_back(fmt::format("{:.4g}", s.allreduce));
      ex.push_back(fmt::format("{:.4g}", s.exposed_allreduce));
    }
    out += fmt::format(
        "data parallel {} ({} the program): exposed all-reduce {:.1f}% of the step; per rank "
        "all-reduce {} of which exposed {}\n",
        r.data_parallel.size, r.data_parallel.overlap ? "overlapping" : "after",
        100.0 * r.exposed_allreduce_ratio, join(ar, " "), join(ex, " "));
  }
  out += fmt::format("{:>4} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11} {:>9} {:>10} {:>12} {:>12}\n",
                     "rank", "first", "last", "span", "busy", "idle", "gaps", "comm", "peak act",
                     "act bytes", "peak mem");
  for (const RankSimStats& s : r.ranks) {
    out += fmt::format(
        "{:>4} {:>11.6g} {:>11.6g} {:>11.6g} {:>11.6g} {:>11.6g} {:>11.6g} {:>9.4g} {:>10.4g} "
        "{:>12} {:>12}\n",
        s.rank, s.first_start, s.last_end, s.span, s.busy, s.idle, s.internal_idle, s.comm,
        s.peak_activations, r.real_bytes ? human_bytes(s.peak_activation_bytes) : "-",
        r.real_bytes ? human_bytes(s.peak_bytes) : "-");
  }
  return out;
}

std::string format_compare_table(const std::vector<SimResult>& results) {
  std::string out =
      fmt::format("{:<14} {:>3} {:>12} {:>8} {:>10} {:>6} {:>10} {:>9}  {:<28} {}\n", "schedule",
                  "v", "makespan", "bubble%", "max span", "span%", "vs bound", "messages",
                  "peak activations per rank", "peak memory per rank");
  for (const SimResult& r : results) {
    const int32_t v = r.num_ranks ? r.num_stages / r.num_ranks : 0;
    const std::string vs =
        r.has_lower_bound
            ? fmt::format(
                  "+{:.1f}%",
                  100.0 * std::max(0.0, lower_bound_gap(r.makespan, r.lower_bound_makespan)))
            : "-";
    out += fmt::format(
        "{:<14} {:>3} {:>12.6g} {:>8.1f} {:>10.6g} {:>6.1f} {:>10} {:>9}  {:<28} {}\n", r.schedule,
        v, r.makespan, 100.0 * r.bubble_ratio, r.max_span, 100.0 * r.span_bubble_ratio, vs,
        r.messages,
        join_ranks(r,
                   [](const RankSimStats& s) { return fmt::format("{:.4g}", s.peak_activations); }),
        r.real_bytes
            ? join_ranks(r, [](const RankSimStats& s) { return human_bytes(s.peak_bytes); })
            : std::string("- (uniform costs: no bytes)"));
  }
  out +=
      "bubble%: all ranks from 0 to the makespan (bubble_ratio); span%: each rank from its first "
      "to its last compute, over the max span (the zero-bubble paper's measure); vs bound: the "
      "makespan above the shape's lower bound at the schedule's memory\n";
  // The engine profile of every row (EngineProfile::description): one line per distinct one.
  std::vector<std::string> seen;
  for (const SimResult& r : results) {
    if (std::find(seen.begin(), seen.end(), r.engine_description) != seen.end()) continue;
    seen.push_back(r.engine_description);
    std::string names;
    for (const SimResult& q : results) {
      if (q.engine_description == r.engine_description)
        names += (names.empty() ? "" : ", ") + q.schedule;
    }
    out += fmt::format("engine   {} ({})\n", r.engine_description, names);
  }
  return out;
}

}  // namespace tightpipe
