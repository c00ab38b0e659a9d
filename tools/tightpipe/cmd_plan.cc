// tightpipe plan: the planner (plan.h, docs/plan.md) from Megatron-LM-style flags.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/flag_checks.h"
#include "tightpipe/input_file.h"
#include "tightpipe/plan.h"
#include "tightpipe/report.h"
#include "tightpipe/tokenizer.h"

namespace tightpipe::cli {
namespace {

// --costs FILE or RUN_DIR: the run's measured costs per layer kind, checked against the model the
// flags describe (the layer count may differ; the shape may not).
Status load_measured(const std::string& path, PlanOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    // Not there: an error naming it (its parent folder is not what was asked for).
    return Status::invalid_argument(fmt::format(
        "--costs {}: {}; hint: a run directory of `tightpipe train --out-dir`, or the costs.json "
        "in it",
        printable(path), ec ? ec.message() : "no such file or directory"));
  }
  if (!fs::is_directory(st)) {
    // A file: a run's costs.json, read with the summary.json beside it. What it is (a FIFO,
    // /dev/zero), then its own table's error, before the run directory around it.
    auto text = read_input_file("--costs", path, input_kind::kCostTable);
    if (!text.ok()) return text.status();
    if (fs::path(path).filename() != "costs.json") {
      return Status::invalid_argument(fmt::format(
          "--costs {}: a file given to --costs must be a run's costs.json (its summary.json "
          "beside it gives the model shape), not '{}'; hint: pass the run directory of "
          "`tightpipe train --out-dir`",
          printable(path), printable(fs::path(path).filename().string())));
    }
    if (auto table = parse_cost_table(*text, path); !table.ok()) {
      return table.status().with_context("--costs " + printable(path));
    }
  }
  const std::string dir = fs::is_directory(st) ? path : fs::path(path).parent_path().string();
  auto run = load_run(dir.empty() ? "." : dir);
  if (!run.ok()) return run.status().with_context("--costs " + printable(path));
  if (!run->costs) {
    // The table's own error (a negative or NaN cost), not only that there is none.
    const std::string file = (dir.empty() ? std::string(".") : dir) + "/costs.json";
    if (auto text = read_file(file); text.ok()) {
      if (auto table = parse_cost_table(*text, file); !table.ok()) {
        return table.status().with_context("--costs " + printable(path));
      }
    }
  }
  auto costs = run_layer_costs(*run);
  if (!costs.ok()) return costs.status().with_context("--costs " + printable(path));
  // A table whose blocks take no time plans every configuration at $0 and 0 s: refused.
  if (!(costs->block.f > 0 && costs->block.b > 0)) {
    return Status::invalid_argument(fmt::format(
        "--costs {}: the measured transformer block takes no time (f={:g}, b={:g} {}); hint: the "
        "costs.json of a `tightpipe train` run that measured its steps",
        printable(path), costs->block.f, costs->block.b, costs->time_unit));
  }
  if (costs->time_unit != "s") {
    return Status::invalid_argument(fmt::format(
        "--costs {}: its times are in '{}', not seconds; hint: the costs.json of a `tightpipe "
        "train` run",
        printable(path), printable(costs->time_unit)));
  }
  const nn::GptConfig& theirs = *run->model;
  const PlanModel& ours = o.model;
  std::string mismatch;
  auto check = [&](const char* flag, int64_t run_value, int64_t flag_value) {
    if (run_value != flag_value && mismatch.empty()) {
      mismatch = fmt::format("{} {} but the run measured {}", flag, flag_value, run_value);
    }
  };
  check("--hidden-size", theirs.hidden_size, ours.hidden_size);
  check("--num-attention-heads", theirs.num_heads, ours.num_attention_heads);
  check("--seq-length", theirs.seq_length, ours.seq_length);
  check("--vocab-size", theirs.vocab_size, ours.vocab_size);
  if (ours.ffn_hidden_size != 0 && ours.ffn_hidden_size != 4 * ours.hidden_size) {
    check("--ffn-hidden-size", 4 * int64_t{theirs.hidden_size}, ours.ffn_hidden_size);
  }
  if (!mismatch.empty()) {
    return Status::invalid_argument(fmt::format(
        "--costs {}: another model shape: {}; hint: measure a run of this shape (the layer count "
        "and the micro batch size may differ), or drop --costs for the device preset's costs",
        printable(path), mismatch));
  }
  o.measured = std::move(*costs);
  o.measured_micro_batch_size = theirs.micro_batch_size;
  return OkStatus();
}

}  // namespace

int cmd_plan(int argc, char** argv) {
  CLI::App app(
      "Choose the pipeline size p (data parallel = devices / p), virtual stages v, micro batch "
      "size and count, schedule, activation recompute and layer split that train fastest within "
      "the memory budget; every candidate is simulated with the cost and memory model and priced "
      "for the whole run (docs/plan.md).",
      "tightpipe plan");
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  PlanOptions o;
  PlanModel& m = o.model;
  std::string device, network, costs_path;
  std::vector<std::string> recompute;
  double budget_gib = 0;
  bool json = false;
  app.add_option("--num-layers", m.num_layers, "transformer layers")->required();
  app.add_option("--hidden-size", m.hidden_size, "hidden size")->required();
  app.add_option("--num-attention-heads", m.num_attention_heads, "attention heads")->required();
  app.add_option("--seq-length", m.seq_length, "sequence length")->required();
  m.vocab_size = kGpt2VocabSize;
  app.add_option("--vocab-size", m.vocab_size,
                 fmt::format("vocabulary (embedding and LM head; default GPT-2's, padded to {}); "
                             "0 leaves them out",
                             kGpt2PaddedVocabSize))
      ->capture_default_str();
  int64_t divisible_by = 128;
  app.add_option("--make-vocab-size-divisible-by", divisible_by,
                 "the LM head's rows: --vocab-size padded to a multiple of this, as Megatron-LM "
                 "pads it (50257 -> 50304)")
      ->capture_default_str();
  app.add_option("--ffn-hidden-size", m.ffn_hidden_size, "MLP width (default 4 x hidden)");
  app.add_option("--global-batch-size", o.global_batch_size, "sequences per optimizer step")
      ->required();
  app.add_option("--micro-batch-size", o.micro_batch_sizes,
                 "candidate micro batch sizes, e.g. 1,2,4 (default 1,2,4,8)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--devices", o.devices, "devices (GPUs, or cores for this-cpu)")->required();
  std::string presets;
  for (const DevicePreset& d : device_presets()) presets += (presets.empty() ? "" : "|") + d.name;
  app.add_option(
      "--device", device,
      fmt::format("device preset: {} (default h100-sxm; this-cpu with --costs)", presets));
  app.add_option("--mfu", o.mfu, "achieved fraction of the preset's peak FLOP/s")
      ->capture_default_str();
  std::optional<double> device_tflops;  // given (0 included) or not
  app.add_option("--device-tflops", device_tflops,
                 "the device's peak in TFLOP/s, in place of the preset's (this-cpu measures one "
                 "core's SGEMM at start-up: pass a value to make plans repeatable)");
  app.add_option("--network", network,
                 "link between nodes: nvlink|pcie|infiniband|ethernet-25g (default: the "
                 "preset's)");
  app.add_option("--memory-budget-gib", budget_gib,
                 "memory per device the plan may use (default 0.9 x the device's memory)");
  app.add_flag("--use-distributed-optimizer", o.distributed_optimizer,
               "shard the optimizer state over the data-parallel group (Megatron-LM)");
  std::optional<bool> flash;
  app.add_flag_function(
      "--use-flash-attn,!--no-use-flash-attn", [&flash](int64_t n) { flash = n > 0; },
      "flash attention: the attention scores are not stored (default: on for the GPU presets, "
      "off for this-cpu, whose kernels store them)");
  app.add_option("--costs", costs_path,
                 "costs measured in a run: RUN_DIR or RUN_DIR/costs.json of `tightpipe train` "
                 "(its summary.json gives the shape); scaled by layer count and micro batch size");
  app.add_option("--price-per-device-hour", o.price_per_device_hour, "dollars per device-hour")
      ->capture_default_str();
  o.train_tokens = 1e10;
  app.add_option("--train-tokens", o.train_tokens, "tokens of the whole training run")
      ->capture_default_str();
  app.add_option("--pp,--pipeline-model-parallel-size", o.pp, "only these pipeline sizes, e.g. 4,8")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  auto* vpp =
      app.add_option("--vpp", o.vpp, "only these virtual stages per rank (interleaved), e.g. 2,4")
          ->delimiter(',')
          ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--num-layers-per-virtual-pipeline-stage", o.layers_per_virtual_stage,
                 "Megatron's way to set v: interleaved and looped-bfs take v = --num-layers / "
                 "(p x this) at the pipeline sizes p where it divides; not with --vpp")
      ->excludes(vpp);
  app.add_option("--schedules", o.schedules, "only these schedules, e.g. 1f1b,zb-v")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--recompute", recompute,
                 "only these recompute choices: none, full, block:N (default: none, block:1, 2, "
                 "4, ... and full; the lightest that fits wins)")
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--top", o.top, "rows of the table")->capture_default_str();
  app.add_flag("--enable-optimizer-post-validation,--optimizer-post-validation",
               o.optimizer_post_validation,
               "also try the zero-bubble schedules with the post-validated optimizer (train's "
               "flag): priced at their steady-state step, with the kept copy's memory");
  std::string engine = "tightpipe";
  add_engine_flag(app, engine, "each candidate (megatron: 1f1b and interleaved only)");
  add_core_sharing_flags(app, o.core_sharing);
  app.add_flag("--json", json, "print the result as JSON (docs/plan.md)");
  std::string html;
  app.add_option("--html", html, "write an HTML page with the step time / memory / cost plot");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  // --vocab-size 0 (no embedding and head) stays 0; a negative one is refused by the plan.
  auto padded = padded_vocab_size_flag(std::max<int64_t>(m.vocab_size, 1), divisible_by);
  if (!padded.ok()) return report_error("plan", padded.status());
  if (m.vocab_size > 0) m.vocab_size = *padded;

  if (device.empty()) device = costs_path.empty() ? "h100-sxm" : "this-cpu";
  auto d = find_device_preset(device);
  if (!d.ok()) return report_error("plan", d.status());
  o.device = std::move(*d);
  if (!device_tflops && app.get_option("--device-tflops")->count() > 0) {
    return report_error("plan", Status::invalid_argument(
                                    "--device-tflops '': no number; hint: TFLOP/s of one device, "
                                    "e.g. 989 for an H100's bf16, or leave the flag out"));
  }
  if (device_tflops) {
    if (Status st = check_number_range("--device-tflops", *device_tflops, 1e-6, 1e6,
                                       "TFLOP/s of one device, e.g. 0.15 for a CPU core, 989 for "
                                       "an H100's bf16");
        !st.ok())
      return report_error("plan", st);
    (o.device.bf16 ? o.device.peak_flops_bf16 : o.device.peak_flops_fp32) = *device_tflops * 1e12;
    o.device.description += fmt::format(" (peak {} TFLOP/s from --device-tflops)", *device_tflops);
  }
  {
    auto en = parse_engine(engine);
    if (!en.ok()) return report_error("plan", en.status());
    o.engine = *en;
    if (Status st = check_core_sharing(o.core_sharing); !st.ok()) return report_error("plan", st);
  }
  auto net = find_network(network.empty() ? o.device.network : network);
  if (!net.ok()) return report_error("plan", net.status());
  o.network = std::move(*net);
  o.flash_attention = flash.value_or(o.device.bf16);
  // The flags' numbers within their ranges, as given (a GiB figure before it becomes bytes).
  for (const Status& st :
       {check_number_range("--memory-budget-gib", budget_gib, 0, kMaxPlanMemoryBudgetGib,
                           "GiB per device, e.g. 72; 0 (the default) is 0.9 x the device's"),
        check_number_range("--price-per-device-hour", o.price_per_device_hour, 0,
                           kMaxPlanPricePerDeviceHour, "dollars per device-hour, e.g. 2.50"),
        check_number_range("--train-tokens", o.train_tokens, 1, kMaxPlanTrainTokens,
                           "tokens of the whole run, e.g. 1e11")}) {
    if (!st.ok()) return report_error("plan", st);
  }
  o.memory_budget_bytes = budget_gib * 1024.0 * 1024.0 * 1024.0;
  for (const std::string& r : recompute) {
    auto rc = parse_recompute_choice(r);
    if (!rc.ok()) return report_error("plan", rc.status());
    o.recompute.push_back(*rc);
  }
  if (Status st = o.validate(); !st.ok()) return report_error("plan", st);
  if (!costs_path.empty()) {
    if (Status st = load_measured(costs_path, o); !st.ok()) return report_error("plan", st);
  }
  auto result = plan(o);
  if (!result.ok()) return report_error("plan", result.status());
  if (!html.empty()) {
    if (Status st = write_file(html, plan_to_html(*result)); !st.ok()) {
      return report_error("plan", st.with_context("--html"));
    }
  }
  if (json) {
    std::puts(plan_to_json(*result).c_str());
  } else {
    std::fputs(format_plan(*result).c_str(), stdout);
    if (!html.empty()) std::printf("wrote %s\n", html.c_str());
  }
  return kExitOk;
}

}  // namespace tightpipe::cli
