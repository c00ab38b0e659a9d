// The name registry of schedule generators.
#include <algorithm>
#include <cctype>

#include "generator_util.h"
#include "tightpipe/input_file.h"
#include "tightpipe/schedule_torch.h"

namespace tightpipe {

const std::vector<GeneratorInfo>& schedule_generators() {
  static const std::vector<GeneratorInfo> kGenerators = {
      {"gpipe", "all forwards, then all backwards", false, 1, detail::generate_gpipe},
      {"1f1b", "one forward one backward (Megatron, DeepSpeed)", false, 1, detail::generate_1f1b},
      {"interleaved", "interleaved 1F1B with --vpp chunks per rank (Megatron virtual pipeline)",
       true, 0, detail::generate_interleaved},
      {"looped-bfs", "breadth-first over --vpp chunks per rank (PyTorch ScheduleLoopedBFS)", true,
       0, detail::generate_looped_bfs},
      {"zb-h1", "zero bubble H1: split backward, 1F1B memory", false, 1, detail::generate_zb_h1},
      {"zb-h2", "zero bubble H2: split backward, 2p-1 activations, m >= 2p", false, 1,
       detail::generate_zb_h2},
      {"zb-v", "zero bubble V: V placement, 2 chunks per rank", true, 2, detail::generate_zb_v},
      {"dualpipev", "DeepSeek DualPipeV: V placement, overlapped F&B pairs, m >= 2p", true, 2,
       detail::generate_dualpipev},
      {"dualpipe",
       "DeepSeek DualPipe: two directions, each rank holds 2 stage copies; p, m even, m >= 2p",
       true, 2, detail::generate_dualpipe},
  };
  return kGenerators;
}

namespace {
std::string canonical(std::string_view name) {
  std::string s;
  for (char c : name)
    s += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (s == "interleaved1f1b" || s == "interleaved-1f1b" || s == "vpp") return "interleaved";
  if (s == "zbh1" || s == "zb1p") return "zb-h1";
  if (s == "zbh2") return "zb-h2";
  if (s == "zbv" || s == "zbvzerobubble") return "zb-v";
  if (s == "loopedbfs" || s == "bfs") return "looped-bfs";
  if (s == "dualpipe-v" || s == "scheduledualpipev") return "dualpipev";
  if (s == "pipedream-flush" || s == "one-f-one-b") return "1f1b";
  return s;
}
}  // namespace

const GeneratorInfo* find_generator(std::string_view name) {
  const std::string key = canonical(name);
  for (const auto& g : schedule_generators())
    if (g.name == key) return &g;
  return nullptr;
}

Status check_schedule_shape(std::string_view what, int64_t ranks, int64_t stages,
                            int64_t microbatches) {
  auto over = [&](std::string_view count, int64_t value, int64_t limit, std::string_view hint) {
    return Status::invalid_argument(fmt::format(
        "{}: {} {} is over tightpipe's limit of {}; hint: {}", what, count, value, limit, hint));
  };
  if (ranks > kMaxRanks) {
    return over("pipeline ranks", ranks, kMaxRanks, "use fewer --pp");
  }
  if (stages > kMaxStages) {
    return over("stages (ranks x chunks)", stages, kMaxStages, "fewer --vpp or --pp");
  }
  if (microbatches > kMaxMicrobatches) {
    return over("microbatches", microbatches, kMaxMicrobatches,
                "fewer --microbatches (a step of more rarely pays: the bubble is ~(p-1)/m)");
  }
  if (stages > 0 && microbatches > kMaxStageMicrobatches / stages) {
    return over("stages x microbatches", stages * microbatches, kMaxStageMicrobatches,
                "fewer stages or microbatches (each pair is 3 actions to schedule)");
  }
  return OkStatus();
}

Result<Schedule> generate_schedule(std::string_view name, const GeneratorOptions& options) {
  TP_RETURN_IF_ERROR(check_schedule_shape(
      fmt::format("--pp {} --vpp {} --microbatches {}", options.ranks, options.chunks,
                  options.microbatches),
      options.ranks, int64_t{options.ranks} * std::max(1, options.chunks), options.microbatches));
  if (const GeneratorInfo* g = find_generator(name)) return g->fn(options);
  return Status::invalid_argument(
      fmt::format("--schedule '{}': unknown schedule; hint: one of {} (or a CSV file path)",
                  printable(name), generator_names()));
}

Result<Schedule> load_schedule_file(const std::string& path) {
  return load_schedule_file(path, nullptr);
}

Result<Schedule> load_schedule_file(const std::string& path, TorchActionCounts* counts) {
  if (counts) *counts = {};
  TP_ASSIGN_OR_RETURN(std::string text,
                      read_input_file("schedule file", path, input_kind::kSchedule));
  return path.ends_with(".json") ? parse_json(text, path) : parse_csv(text, path, counts);
}

Result<Schedule> schedule_from_name_or_file(const std::string& name, GeneratorOptions options) {
  if (name.ends_with(".csv") || name.ends_with(".json")) {
    TP_ASSIGN_OR_RETURN(Schedule s, load_schedule_file(name));
    return compute_only(s);
  }
  if (options.chunks == 0) {
    const GeneratorInfo* g = find_generator(name);
    options.chunks = g && g->fixed_chunks > 1 ? g->fixed_chunks : 1;
  }
  return generate_schedule(name, options);
}

}  // namespace tightpipe
