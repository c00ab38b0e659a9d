// The planner's outputs (plan.h): the table, JSON (docs/plan.md, stable keys) and the command
// lines that run a plan.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "plan_format.h"
#include "tightpipe/base.h"
#include "tightpipe/lower_bound.h"
#include "tightpipe/plan.h"

namespace tightpipe {
namespace {

using plan_format::dollars;
using plan_format::hours;
using plan_format::kGiB;

double max_peak(const PlanCandidate& c) {
  return c.peak_memory_bytes.empty()
             ? 0.0
             : *std::max_element(c.peak_memory_bytes.begin(), c.peak_memory_bytes.end());
}

std::string si(double x) {  // 1.2M, 340k; 1.2e+15 beyond G
  if (x >= 1e12) return fmt::format("{:.1e}", x);
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}

// The table's columns: header, least width, left-aligned. Each column is as wide as its widest
// cell (plus a space), so any accepted value keeps the rows aligned under the header.
struct Column {
  const char* header;
  size_t width;
  bool left;
};
constexpr Column kColumns[] = {
    {"", 5, true},           {"schedule", 12, true},  {"pp", 4, false},
    {"vpp", 4, false},       {"dp", 5, false},        {"mbs", 5, false},
    {"m", 6, false},         {"", 2, true},           {"recompute", 9, true},
    {"step s", 10, false},   {"tokens/s", 10, false}, {"bubble", 9, false},
    {"peak GiB", 10, false}, {"train", 10, false},    {"cost", 11, false},
    {"vs 1F1B", 8, false}};
constexpr size_t kNumColumns = sizeof(kColumns) / sizeof(kColumns[0]);
using Cells = std::vector<std::string>;

Cells row(const char* mark, const PlanCandidate& c, const PlanCandidate* base) {
  std::string vs;
  if (base != nullptr && base != &c && base->cost_usd > 0) {
    const double pct = 100 * (c.cost_usd / base->cost_usd - 1);
    vs = std::abs(pct) < 1e4 ? fmt::format("{:+.1f}%", pct) : fmt::format("{:+.1e}%", pct);
  }
  return {mark,
          c.optimizer_post_validation ? c.schedule + " +pv" : c.schedule,
          fmt::format("{}", c.pp),
          fmt::format("{}", c.vpp),
          fmt::format("{}", c.dp),
          fmt::format("{}", c.micro_batch_size),
          fmt::format("{}", c.num_microbatches),
          "",
          c.recompute,
          fmt::format("{:.4g}", c.step_time_s),
          si(c.tokens_per_s),
          fmt::format("{:.1f}%", 100 * c.bubble_ratio),
          fmt::format("{:.1f}", max_peak(c) / kGiB),
          hours(c.train_hours),
          dollars(c.cost_usd),
          vs};
}

std::string table(const std::vector<Cells>& rows) {
  size_t width[kNumColumns];
  for (size_t k = 0; k < kNumColumns; ++k) {
    width[k] = std::max(kColumns[k].width, std::string_view(kColumns[k].header).size());
    for (const Cells& r : rows) width[k] = std::max(width[k], r[k].size() + 1);
  }
  auto line = [&](auto cell) {
    std::string out;
    for (size_t k = 0; k < kNumColumns; ++k) {
      const std::string_view text = cell(k);
      const std::string pad(width[k] - std::min(width[k], text.size()), ' ');
      out += kColumns[k].left ? std::string(text) + pad : pad + std::string(text);
    }
    return out.erase(out.find_last_not_of(' ') + 1) + "\n";  // no trailing blanks
  };
  std::string out = line([](size_t k) { return std::string_view(kColumns[k].header); });
  for (const Cells& r : rows) out += line([&](size_t k) { return std::string_view(r[k]); });
  return out;
}

std::string shell_quote(const std::string& s) { return "'" + s + "'"; }

}  // namespace

std::vector<std::string> plan_command_lines(const PlanResult& result, const PlanCandidate& c) {
  const PlanOptions& o = result.options;
  const PlanModel& m = o.model;
  std::vector<std::string> out;
  // tightpipe train: GPT with its tokenizer's padded vocabulary (bytes: 256; GPT-2's BPE: 50304),
  // 4h MLP, the device's precision (--bf16 where it trains in bf16), `--data-parallel-size` dp when
  // dp > 1, recompute none or uniform (docs/plan.md).
  std::vector<std::string> why_not;
  if (m.vocab_size != 256 && m.vocab_size != kGpt2PaddedVocabSize) {
    why_not.push_back(
        fmt::format("vocab {} (its vocabulary is its tokenizer's: 256 bytes or GPT-2's {})",
                    m.vocab_size, kGpt2PaddedVocabSize));
  }
  if (m.ffn_hidden_size != 0 && m.ffn_hidden_size != 4 * m.hidden_size)
    why_not.push_back("an MLP width other than 4 x hidden");
  if (c.recompute.rfind("block:", 0) == 0)
    why_not.push_back("block recompute (train has the uniform method)");
  if (why_not.empty()) {
    std::string cmd = fmt::format(
        "tightpipe train --num-layers {} --hidden-size {} --num-attention-heads {} --seq-length {} "
        "--micro-batch-size {} --num-microbatches {} --pp {} --schedule {}",
        m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, c.micro_batch_size,
        c.num_microbatches, c.pp, c.schedule);
    if (c.schedule == "interleaved" || c.schedule == "looped-bfs")
      cmd += fmt::format(" --vpp {}", c.vpp);
    if (!c.layout.empty()) cmd += " --pipeline-layout " + shell_quote(c.layout);
    if (c.dp > 1) cmd += fmt::format(" --data-parallel-size {}", c.dp);
    if (c.optimizer_post_validation) cmd += " --enable-optimizer-post-validation";
    if (o.device.bf16) cmd += " --bf16";
    if (c.recompute == "full") {
      cmd += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
    }
    if (m.vocab_size == kGpt2PaddedVocabSize) {
      cmd += " --tokenizer-type GPT2BPETokenizer --vocab-file vocab.json --merge-file merges.txt";
    }
    out.push_back(cmd);
  } else {
    std::string list;
    for (const std::string& w : why_not) list += (list.empty() ? "" : ", ") + w;
    out.push_back("# tightpipe train cannot run this plan: " + list);
  }
  // Megatron-LM (the zero-bubble schedules: the sail-sg/zero-bubble-pipeline-parallelism fork).
  std::string mg = fmt::format(
      "pretrain_gpt.py --num-layers {} --hidden-size {} --num-attention-heads {} --seq-length {} "
      "--max-position-embeddings {} --micro-batch-size {} --global-batch-size {} "
      "--pipeline-model-parallel-size {}",
      m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.seq_length,
      c.micro_batch_size, o.global_batch_size, c.pp);
  if (m.ffn_hidden_size > 0) mg += fmt::format(" --ffn-hidden-size {}", m.ffn_hidden_size);
  if (m.vocab_size > 0) mg += fmt::format(" --vocab-size {}", m.vocab_size);
  if (o.device.bf16) mg += " --bf16";
  if (o.flash_attention) mg += " --use-flash-attn";
  if (o.distributed_optimizer) mg += " --use-distributed-optimizer";
  if (c.schedule == "interleaved")
    mg += fmt::format(" --num-virtual-stages-per-pipeline-rank {}", c.vpp);
  if (c.recompute == "full") {
    mg += " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  } else if (c.recompute.rfind("block:", 0) == 0) {
    mg += " --recompute-granularity full --recompute-method block --recompute-num-layers " +
          c.recompute.substr(6);
  }
  if (c.schedule == "zb-v" || c.schedule == "zb-v-auto") {
    mg += " --zero-bubble-v-schedule  # the zero-bubble fork";
  } else if (c.schedule == "v-half" || c.schedule == "v-min") {
    mg += fmt::format(
        " --zero-bubble-v-schedule --zero-bubble-v-schedule-mem-setup {}  # the zero-bubble fork",
        c.schedule.substr(2));
  } else if (c.schedule.rfind("zb-", 0) == 0) {
    mg += fmt::format(
        " --enable-zero-bubble --zero-bubble-max-pending-backward {}{}  # the "
        "zero-bubble fork",
        c.schedule == "zb-2p" || c.schedule == "zb-h2" ? 2 * c.pp : c.pp,
        c.optimizer_post_validation ? " --enable-optimizer-post-validation" : "");
  } else if (c.schedule == "dualpipe") {
    mg +=
        "  # Megatron-LM has no dualpipe schedule: DeepSeek's DualPipe (deepseek-ai/DualPipe) runs "
        "it";
  } else if (c.schedule == "gpipe" || c.schedule == "looped-bfs" || c.schedule == "dualpipev") {
    mg += fmt::format(
        "  # Megatron-LM has no {} schedule: torch.distributed.pipelining's "
        "Schedule{} runs it",
        c.schedule,
        c.schedule == "gpipe"        ? "GPipe"
        : c.schedule == "looped-bfs" ? "LoopedBFS"
                                     : "DualPipeV");
  }
  out.push_back(mg);
  return out;
}

std::string format_plan(const PlanResult& r) {
  const PlanOptions& o = r.options;
  const PlanModel& m = o.model;
  std::string out = fmt::format(
      "model: {} layers x {} hidden, {} heads, seq {}, vocab {}{}, {:.2f}B parameters\n"
      "batch: {} sequences x {} tokens per step; {:.3g} tokens = {:.1f} steps\n"
      "devices: {} x {} ({}; {}{}), memory budget {:.1f} GiB per device; network {}; ${:.2f} per "
      "device-hour\n",
      m.num_layers, m.hidden_size, m.num_attention_heads, m.seq_length, m.vocab_size,
      m.vocab_size == 0 ? " (no embedding, no LM head)" : "", m.parameters() / 1e9,
      o.global_batch_size, m.seq_length, o.train_tokens, r.steps, o.devices, o.device.name,
      o.device.description, o.measured ? "costs measured in a run" : fmt::format("mfu {:g}", o.mfu),
      o.distributed_optimizer ? ", distributed optimizer" : "", r.memory_budget_bytes / kGiB,
      o.network.name, o.price_per_device_hour);
  out +=
      fmt::format("engine: {} (docs/cost_model.md \"Engine profiles\")\n", engine_name(o.engine));
  if (o.core_sharing.cores > 0 || o.core_sharing.slowdown != 1.0) {
    out += fmt::format("cores: {} (docs/cost_model.md \"Shared cores\")\n",
                       core_sharing_text(o.core_sharing));
  }
  out += fmt::format(
      "searched {} configurations in {:.2f} s: {} simulated, {} pruned by their lower bound, {} "
      "dominated by a lighter recompute, {} do not fit\n\n",
      r.stats.configurations, r.search_seconds, r.stats.simulated, r.stats.pruned,
      r.stats.dominated, r.stats.infeasible);
  const PlanCandidate* base = r.baseline >= 0 ? &r.candidates[r.baseline] : nullptr;
  // The top rows, then the recommended and the baseline where the top rows left them out.
  auto mark = [&](int32_t i) { return i == r.recommended ? "->" : i == r.baseline ? "base" : ""; };
  std::vector<Cells> rows;
  int32_t shown = 0;
  for (; shown < static_cast<int32_t>(r.candidates.size()) && shown < o.top; ++shown) {
    if (!r.candidates[shown].fits) break;
    rows.push_back(row(mark(shown), r.candidates[shown], base));
  }
  for (int32_t i : {r.recommended, r.baseline}) {
    if (i >= shown && (i != r.baseline || r.baseline != r.recommended)) {
      rows.push_back(row(mark(i), r.candidates[i], base));
    }
  }
  out += table(rows);
  if (r.recommended >= 0) {
    const PlanCandidate& c = r.candidates[r.recommended];
    out += fmt::format(
        "\nrecommended: {} p={} v={} dp={} mbs={} m={} recompute {} layout {}: {:.4g} s per step "
        "{}, bubble {:.1f}%, {:.1f} GiB peak on the fullest rank, {} and {} for the run\n",
        c.schedule, c.pp, c.vpp, c.dp, c.micro_batch_size, c.num_microbatches, c.recompute,
        c.layout, c.step_time_s, format_lower_bound(c.step_time_s, c.lower_bound_s),
        100 * c.bubble_ratio, max_peak(c) / kGiB, hours(c.train_hours), dollars(c.cost_usd));
    if (!c.engine_profile.empty()) out += "engine profile: " + c.engine_profile + "\n";
    out += "why: " + r.why + "\n";
    out += "run it:\n";
    for (const std::string& line : plan_command_lines(r, c)) out += "  " + line + "\n";
  }
  int64_t no_fit = 0;
  for (const PlanCandidate& c : r.candidates) no_fit += !c.fits;
  if (no_fit > 0) {
    out += fmt::format("\ndo not fit or cannot run ({}{}):\n", no_fit,
                       no_fit > 8 ? "; the first 8, --json lists all" : "");
    int32_t n = 0;
    for (const PlanCandidate& c : r.candidates) {
      if (c.fits) continue;
      if (++n > 8) break;
      out += fmt::format("  {} p={} v={} mbs={} m={} recompute {}: {}\n", c.schedule, c.pp, c.vpp,
                         c.micro_batch_size, c.num_microbatches, c.recompute, c.reason);
    }
  }
  return out;
}

std::string plan_to_json(const PlanResult& r, int indent) {
  using nlohmann::json;
  const PlanOptions& o = r.options;
  const PlanModel& m = o.model;
  json j;
  j["model"] = {{"num_layers", m.num_layers},
                {"hidden_size", m.hidden_size},
                {"num_attention_heads", m.num_attention_heads},
                {"seq_length", m.seq_length},
                {"vocab_size", m.vocab_size},
                {"ffn_hidden_size", m.ffn_hidden_size > 0 ? m.ffn_hidden_size : 4 * m.hidden_size},
                {"parameters", m.parameters()}};
  j["global_batch_size"] = o.global_batch_size;
  j["devices"] = o.devices;
  j["device"] = {
      {"name", o.device.name},
      {"description", o.device.description},
      {"peak_flops", o.device.bf16 ? o.device.peak_flops_bf16 : o.device.peak_flops_fp32},
      {"precision", o.device.bf16 ? "bf16" : "fp32"},
      {"memory_bytes", o.device.memory_bytes},
      {"message_overhead_s", o.device.message_overhead_s}};
  j["costs"] = o.measured ? "measured" : "device";
  j["mfu"] = o.mfu;
  j["network"] = o.network.name;
  j["engine"] = engine_name(o.engine);
  if (o.core_sharing.cores > 0 || o.core_sharing.slowdown != 1.0) {  // only then, as simulate's
    j["core_sharing"] = {{"cores", o.core_sharing.cores}, {"slowdown", o.core_sharing.slowdown}};
  }
  j["memory_budget_bytes"] = r.memory_budget_bytes;
  j["distributed_optimizer"] = o.distributed_optimizer;
  j["price_per_device_hour"] = o.price_per_device_hour;
  j["train_tokens"] = o.train_tokens;
  j["steps"] = r.steps;
  j["search"] = {{"configurations", r.stats.configurations},
                 {"simulated", r.stats.simulated},
                 {"pruned", r.stats.pruned},
                 {"dominated", r.stats.dominated},
                 {"infeasible", r.stats.infeasible},
                 {"seconds", r.search_seconds}};
  json cands = json::array();
  for (const PlanCandidate& c : r.candidates) {
    cands.push_back({{"schedule", c.schedule},
                     {"pp", c.pp},
                     {"vpp", c.vpp},
                     {"dp", c.dp},
                     {"micro_batch_size", c.micro_batch_size},
                     {"num_microbatches", c.num_microbatches},
                     {"recompute", c.recompute},
                     {"layout", c.layout},
                     {"fits", c.fits},
                     {"reason", c.reason},
                     {"simulated", c.simulated},
                     {"optimizer_post_validation", c.optimizer_post_validation},
                     {"engine_profile", c.engine_profile},
                     {"step_time_s", c.step_time_s},
                     {"lower_bound_makespan", c.lower_bound_s},
                     {"gap_to_lower_bound", lower_bound_gap(c.step_time_s, c.lower_bound_s)},
                     {"pipeline_time_s", c.pipeline_time_s},
                     {"allreduce_time_s", c.allreduce_time_s},
                     {"exposed_allreduce_ratio", c.exposed_allreduce_ratio},
                     {"bubble_ratio", c.bubble_ratio},
                     {"peak_memory_bytes", c.peak_memory_bytes},
                     {"tokens_per_s", c.tokens_per_s},
                     {"train_hours", c.train_hours},
                     {"cost_usd", c.cost_usd}});
  }
  j["candidates"] = std::move(cands);
  auto index = [](int32_t i) { return i >= 0 ? json(i) : json(nullptr); };
  j["recommended"] = index(r.recommended);
  j["fastest"] = index(r.fastest);
  j["baseline"] = index(r.baseline);
  j["why"] = r.why;
  j["commands"] =
      r.recommended >= 0 ? json(plan_command_lines(r, r.candidates[r.recommended])) : json::array();
  return j.dump(indent);
}

}  // namespace tightpipe
