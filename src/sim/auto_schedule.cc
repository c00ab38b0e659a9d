// The one entry point for every cost-aware schedule name (auto_schedule.h).
#include "tightpipe/auto_schedule.h"

#include <fmt/format.h>

#include <string>

#include "sim/zb_score.h"
#include "tightpipe/lower_bound.h"

namespace tightpipe {

namespace {
bool is_v_auto_name(std::string_view name) {
  const std::string n = zb::lower_case(name);
  return n == "zb-v-auto" || n == "v-min" || n == "v-half";
}
}  // namespace

int32_t v_min_memory_limit(int32_t p) { return (p + 4) / 3; }
int32_t v_half_memory_limit(int32_t p) { return (p + 2) / 2; }

bool is_auto_schedule_name(std::string_view name) {
  return is_zb_auto_name(name) || is_zb_opt_name(name) || is_v_auto_name(name);
}

double auto_schedule_memory_limit(std::string_view name, int32_t p) {
  const std::string n = zb::lower_case(name);
  if (n == "v-min") return v_min_memory_limit(p);
  if (n == "v-half") return v_half_memory_limit(p);
  return zb_auto_name_memory_limit(name, p);
}

std::string auto_schedule_counterpart(std::string_view name) {
  if (is_zb_auto_name(name) || is_zb_opt_name(name)) return "zb-h1";
  return is_auto_schedule_name(name) ? "zb-v" : "";
}

int32_t auto_schedule_chunks(std::string_view name) {
  if (is_zb_auto_name(name) || is_zb_opt_name(name)) return 1;
  return is_auto_schedule_name(name) ? 2 : 0;
}

std::string auto_schedule_name(std::string_view name) { return zb::lower_case(name); }

Status check_auto_schedule_vpp(std::string_view name, int32_t vpp) {
  const int32_t chunks = auto_schedule_chunks(name);
  if (vpp == 0 || vpp == chunks) return OkStatus();
  return Status::invalid_argument(
      fmt::format("--vpp {}: schedule '{}' runs exactly {} chunk{} per rank; hint: {}", vpp, name,
                  chunks, chunks == 1 ? "" : "s (V placement)",
                  chunks == 1 ? "drop --vpp, or use zb-v-auto for 2 chunks"
                              : "pass --vpp 2 or leave it out, or use zb-auto for 1 chunk"));
}

Result<Schedule> build_auto_schedule(std::string_view name, int32_t p, int32_t m,
                                     const CostModel& costs, const ZbAutoOptions& options) {
  if (!is_auto_schedule_name(name)) {
    return Status::invalid_argument(fmt::format(
        "--schedule '{}': not a cost-aware schedule; hint: zb-auto, zb-1p, zb-2p, zb-v-auto, "
        "v-min or v-half",
        name));
  }
  const int64_t stages = int64_t{auto_schedule_chunks(name)} * p;
  const std::string shape = fmt::format("--schedule {} --pp {} --microbatches {}", name, p, m);
  TP_RETURN_IF_ERROR(check_schedule_shape(shape, p, stages, m));
  if (p > 0 && m > 0 && stages * m > kMaxAutoStageMicrobatches) {
    return Status::invalid_argument(fmt::format(
        "{}: stages x microbatches {} x {} = {} is over the automatic schedules' size bound of {} "
        "(their build-time bound, docs/cost_model.md \"zb-auto\": the greedy and the search "
        "grow about linearly, an estimated {} s on 2 cores at the bound); hint: fewer --pp or "
        "--microbatches, or "
        "the handcrafted {}",
        shape, stages, m, stages * m, kMaxAutoStageMicrobatches, kAutoBuildSecondsAtBound,
        auto_schedule_chunks(name) == 2 ? "zb-v" : "zb-h1 or zb-h2"));
  }
  ZbAutoOptions o = options;
  if (const double implied = auto_schedule_memory_limit(name, p); implied > 0) {
    if (o.memory_limit && *o.memory_limit != implied) {
      return Status::invalid_argument(
          fmt::format("--memory-limit {}: schedule '{}' implies {}; hint: use --schedule {} with "
                      "--memory-limit, or drop --memory-limit",
                      *o.memory_limit, name, implied,
                      auto_schedule_chunks(name) == 2 ? "zb-v-auto" : "zb-auto"));
    }
    o.memory_limit = implied;
  }
  TP_ASSIGN_OR_RETURN(Schedule s, is_zb_opt_name(name) ? build_zb_opt(p, m, costs, o)
                                  : auto_schedule_chunks(name) == 2
                                      ? build_zb_v_auto(p, m, costs, o)
                                      : build_zb_auto(p, m, costs, o));
  s.name = auto_schedule_name(name);  // zb-1p and zb-2p keep their names in tables and JSON
  return s;
}

}  // namespace tightpipe
