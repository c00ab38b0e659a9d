// The small text readers behind the CLI's flags, each line of the input through every one of
// them (corpus/flag_texts/*): --compare / --schedules lists (parse_schedule_specs), report
// --what-if (parse_what_if), --link (parse_link_options), --emulate-compute
// (EmulatedCompute::parse), --pipeline-layout (partition_layers of a 6-layer model into 3 stages),
// --data-path brace patterns (expand_braces), --shard-size (parse_byte_size), plan --recompute,
// --objective, --engine, --comm-mode, --recompute, --tokenizer-type, --transport, --precision.
// Any line gives a value or an error: one line (no newline in the message), never a crash, and a
// pattern expands to at most a million names.
#include "fuzz_util.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/executor.h"
#include "tightpipe/model.h"
#include "tightpipe/plan.h"
#include "tightpipe/report.h"
#include "tightpipe/schedule.h"
#include "tightpipe/shard.h"
#include "tightpipe/simulator.h"
#include "tightpipe/tokenizer.h"
#include "tightpipe/transport.h"

namespace {

template <typename R>
void one_line(const R& r, std::string_view what) {
  if (r.ok()) return;
  const std::string_view m = r.status().message();
  // Schedule errors may end in a grid; the flag readers' never do.
  if (m.find('\n') != std::string_view::npos) {
    tightpipe::fuzz::property_failed(std::string(what) + ": a multi-line error: " + std::string(m));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  if (size > 1 << 16) return 0;
  for (const std::string& line : split(fuzz::as_text(data, size), '\n')) {
    one_line(parse_schedule_specs("--compare", line), "parse_schedule_specs");
    one_line(parse_what_if(line), "parse_what_if");
    auto link = parse_link_options(line);
    one_line(link, "parse_link_options");
    if (link.ok() && !link->validate().ok()) {
      fuzz::property_failed("a parsed --link fails validate: " + link->validate().to_string());
    }
    one_line(EmulatedCompute::parse(line), "EmulatedCompute::parse");
    nn::GptConfig cfg;
    cfg.num_layers = 6;
    auto layout = nn::partition_layers(cfg, 3, line);
    one_line(layout, "partition_layers");
    if (layout.ok()) {
      auto again = nn::partition_layers(cfg, 3, nn::format_layout(*layout));
      if (!again.ok() || *again != *layout) fuzz::property_failed("a layout does not print back");
    }
    auto names = expand_braces(line);
    one_line(names, "expand_braces");
    if (names.ok() && names->size() > 1'000'000) fuzz::property_failed("over a million names");
    one_line(parse_byte_size(line), "parse_byte_size");
    one_line(parse_recompute_choice(line), "parse_recompute_choice");
    one_line(parse_zb_objective(line), "parse_zb_objective");
    one_line(parse_engine(line), "parse_engine");
    one_line(parse_comm_mode(line), "parse_comm_mode");
    one_line(parse_recompute(line), "parse_recompute");
    one_line(parse_tokenizer_type(line), "parse_tokenizer_type");
    one_line(parse_transport_kind(line), "parse_transport_kind");
    one_line(nn::parse_precision(line), "parse_precision");
  }
  return 0;
}
