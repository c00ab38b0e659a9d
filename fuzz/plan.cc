// `tightpipe plan` over its flags: each input line is one flag and its value ("--devices 64"), set
// on PlanOptions with the parsers the CLI's values go through (parse_int, parse_double,
// parse_recompute_choice, the device and network presets), checked by PlanOptions::validate, and
// planned with a small search (the counts capped, so each input is fast); every output is written.
// The planner either plans or refuses with one InvalidArgument line; a recommendation fits.
#include "tightpipe/plan.h"

#include <algorithm>
#include <cmath>

#include "fuzz_util.h"
#include "tightpipe/base.h"

namespace {

using namespace tightpipe;

// A comma-separated list of whole numbers ("1,2,4"); false on any bad item.
template <typename T>
bool int_list(std::string_view text, std::vector<T>& out) {
  out.clear();
  for (const std::string& item : split(text, ',')) {
    auto v = parse_int(trim(item));
    if (!v.ok()) return false;
    out.push_back(static_cast<T>(std::clamp<int64_t>(*v, INT32_MIN, INT32_MAX)));
  }
  return true;
}

// The flag `name` with `value` on `o`; false when the value does not parse (the CLI's usage error).
bool set_flag(PlanOptions& o, double& budget_gib, std::string_view name, std::string_view value) {
  PlanModel& m = o.model;
  auto integer = [&](int64_t& out) {
    auto v = parse_int(value);
    if (v.ok()) out = *v;
    return v.ok();
  };
  auto real = [&](double& out) {
    auto v = parse_double(value);
    if (v.ok()) out = *v;
    return v.ok();
  };
  if (name == "--num-layers") return integer(m.num_layers);
  if (name == "--hidden-size") return integer(m.hidden_size);
  if (name == "--num-attention-heads") return integer(m.num_attention_heads);
  if (name == "--seq-length") return integer(m.seq_length);
  if (name == "--vocab-size") return integer(m.vocab_size);
  if (name == "--ffn-hidden-size") return integer(m.ffn_hidden_size);
  if (name == "--global-batch-size") return integer(o.global_batch_size);
  if (name == "--devices") return integer(o.devices);
  if (name == "--micro-batch-size") return int_list(value, o.micro_batch_sizes);
  if (name == "--pp") return int_list(value, o.pp);
  if (name == "--vpp") return int_list(value, o.vpp);
  if (name == "--mfu") return real(o.mfu);
  if (name == "--memory-budget-gib") return real(budget_gib);
  if (name == "--price-per-device-hour") return real(o.price_per_device_hour);
  if (name == "--train-tokens") return real(o.train_tokens);
  if (name == "--use-distributed-optimizer") {
    o.distributed_optimizer = true;
    return true;
  }
  if (name == "--no-use-flash-attn") {
    o.flash_attention = false;
    return true;
  }
  if (name == "--top") {
    int64_t t = 0;
    if (!integer(t)) return false;
    o.top = static_cast<int32_t>(std::clamp<int64_t>(t, INT32_MIN, INT32_MAX));
    return true;
  }
  if (name == "--schedules") {
    o.schedules = split(value, ',');
    return true;
  }
  if (name == "--recompute") {
    o.recompute.clear();
    for (const std::string& r : split(value, ',')) {
      auto rc = parse_recompute_choice(r);
      if (!rc.ok()) return false;
      o.recompute.push_back(*rc);
    }
    return true;
  }
  if (name == "--device") {
    auto d = find_device_preset(value);
    if (d.ok()) o.device = *d;
    return d.ok();
  }
  if (name == "--network") {
    auto n = find_network(value);
    if (n.ok()) o.network = *n;
    return n.ok();
  }
  return false;  // unknown flag: CLI11 refuses it
}

void check_error(const Status& st) {
  if (st.code() != StatusCode::kInvalidArgument) fuzz::property_failed(st.to_string());
  const std::string& m = st.message();
  if (m.empty() || m.find('\n') != std::string::npos || m.find("hint:") == std::string::npos) {
    fuzz::property_failed("not one line with a hint: " + m);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  PlanOptions o;
  o.model.vocab_size = kGpt2PaddedVocabSize;  // the CLI's default
  o.train_tokens = 1e10;
  o.device = *find_device_preset("h100-sxm");
  o.network = *find_network(o.device.network);
  double budget_gib = 0;
  for (const std::string& line : split(fuzz::as_text(data, size), '\n')) {
    const std::string_view l = trim(line);
    if (l.empty() || l[0] == '#') continue;
    const size_t space = l.find(' ');
    const std::string_view name = l.substr(0, space);
    const std::string_view value = space == std::string_view::npos ? "" : trim(l.substr(space));
    if (!set_flag(o, budget_gib, name, value)) return 0;  // a usage error: the parser's
  }
  if (!std::isfinite(budget_gib) || budget_gib < 0 || budget_gib > kMaxPlanMemoryBudgetGib) {
    return 0;  // the CLI refuses it before it becomes bytes
  }
  o.memory_budget_bytes = budget_gib * 1024.0 * 1024.0 * 1024.0;
  if (Status st = o.validate(); !st.ok()) {
    check_error(st);
    return 0;
  }
  // A small search: at most 64 devices, 32 layers, a global batch of 1024, 2 micro batch sizes,
  // the top 5, no local search of the automatic schedules (what plan() spends time on; the values
  // stay within validate's ranges).
  o.devices = std::min<int64_t>(o.devices, 64);
  o.model.num_layers = std::min<int64_t>(o.model.num_layers, 32);
  o.global_batch_size = std::min<int64_t>(o.global_batch_size, 1024);
  if (o.micro_batch_sizes.empty()) o.micro_batch_sizes = {1, 4};
  if (o.micro_batch_sizes.size() > 2) o.micro_batch_sizes.resize(2);
  o.top = std::min(o.top, 5);
  o.auto_search_budget_ms = 0;  // the automatic schedules' greedy, without the local search
  auto r = plan(o);
  if (!r.ok()) {
    check_error(r.status());
    return 0;
  }
  if (r->recommended < 0 || r->recommended >= static_cast<int32_t>(r->candidates.size())) {
    fuzz::property_failed("a plan without a recommendation");
  }
  const PlanCandidate& rec = r->candidates[r->recommended];
  if (!rec.fits) fuzz::property_failed("the recommendation does not fit");
  for (double b : rec.peak_memory_bytes) {
    if (!(b <= r->memory_budget_bytes)) fuzz::property_failed("the recommendation is over budget");
  }
  (void)format_plan(*r);
  (void)plan_to_json(*r);
  (void)plan_to_html(*r);
  return 0;
}
