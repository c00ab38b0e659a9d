// calibrate(): measured samples -> CostModel, the one calibration (cost_model.h).
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <span>

#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/json_int.h"
#include "tightpipe/prof.h"

namespace tightpipe {

void CostSamples::add_event(const TimelineEvent& e) {
  if (e.stage < 0) return;
  if (e.kind == EventKind::kAllReduce) {
    allreduce[e.stage].push_back(static_cast<double>(e.bytes));
    return;
  }
  if (e.kind == EventKind::kSend) {
    auto a = parse_action(e.name);
    if (a.ok()) sent[{e.stage, a->type == ActionType::kSendGrad}].push_back(double(e.bytes));
    return;
  }
  const int k = cost_slot(e.kind);
  if (k < 0) return;
  time[{e.stage, k}].push_back(e.end - e.start);
  time_step[{e.stage, k}].push_back(e.step);
  stash[{e.stage, k}].push_back(static_cast<double>(e.bytes));
}

void CostSamples::add_step(const Timeline& step) {
  for (const RankTimeline& rt : step.ranks)
    for (const TimelineEvent& e : rt.events) add_event(e);
  const StepBubble b = step_bubble(step);
  for (size_t k = 0; k < step.ranks.size(); ++k) {
    if (step.ranks[k].events.empty()) continue;
    optimizer[step.ranks[k].rank].push_back(b.optimizer[k]);
  }
}

namespace {

template <typename Map>
void append(Map& to, const Map& from) {
  for (const auto& [k, v] : from) to[k].insert(to[k].end(), v.begin(), v.end());
}

}  // namespace

void CostSamples::merge(const CostSamples& o) {
  append(time, o.time);
  append(time_step, o.time_step);
  append(stash, o.stash);
  append(sent, o.sent);
  append(optimizer, o.optimizer);
  append(allreduce, o.allreduce);
}

std::string CostSamples::to_json() const {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& [k, v] : time) j.push_back({"t", k.first, k.second, v});
  for (const auto& [k, v] : time_step) j.push_back({"n", k.first, k.second, v});
  for (const auto& [k, v] : stash) j.push_back({"m", k.first, k.second, v});
  for (const auto& [k, v] : sent) j.push_back({"s", k.first, k.second ? 1 : 0, v});
  for (const auto& [k, v] : optimizer) j.push_back({"o", k, 0, v});
  for (const auto& [k, v] : allreduce) j.push_back({"a", k, 0, v});
  return j.dump();
}

Result<CostSamples> CostSamples::from_json(std::string_view text) {
  CostSamples s;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    for (const auto& e : j) {
      const std::string kind = e.at(0).get<std::string>();
      const auto a = json_int<int32_t>(e.at(1));
      const auto b = json_int<int>(e.at(2));
      if (kind == "n") {
        auto& steps = s.time_step[{a, b}];
        for (const auto& x : e.at(3)) steps.push_back(json_int<int32_t>(x));
        continue;
      }
      auto v = e.at(3).get<std::vector<double>>();
      if (kind == "t")
        s.time[{a, b}] = std::move(v);
      else if (kind == "m")
        s.stash[{a, b}] = std::move(v);
      else if (kind == "s")
        s.sent[{a, b != 0}] = std::move(v);
      else if (kind == "o")
        s.optimizer[a] = std::move(v);
      else if (kind == "a")
        s.allreduce[a] = std::move(v);
      else
        return Status::corruption(fmt::format("cost samples: unknown record '{}'", kind));
    }
  } catch (const nlohmann::json::exception& ex) {
    return Status::corruption(fmt::format("cost samples: {}", json_error_text(ex)));
  }
  return s;
}

double step_cost(std::span<const double> durations, std::span<const int32_t> steps) {
  if (durations.empty()) return 0;
  const bool stepped = steps.size() == durations.size();   // else: all one step
  std::map<int32_t, std::pair<double, int64_t>> per_step;  // step -> (sum, count)
  for (size_t k = 0; k < durations.size(); ++k) {
    auto& [sum, n] = per_step[stepped ? steps[k] : 0];
    sum += durations[k];
    ++n;
  }
  std::vector<double> means;
  means.reserve(per_step.size());
  for (const auto& [step, sn] : per_step)
    means.push_back(sn.first / static_cast<double>(sn.second));
  return median(means);
}

Result<CostModel> calibrate(const CostSamples& samples, const Schedule& lowered,
                            const CalibrationOptions& options) {
  const int32_t S = lowered.num_stages;
  auto med = [](const auto& map, const auto& key) -> std::optional<double> {
    auto it = map.find(key);
    if (it == map.end() || it->second.empty()) return std::nullopt;
    return median(it->second);
  };
  // Durations: what a step pays (step_cost), not the median action.
  auto cost = [&samples, &options](std::pair<int32_t, int> key) -> std::optional<double> {
    auto it = samples.time.find(key);
    if (it == samples.time.end() || it->second.empty()) return std::nullopt;
    if (options.durations == DurationStatistic::kMedian) return median(it->second);
    auto st = samples.time_step.find(key);
    std::span<const int32_t> steps;
    if (st != samples.time_step.end()) steps = st->second;
    return step_cost(it->second, steps);
  };
  std::vector<StageCost> stages(S);
  for (int32_t s = 0; s < S; ++s) {
    const auto f = cost({s, 0}), i = cost({s, 1}), w = cost({s, 2}), b = cost({s, 3});
    if (!f || (!b && !i)) {
      return Status::not_found(fmt::format(
          "calibrate: no measured {} events for stage {} (rank {}); hint: its rank's timeline "
          "is missing or the run measured no step",
          f ? "I or B" : "F", s, lowered.rank_of(s)));
    }
    StageCost& c = stages[s];
    c.f = *f;
    c.b = b ? *b : *i + w.value_or(0.0);
    c.i = i ? *i : c.b / 2;
    c.w = w ? *w : c.b - c.i;
    c.recompute = c.f;
    c.act_bytes = std::max(0.0, med(samples.stash, std::pair{s, 0}).value_or(0.0));
    c.act_after_i_bytes = std::clamp(
        c.act_bytes + med(samples.stash, std::pair{s, 1}).value_or(0.0), 0.0, c.act_bytes);
    c.input_bytes = c.act_bytes;
    auto msg = med(samples.sent, std::pair{s, false});
    if (!msg) msg = med(samples.sent, std::pair{s + 1, true});
    c.message_bytes = static_cast<int64_t>(msg.value_or(0.0));
    const auto opt = med(samples.optimizer, lowered.rank_of(s));
    c.optimizer =
        opt.value_or(0.0) / static_cast<double>(lowered.stages_of(lowered.rank_of(s)).size());
    c.allreduce_bytes = med(samples.allreduce, s).value_or(0.0);
  }
  return CostModel(std::move(stages), options.link, options.time_unit, options.source);
}

}  // namespace tightpipe
