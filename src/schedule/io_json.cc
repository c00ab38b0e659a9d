// JSON form: {"name", "ranks", "stages", "microbatches", "stage_to_rank", "lowered",
// "programs": [["0F0", ...], ...]}. Loading validates.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "tightpipe/schedule.h"

namespace tightpipe {

std::string to_json(const Schedule& sch) {
  nlohmann::json j;
  j["name"] = sch.name;
  j["ranks"] = sch.num_ranks;
  j["stages"] = sch.num_stages;
  j["microbatches"] = sch.num_microbatches;
  j["stage_to_rank"] = sch.stage_to_rank;
  j["lowered"] = sch.lowered;
  auto& progs = j["programs"] = nlohmann::json::array();
  for (const auto& prog : sch.programs) {
    auto row = nlohmann::json::array();
    for (const auto& a : prog) row.push_back(to_string(a));
    progs.push_back(std::move(row));
  }
  return j.dump(1) + "\n";
}

Result<Schedule> parse_json(std::string_view text, std::string_view source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::invalid_argument(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  Schedule sch;
  try {
    sch.name = j.value("name", std::string(source));
    sch.num_ranks = j.at("ranks").get<int32_t>();
    sch.num_stages = j.at("stages").get<int32_t>();
    sch.num_microbatches = j.at("microbatches").get<int32_t>();
    sch.stage_to_rank = j.at("stage_to_rank").get<std::vector<int32_t>>();
    const auto& progs = j.at("programs");
    for (size_t r = 0; r < progs.size(); ++r) {
      sch.programs.emplace_back();
      for (size_t i = 0; i < progs[r].size(); ++i) {
        auto a = parse_action(progs[r][i].get<std::string>());
        if (!a.ok()) {
          return Status::invalid_argument(
              fmt::format("{}: programs[{}][{}]: {}", source, r, i, a.status().message()));
        }
        sch.programs.back().push_back(*a);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::invalid_argument(fmt::format(
        "{}: {}; hint: expected keys ranks, stages, microbatches, stage_to_rank, programs",
        source, e.what()));
  }
  sch.lowered = sch.has_comm_actions();
  TP_RETURN_IF_ERROR(validate(sch).with_context(source));
  return sch;
}

}  // namespace tightpipe
