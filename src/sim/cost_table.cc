// The per-stage JSON cost table (docs/cost_model.md).
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/json_int.h"

namespace tightpipe {
namespace {

using nlohmann::json;

Status bad(std::string_view source, std::string msg) {
  return Status::invalid_argument(fmt::format("{}: {}", source, msg));
}

Result<double> number(std::string_view source, std::string_view where, std::string_view key,
                      const json& v) {
  if (!v.is_number()) {
    return bad(source, fmt::format("{} key '{}' has value {}, which is not a number; hint: write "
                                   "it as a JSON number, e.g. \"{}\": 1.5",
                                   where, printable(key), printable(v.dump()), printable(key)));
  }
  const double x = v.get<double>();
  TP_RETURN_IF_ERROR(
      check_cost_value(fmt::format("{}: {} key '{}'", source, where, printable(key)), x));
  return x;
}

}  // namespace

Result<CostModel> parse_cost_table(std::string_view text, std::string_view source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    return bad(source,
               fmt::format("{}; hint: see docs/cost_model.md for the format", json_error_text(e)));
  }
  if (!j.is_object()) {
    return bad(source,
               "the top level must be an object with a \"stages\" array; hint: see "
               "docs/cost_model.md");
  }
  std::string time_unit = "unit";
  LinkCost link;
  const json* stages = nullptr;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    if (key == "time_unit") {
      if (!it->is_string()) return bad(source, "key 'time_unit' must be a string such as \"ms\"");
      time_unit = it->get<std::string>();
      if (time_unit.empty() || time_unit.size() > 16 || printable(time_unit) != time_unit) {
        return bad(source, fmt::format("key 'time_unit' is \"{}\"; hint: a short printable unit "
                                       "such as \"ms\"",
                                       printable(time_unit, 40)));
      }
    } else if (key == "link") {
      if (!it->is_object()) {
        return bad(source, "key 'link' must be an object {latency, bandwidth, overhead}");
      }
      for (auto l = it->begin(); l != it->end(); ++l) {
        TP_ASSIGN_OR_RETURN(double x, number(source, "link", l.key(), *l));
        if (l.key() == "latency")
          link.latency = x;
        else if (l.key() == "bandwidth")
          link.bandwidth = x;
        else if (l.key() == "overhead")
          link.overhead = x;
        else
          return bad(source, fmt::format("unknown key 'link.{}' (value {}); hint: link keys "
                                         "are latency, bandwidth, overhead",
                                         printable(l.key()), printable(l->dump())));
      }
    } else if (key == "stages") {
      stages = &*it;
    } else {
      return bad(source, fmt::format("unknown top-level key '{}'; hint: keys are time_unit, "
                                     "link, stages",
                                     printable(key)));
    }
  }
  if (stages == nullptr || !stages->is_array() || stages->empty()) {
    return bad(source,
               "needs a non-empty \"stages\" array, one object per stage; hint: see "
               "docs/cost_model.md");
  }
  const size_t n = stages->size();
  if (n > static_cast<size_t>(kMaxStages)) {
    return bad(source, fmt::format("\"stages\" has {} entries, over tightpipe's limit of {} "
                                   "stages; hint: one entry per stage of the schedule",
                                   n, kMaxStages));
  }
  std::map<size_t, StageCost> by_stage;
  constexpr std::string_view kKeys =
      "stage, f, i, w, b, recompute, optimizer, act_bytes, act_after_i_bytes, input_bytes, "
      "param_bytes, "
      "grad_bytes, optimizer_bytes, message_bytes, allreduce_bytes";
  for (size_t k = 0; k < n; ++k) {
    const json& e = (*stages)[k];
    const std::string where = fmt::format("stages[{}]", k);
    if (!e.is_object()) return bad(source, fmt::format("{} is not an object", where));
    if (!e.contains("stage")) {
      return bad(source, fmt::format("{} lacks key 'stage'; hint: every entry names its stage "
                                     "index",
                                     where));
    }
    TP_ASSIGN_OR_RETURN(double sd, number(source, where, "stage", e["stage"]));
    if (sd != std::floor(sd) || sd >= kMaxStages) {
      return bad(source, fmt::format("{} key 'stage' has value {}; hint: stages are whole "
                                     "numbers 0, 1, 2... below {} (tightpipe's limit)",
                                     where, printable(e["stage"].dump()), kMaxStages));
    }
    const size_t s = static_cast<size_t>(sd);
    if (by_stage.count(s)) return bad(source, fmt::format("{}: stage {} appears twice", where, s));
    StageCost c;
    bool have_b = false, have_rc = false, have_after_i = false;
    for (const char* req : {"f", "i", "w"}) {
      if (!e.contains(req)) {
        return bad(source, fmt::format("{} (stage {}) lacks key '{}'; hint: f, i and w are "
                                       "required",
                                       where, s, req));
      }
    }
    for (auto it = e.begin(); it != e.end(); ++it) {
      const std::string& key = it.key();
      if (key == "stage") continue;
      TP_ASSIGN_OR_RETURN(double x, number(source, where, key, *it));
      if (key == "f")
        c.f = x;
      else if (key == "i")
        c.i = x;
      else if (key == "w")
        c.w = x;
      else if (key == "b")
        c.b = x, have_b = true;
      else if (key == "recompute")
        c.recompute = x, have_rc = true;
      else if (key == "optimizer")
        c.optimizer = x;
      else if (key == "act_bytes")
        c.act_bytes = x;
      else if (key == "act_after_i_bytes")
        c.act_after_i_bytes = x, have_after_i = true;
      else if (key == "input_bytes")
        c.input_bytes = x;
      else if (key == "param_bytes")
        c.param_bytes = x;
      else if (key == "grad_bytes")
        c.grad_bytes = x;
      else if (key == "optimizer_bytes")
        c.optimizer_bytes = x;
      else if (key == "message_bytes")
        c.message_bytes = static_cast<int64_t>(std::llround(x));
      else if (key == "allreduce_bytes")
        c.allreduce_bytes = x;
      else {
        return bad(source, fmt::format("{} has unknown key '{}' (value {}); hint: keys are {}",
                                       where, printable(key), printable(it->dump()), kKeys));
      }
    }
    if (!have_b) c.b = c.i + c.w;
    if (!have_rc) c.recompute = c.f;
    if (!have_after_i) c.act_after_i_bytes = c.act_bytes;
    if (c.act_after_i_bytes > c.act_bytes) {
      return bad(source, fmt::format("{} (stage {}): act_after_i_bytes {} exceeds act_bytes {}",
                                     where, s, c.act_after_i_bytes, c.act_bytes));
    }
    by_stage[s] = c;
  }
  std::vector<StageCost> out;
  for (const auto& [s, c] : by_stage) {
    if (s != out.size()) {
      return bad(source, fmt::format("lacks stage {} (it has {} entries, up to stage {}); hint: "
                                     "give one entry per stage 0..S-1",
                                     out.size(), n, by_stage.rbegin()->first));
    }
    out.push_back(c);
  }
  return CostModel(std::move(out), link, time_unit, std::string(source));
}

std::string cost_table_to_json(const CostModel& m) {
  json j;
  j["time_unit"] = m.time_unit();
  j["link"] = {{"latency", m.link().latency},
               {"bandwidth", m.link().bandwidth},
               {"overhead", m.link().overhead}};
  json stages = json::array();
  for (int32_t s = 0; s < m.num_stages(); ++s) {
    const StageCost& c = m.stage(s);
    json e = {{"stage", s}};
    for (const auto& [key, x] : stage_cost_fields(c)) e[std::string(key)] = x;
    e["message_bytes"] = c.message_bytes;  // a whole number in the table
    // Only data-parallel runs measure it: tables without it stay as they were.
    if (c.allreduce_bytes == 0) e.erase("allreduce_bytes");
    stages.push_back(std::move(e));
  }
  j["stages"] = std::move(stages);
  return j.dump(2);
}

}  // namespace tightpipe
