// The cost readers, each given the same bytes: the per-stage JSON table (`--costs`, a run's
// costs.json), the `--cost` spec, the `--model` GPT spec and the calibration samples. Accepted
// inputs go one step further, as the CLI takes them (a cost model for 2 ranks, v = 2).
#include "fuzz_util.h"
#include "tightpipe/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view text = fuzz::as_text(data, size);
  if (auto table = parse_cost_table(text, "fuzz.json"); table.ok()) {
    auto again = parse_cost_table(cost_table_to_json(*table), "fuzz.json (printed back)");
    if (!again.ok()) fuzz::property_failed(again.status().to_string());
  }
  if (auto uniform = parse_uniform_costs(text); uniform.ok()) {
    (void)uniform_cost_model(*uniform, 2, 4);
  }
  if (auto gpt = parse_gpt_cost_config(text); gpt.ok()) {
    (void)gpt_cost_model(*gpt, 2, 4);
  }
  if (auto samples = CostSamples::from_json(text); samples.ok()) {
    (void)samples->to_json();
  }
  return 0;
}
