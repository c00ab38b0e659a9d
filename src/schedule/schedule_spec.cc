// Schedule lists `name[:v],...`: the one parser behind simulate --compare, report --what-if and
// the benches' --schedules.
#include <fmt/format.h>

#include "tightpipe/base.h"
#include "tightpipe/schedule.h"

namespace tightpipe {

std::string generator_names() {
  std::vector<std::string> names;
  for (const auto& g : schedule_generators()) names.push_back(g.name);
  return join(names, ", ");
}

std::string ScheduleSpec::label() const {
  return chunks > 0 ? fmt::format("{}:{}", name, chunks) : name;
}

namespace {

// "; hint: one of gpipe, 1f1b, ..., with :v for the chunks per rank (e.g. 1f1b,zb-v,interleaved:2)"
std::string names_hint(std::string_view flag) {
  return fmt::format(
      "hint: {} takes a comma-separated list of {}, each optionally with :v chunks "
      "per rank (e.g. {} 1f1b,zb-v,interleaved:2)",
      flag, generator_names(), flag);
}

// The v the generator takes: any (interleaved, looped-bfs), or only its fixed one.
Status check_chunks(std::string_view flag, std::string_view item, const GeneratorInfo& g,
                    int32_t chunks) {
  if (g.fixed_chunks == 0 || chunks == g.fixed_chunks) return Status::Ok();
  std::vector<std::string> takers;
  for (const auto& other : schedule_generators()) {
    if (!other.takes_chunks) continue;
    takers.push_back(other.fixed_chunks == 0
                         ? other.name + " (any v)"
                         : fmt::format("{} (v = {})", other.name, other.fixed_chunks));
  }
  return Status::invalid_argument(fmt::format(
      "{} '{}': {} takes {} chunk(s) per rank, not {}; hint: write {}, or use a schedule that "
      "takes :v: {}",
      flag, printable(item), g.name, g.fixed_chunks, chunks, g.name, join(takers, ", ")));
}

}  // namespace

Result<std::vector<ScheduleSpec>> parse_schedule_specs(std::string_view flag,
                                                       std::string_view text) {
  std::vector<ScheduleSpec> out;
  for (const std::string& raw : split(text, ',')) {
    const std::string item(trim(raw));
    if (item.empty()) continue;
    const size_t colon = item.find(':');
    const std::string name(trim(std::string_view(item).substr(0, colon)));
    const GeneratorInfo* g = find_generator(name);
    if (g == nullptr) {
      return Status::invalid_argument(fmt::format("{} '{}': unknown schedule '{}'; {}", flag,
                                                  printable(item), printable(name),
                                                  names_hint(flag)));
    }
    ScheduleSpec spec{.name = g->name};
    if (colon != std::string::npos) {
      auto v = parse_int(trim(std::string_view(item).substr(colon + 1)));
      if (!v.ok() || *v < 1 || *v > kMaxChunks) {
        return Status::invalid_argument(
            fmt::format("{} '{}': chunks after ':' must be an integer in [1, {}]; {}", flag,
                        printable(item), kMaxChunks, names_hint(flag)));
      }
      spec.chunks = static_cast<int32_t>(*v);
      TP_RETURN_IF_ERROR(check_chunks(flag, item, *g, spec.chunks));
    }
    out.push_back(std::move(spec));
  }
  if (out.empty()) {
    return Status::invalid_argument(
        fmt::format("{} '{}': no schedule named; {}", flag, printable(text), names_hint(flag)));
  }
  return out;
}

}  // namespace tightpipe
