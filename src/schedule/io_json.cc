// JSON form: {"name", "ranks", "stages", "microbatches", "stage_to_rank", "lowered",
// "programs": [["0F0", ...], ...]}, and "directions" when it is not 1 (DualPipe: 2; absent reads
// as 1, so files written before it load unchanged). Loading validates.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/json_int.h"
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
  if (sch.directions != 1) j["directions"] = sch.directions;
  auto& progs = j["programs"] = nlohmann::json::array();
  for (const auto& prog : sch.programs) {
    auto row = nlohmann::json::array();
    for (const auto& a : prog) row.push_back(to_string(a));
    progs.push_back(std::move(row));
  }
  return j.dump(1) + "\n";
}

namespace {

// The hint of every error about a JSON schedule file's shape.
constexpr const char* kWrittenByUsHint =
    "hint: a schedule this tool wrote (tightpipe schedule --format json)";

// A count of the header: a JSON integer in [1, limit] (2.7 or 4294967298 are not read as 2).
Result<int32_t> json_count(const nlohmann::json& j, const char* key, int32_t limit,
                           std::string_view source) {
  const nlohmann::json& v = j.at(key);
  if (!v.is_number_integer()) {
    return Status::invalid_argument(
        fmt::format("{}: \"{}\" is {}, not a whole number; hint: e.g. \"{}\": 4", source, key,
                    printable(v.dump(), 40), key));
  }
  const auto n =
      v.is_number_unsigned()
          ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), uint64_t{1} << 62))
          : v.get<int64_t>();
  if (n < 1 || n > limit) {
    return Status::invalid_argument(
        fmt::format("{}: \"{}\" {} is outside [1, {}] (tightpipe's limit); {}", source, key, n,
                    limit, kWrittenByUsHint));
  }
  return static_cast<int32_t>(n);
}

}  // namespace

Result<Schedule> parse_json(std::string_view text, std::string_view source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
    return Status::invalid_argument(
        fmt::format("{}: {}; {}", source, json_error_text(e), kWrittenByUsHint));
  }
  Schedule sch;
  try {
    sch.name = printable(j.value("name", std::string(source)));  // echoed in every error
    TP_ASSIGN_OR_RETURN(sch.num_ranks, json_count(j, "ranks", kMaxRanks, source));
    TP_ASSIGN_OR_RETURN(sch.num_stages, json_count(j, "stages", kMaxStages, source));
    TP_ASSIGN_OR_RETURN(sch.num_microbatches,
                        json_count(j, "microbatches", kMaxMicrobatches, source));
    TP_RETURN_IF_ERROR(
        check_schedule_shape(source, sch.num_ranks, sch.num_stages, sch.num_microbatches));
    if (j.contains("directions")) {
      TP_ASSIGN_OR_RETURN(sch.directions, json_count(j, "directions", 2, source));
    }
    const auto& map = j.at("stage_to_rank");
    if (!map.is_array() || map.size() != static_cast<size_t>(sch.num_stages)) {
      return Status::invalid_argument(
          fmt::format("{}: \"stage_to_rank\" must list one rank per stage ({} stages); {}", source,
                      sch.num_stages, kWrittenByUsHint));
    }
    for (const auto& r : map) {
      if (!r.is_number_integer() || r.get<int64_t>() < 0 || r.get<int64_t>() >= sch.num_ranks) {
        return Status::invalid_argument(
            fmt::format("{}: \"stage_to_rank\" holds {}, not a rank in [0, {}); {}", source,
                        printable(r.dump(), 40), sch.num_ranks, kWrittenByUsHint));
      }
      sch.stage_to_rank.push_back(static_cast<int32_t>(r.get<int64_t>()));
    }
    const auto& progs = j.at("programs");
    if (!progs.is_array() || progs.size() != static_cast<size_t>(sch.num_ranks)) {
      return Status::invalid_argument(
          fmt::format("{}: \"programs\" must list one program per rank ({} ranks); {}", source,
                      sch.num_ranks, kWrittenByUsHint));
    }
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
        "{}: {}; hint: expected keys ranks, stages, microbatches, stage_to_rank, programs", source,
        json_error_text(e)));
  }
  sch.lowered = sch.has_comm_actions();
  TP_RETURN_IF_ERROR(validate(sch).with_context(source));
  return sch;
}

}  // namespace tightpipe
