// CostModel, the uniform model and the GPT-derived model (cost_model.h).
#include "tightpipe/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include "tightpipe/base.h"
#include "tightpipe/flag_checks.h"
#include "tightpipe/simulator.h"

namespace tightpipe {

void add_stage_cost(StageCost& to, const StageCost& from) {
  for (double StageCost::*f : kStageCostAdditiveFields) to.*f += from.*f;
  to.message_bytes = std::max(to.message_bytes, from.message_bytes);
}

StageCost scale_stage_cost(const StageCost& c, double factor) {
  StageCost out = c;
  for (double StageCost::*f : kStageCostAdditiveFields) out.*f = c.*f * factor;
  return out;
}

CostModel::CostModel(std::vector<StageCost> stages, LinkCost link, std::string time_unit,
                     std::string source, bool real_bytes)
    : stages_(std::move(stages)),
      link_(link),
      time_unit_(std::move(time_unit)),
      source_(std::move(source)),
      real_bytes_(real_bytes) {}

const StageCost& CostModel::stage(int32_t s) const {
  TP_CHECK(s >= 0 && s < num_stages(), "stage ", s, " of ", num_stages());
  return stages_[s];
}

double CostModel::compute_time(int32_t s, ActionType type, Recompute recompute) const {
  const StageCost& c = stage(s);
  const double extra = recompute == Recompute::kFull ? c.recompute : 0.0;
  switch (type) {
    case ActionType::kForward:
      return c.f;
    case ActionType::kBackwardInput:
      return c.i + extra;
    case ActionType::kBackwardWeight:
      return c.w;
    case ActionType::kBackward:
      return c.b + extra;
    case ActionType::kSendAct:
    case ActionType::kRecvAct:
    case ActionType::kSendGrad:
    case ActionType::kRecvGrad:
      break;
    case ActionType::kOverlapFB:
      TP_CHECK(false,
               "compute_time of an OVERLAP_F_B pair: ask its sub_actions() (simulator.h "
               "overlap_fb_time)");
      break;
  }
  TP_CHECK(false, "compute_time of a communication action type ", action_type_name(type));
  return 0;
}

double CostModel::action_time(const Schedule& schedule, const Action& a,
                              Recompute recompute) const {
  const double t = compute_time(a.stage, a.type, recompute);
  if (link_.overhead == 0) return t;
  return t + link_.overhead * remote_messages(schedule, a);
}

int64_t CostModel::message_bytes(int32_t from_stage, int32_t to_stage) const {
  TP_CHECK(std::abs(from_stage - to_stage) == 1, "not adjacent: ", from_stage, " -> ", to_stage);
  return stage(std::min(from_stage, to_stage)).message_bytes;
}

double CostModel::message_time(int32_t from_stage, int32_t to_stage) const {
  double t = link_.latency;
  if (link_.bandwidth > 0)
    t += static_cast<double>(message_bytes(from_stage, to_stage)) / link_.bandwidth;
  return t;
}

double CostModel::activation_unit_bytes(int32_t ranks) const {
  double total = 0;
  for (const StageCost& c : stages_) total += c.act_bytes;
  return ranks > 0 ? total / ranks : 0.0;
}

Status CostModel::covers(const Schedule& schedule) const {
  if (num_stages() == schedule.num_stages) return OkStatus();
  return Status::invalid_argument(fmt::format(
      "cost model '{}' has {} stage(s) but schedule '{}' has {} (p={} x v={}); hint: give one "
      "entry per stage 0..{}, or use --cost for uniform costs",
      printable(source_), num_stages(), printable(schedule.name), schedule.num_stages,
      schedule.num_ranks, schedule.chunks(), schedule.num_stages - 1));
}

Status check_cost_value(std::string_view what, double x) {
  if (std::isfinite(x) && x >= 0 && x <= kMaxCostValue) return OkStatus();
  return Status::invalid_argument(fmt::format(
      "{} is {}, {}; hint: costs and sizes are finite numbers in [0, {:g}] (tightpipe's limit); "
      "give times in a larger unit",
      what, x,
      !std::isfinite(x) ? "not a finite number"
      : x < 0           ? "negative"
                        : "over the limit",
      kMaxCostValue));
}

std::vector<std::pair<std::string_view, double>> stage_cost_fields(const StageCost& c) {
  return {{"f", c.f},
          {"i", c.i},
          {"w", c.w},
          {"b", c.b},
          {"recompute", c.recompute},
          {"optimizer", c.optimizer},
          {"act_bytes", c.act_bytes},
          {"act_after_i_bytes", c.act_after_i_bytes},
          {"input_bytes", c.input_bytes},
          {"param_bytes", c.param_bytes},
          {"grad_bytes", c.grad_bytes},
          {"optimizer_bytes", c.optimizer_bytes},
          {"message_bytes", static_cast<double>(c.message_bytes)},
          {"allreduce_bytes", c.allreduce_bytes}};
}

Status CostModel::validate() const {
  const std::string src = printable(source_);
  for (int32_t s = 0; s < num_stages(); ++s) {
    const StageCost& c = stages_[s];
    for (const auto& [key, x] : stage_cost_fields(c)) {
      TP_RETURN_IF_ERROR(check_cost_value(fmt::format("{}: stage {} {}", src, s, key), x));
    }
    if (s + 1 < num_stages()) {
      TP_RETURN_IF_ERROR(check_cost_value(
          fmt::format("{}: the message time from stage {} to {} (latency + bytes / bandwidth)", src,
                      s, s + 1),
          message_time(s, s + 1)));
    }
  }
  TP_RETURN_IF_ERROR(check_cost_value(fmt::format("{}: link latency", src), link_.latency));
  TP_RETURN_IF_ERROR(check_cost_value(fmt::format("{}: link bandwidth", src), link_.bandwidth));
  return check_cost_value(fmt::format("{}: link overhead", src), link_.overhead);
}

// ----- uniform ---------------------------------------------------------------------------------

namespace {

// Splits "k=v,k=v" and calls set(key, value) for each pair; errors name the flag and the pair,
// and a key given twice (which would silently keep the last).
template <typename Set>
Status parse_key_values(std::string_view text, std::string_view flag, std::string_view keys_hint,
                        Set set) {
  if (trim(text).empty()) {
    return Status::invalid_argument(
        fmt::format("{} is empty; hint: give key=value pairs, keys {}", flag, keys_hint));
  }
  std::vector<std::string> seen;
  for (const std::string& part : split(text, ',')) {
    std::string_view kv = trim(part);
    const size_t eq = kv.find('=');
    if (eq == std::string_view::npos) {
      return Status::invalid_argument(fmt::format("{}: '{}' is not key=value; hint: keys are {}",
                                                  flag, printable(kv), keys_hint));
    }
    std::string key(trim(kv.substr(0, eq)));
    std::string value(trim(kv.substr(eq + 1)));
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      return Status::invalid_argument(
          fmt::format("{}: '{}' given twice (again as '{}'); hint: give each key once", flag,
                      printable(key), printable(kv)));
    }
    seen.push_back(key);
    TP_RETURN_IF_ERROR(set(key, value));
  }
  return OkStatus();
}

// The value of a key=value pair: a finite number >= 0; errors name the flag, key and value.
Result<double> non_negative(std::string_view flag, std::string_view key, std::string_view value) {
  auto v = parse_double(value);
  if (!v.ok()) {
    const std::string& why = v.status().message();
    return Status::invalid_argument(fmt::format(
        "{}: key '{}': {}{}", flag, printable(key), why,
        why.find("hint:") == std::string::npos ? fmt::format("; hint: e.g. {}=1.5", printable(key))
                                               : ""));
  }
  if (*v < 0) {
    return Status::invalid_argument(
        fmt::format("{}: key '{}' has negative value {}; hint: costs and sizes must be >= 0", flag,
                    printable(key), printable(value)));
  }
  return *v;
}

}  // namespace

double optimizer_step_time(double params, double bytes_per_param, double memory_bandwidth) {
  TP_CHECK(memory_bandwidth > 0 && params >= 0 && bytes_per_param >= 0, "params=", params,
           " bytes_per_param=", bytes_per_param, " memory_bandwidth=", memory_bandwidth);
  return params * bytes_per_param / memory_bandwidth;
}

Result<UniformCosts> parse_uniform_costs(std::string_view text) {
  UniformCosts c;
  constexpr std::string_view kFlag = "--cost";
  constexpr std::string_view kKeys =
      "f, i, w, b, comm, overhead, bytes, act, act_after_i, input, params, hbm";
  bool have_f = false, have_i = false, have_w = false;
  Status st = parse_key_values(
      text, kFlag, kKeys, [&](const std::string& k, const std::string& v) -> Status {
        TP_ASSIGN_OR_RETURN(double x, non_negative(kFlag, k, v));
        TP_RETURN_IF_ERROR(check_cost_value(fmt::format("--cost: key '{}'", printable(k)), x));
        if (k == "f")
          c.f = x, have_f = true;
        else if (k == "i")
          c.i = x, have_i = true;
        else if (k == "w")
          c.w = x, have_w = true;
        else if (k == "b")
          c.b = x;
        else if (k == "comm")
          c.comm = x;
        else if (k == "overhead")
          c.overhead = x;
        else if (k == "bytes")
          c.bytes = static_cast<int64_t>(std::llround(x));
        else if (k == "act")
          c.act = x;
        else if (k == "act_after_i") {
          if (x > 1) {
            return Status::invalid_argument(fmt::format(
                "--cost: key 'act_after_i' has value {} > 1; hint: it is the fraction of the "
                "activation still held after I, in [0, 1]",
                v));
          }
          c.act_after_i = x;
        } else if (k == "input")
          c.input = x;
        else if (k == "params")
          c.params = x;
        else if (k == "hbm")
          c.memory_bandwidth = x;
        else {
          return Status::invalid_argument(
              fmt::format("--cost: unknown key '{}' (value '{}'); hint: keys are {}", printable(k),
                          printable(v), kKeys));
        }
        return OkStatus();
      });
  TP_RETURN_IF_ERROR(st);
  if (!have_f || !have_i || !have_w) {
    return Status::invalid_argument(
        fmt::format("--cost '{}' lacks {}; hint: give at least f, i and w, e.g. --cost f=1,i=1,w=1",
                    printable(text),
                    !have_f   ? "f"
                    : !have_i ? "i"
                              : "w"));
  }
  // The optimizer step's time needs both the parameters and the bandwidth that streams them.
  if ((c.params > 0) != (c.memory_bandwidth > 0)) {
    return Status::invalid_argument(
        c.params > 0
            ? fmt::format("--cost params={:g}: the optimizer step's time needs the device memory "
                          "bandwidth; hint: add hbm=BYTES_PER_TIME_UNIT (A100 80GB: 2.039e12 "
                          "bytes/s, 2.039e9 per ms)",
                          c.params)
            : fmt::format("--cost hbm={:g}: the optimizer step's time needs the parameters per "
                          "rank; hint: add params=N (e.g. params=9.4e8)",
                          c.memory_bandwidth));
  }
  return c;
}

CostModel random_cost_model(Rng& rng, int32_t stages, double act_after_i, double max_latency) {
  std::vector<StageCost> table(stages);
  for (StageCost& c : table) {
    c.f = 0.5 + rng.uniform_double() * 1.5;
    c.i = 0.5 + rng.uniform_double() * 2.0;
    c.w = 0.2 + rng.uniform_double() * 1.5;
    c.b = c.i + c.w;
    c.recompute = c.f;
    c.act_bytes = 1;
    c.act_after_i_bytes = act_after_i;
    c.message_bytes = 1;
  }
  const LinkCost link{.latency = max_latency > 0 ? rng.uniform_double() * max_latency : 0,
                      .bandwidth = 0};
  return CostModel(std::move(table), link, "unit", "random", /*real_bytes=*/true);
}

CostModel expand_to_directions(const CostModel& per_model_stage, const Schedule& schedule) {
  TP_CHECK(per_model_stage.num_stages() == schedule.stages_per_direction(), "a cost model of ",
           per_model_stage.num_stages(), " stages for ", schedule.stages_per_direction(),
           " model stages");
  if (schedule.directions == 1) return per_model_stage;
  std::vector<StageCost> stages;
  for (int32_t s = 0; s < schedule.num_stages; ++s) {
    stages.push_back(per_model_stage.stage(schedule.model_stage(s)));
  }
  return CostModel(std::move(stages), per_model_stage.link(), per_model_stage.time_unit(),
                   per_model_stage.source(), per_model_stage.real_bytes());
}

CostModel uniform_cost_model(const UniformCosts& costs, int32_t ranks, int32_t stages) {
  const UniformCosts& u = costs;
  TP_CHECK(ranks > 0 && stages > 0 && stages % ranks == 0, "ranks=", ranks, " stages=", stages);
  const int32_t per_rank = stages / ranks;  // exact: the check above
  const double v = per_rank;
  StageCost c;
  c.f = u.f / v;
  c.i = u.i / v;
  c.w = u.w / v;
  c.b = (u.b < 0 ? u.i + u.w : u.b) / v;
  c.recompute = c.f;
  c.act_bytes = u.act / v;
  c.act_after_i_bytes = c.act_bytes * u.act_after_i;
  c.input_bytes = c.act_bytes * u.input;
  c.message_bytes = u.bytes;
  c.optimizer =
      u.params > 0
          ? optimizer_step_time(u.params, kMegatronFp16AdamStepBytes, u.memory_bandwidth) / v
          : 0.0;
  LinkCost link{u.comm, 0, u.overhead};
  std::string src = fmt::format("--cost f={:g},i={:g},w={:g},b={:g},comm={:g}", u.f, u.i, u.w,
                                u.b < 0 ? u.i + u.w : u.b, u.comm);
  if (u.overhead > 0) src += fmt::format(",overhead={:g}", u.overhead);
  if (u.params > 0) src += fmt::format(",params={:g},hbm={:g}", u.params, u.memory_bandwidth);
  return CostModel(std::vector<StageCost>(stages, c), link, "unit", std::move(src),
                   /*real_bytes=*/false);
}

// ----- GPT -------------------------------------------------------------------------------------

Result<GptCostConfig> parse_gpt_cost_config(std::string_view text) {
  GptCostConfig c;
  constexpr std::string_view kFlag = "--model";
  constexpr std::string_view kKeys =
      "layers, hidden, heads, seq, mbs, vocab, flops, latency, bandwidth, overhead, act_bytes, "
      "param_bytes, optimizer_bytes, hbm, opt_step_bytes, tied";
  bool step_bytes_given = false;
  Status st = parse_key_values(
      text, kFlag, kKeys, [&](const std::string& k, const std::string& v) -> Status {
        TP_ASSIGN_OR_RETURN(double x, non_negative(kFlag, k, v));
        // A whole number up to the key's limit (docs/cost_model.md, "Limits"): the products the
        // formulas form (s x b x h x bytes) stay exact in 64 bits.
        auto integer = [&](int64_t& out, int64_t limit) -> Status {
          if (x != std::floor(x)) {
            return Status::invalid_argument(fmt::format(
                "--model: key '{}' has value '{}', which is not a whole number; hint: e.g. {}=24",
                k, printable(v), k));
          }
          if (x > static_cast<double>(limit)) {
            return Status::invalid_argument(fmt::format(
                "--model: key '{}' has value {}, over tightpipe's limit of {}; hint: use {} <= {}",
                k, printable(v), limit, k, limit));
          }
          out = static_cast<int64_t>(x);
          return OkStatus();
        };
        if (k == "layers") return integer(c.layers, kMaxGptLayers);
        if (k == "hidden") return integer(c.hidden, int64_t{1} << 20);
        if (k == "heads") return integer(c.heads, int64_t{1} << 16);
        if (k == "seq") return integer(c.seq, int64_t{1} << 20);
        if (k == "mbs" || k == "micro_batch") return integer(c.micro_batch, int64_t{1} << 12);
        if (k == "vocab") return integer(c.vocab, int64_t{1} << 24);
        if (k == "act_bytes") return integer(c.act_dtype_bytes, 8);
        if (k == "param_bytes") return integer(c.param_dtype_bytes, 8);
        if (k == "optimizer_bytes") return integer(c.optimizer_bytes_per_param, 64);
        if (k == "flops")
          c.flops = x;
        else if (k == "latency")
          c.latency = x;
        else if (k == "bandwidth")
          c.bandwidth = x;
        else if (k == "overhead")
          c.message_overhead = x;
        else if (k == "hbm")
          c.memory_bandwidth = x;
        else if (k == "opt_step_bytes")
          c.optimizer_step_bytes = x, step_bytes_given = true;
        else if (k == "tied") {
          if (x != 0 && x != 1) {
            return Status::invalid_argument(fmt::format(
                "--model: key 'tied' has value '{}'; hint: tied=1 (input and output embeddings "
                "are one matrix) or tied=0",
                printable(v)));
          }
          c.tied_embedding = x == 1;
        } else {
          return Status::invalid_argument(
              fmt::format("--model: unknown key '{}' (value '{}'); hint: keys are {}", printable(k),
                          printable(v), kKeys));
        }
        return OkStatus();
      });
  TP_RETURN_IF_ERROR(st);
  const std::pair<const char*, int64_t> required[] = {{"layers", c.layers},
                                                      {"hidden", c.hidden},
                                                      {"heads", c.heads},
                                                      {"seq", c.seq},
                                                      {"mbs", c.micro_batch}};
  for (const auto& [key, value] : required) {
    if (value <= 0) {
      return Status::invalid_argument(fmt::format(
          "--model '{}': key '{}' must be a positive whole number (got {}); hint: e.g. --model "
          "layers=24,hidden=1024,heads=16,seq=1024",
          printable(text), key, value));
    }
  }
  if (c.flops <= 0) {
    return Status::invalid_argument(
        fmt::format("--model: key 'flops' must be > 0 (device FLOP/s, e.g. flops=150e12)"));
  }
  // A step cost asked for must be derivable: the optimizer's from the bandwidth, the tied
  // embedding's all-reduce from the vocabulary and the link.
  if (step_bytes_given && c.memory_bandwidth <= 0) {
    return Status::invalid_argument(fmt::format(
        "--model opt_step_bytes={:g}: the optimizer step's time needs the device memory "
        "bandwidth; hint: add hbm=BYTES_PER_SECOND (A100 80GB: hbm=2.039e12)",
        c.optimizer_step_bytes));
  }
  if (c.tied_embedding && (c.vocab <= 0 || c.bandwidth <= 0)) {
    return Status::invalid_argument(
        c.vocab <= 0
            ? std::string("--model tied=1: the tied embedding's gradient all-reduce needs the "
                          "vocabulary; hint: add vocab=V (e.g. vocab=32000)")
            : fmt::format("--model tied=1 with bandwidth={:g}: the tied embedding's gradient "
                          "all-reduce needs the link bandwidth; hint: bandwidth=BYTES_PER_SECOND "
                          "(e.g. 25e9)",
                          c.bandwidth));
  }
  // The rules of a shape are plan's and train's too (flag_checks.h): heads divide hidden.
  TP_RETURN_IF_ERROR(check_model_shape(
      {.layers = c.layers, .hidden = c.hidden, .heads = c.heads, .seq = c.seq, .vocab = c.vocab},
      {.context = "--model: ",
       .layers = "layers=",
       .hidden = "hidden=",
       .heads = "heads=",
       .seq = "seq=",
       .vocab = "vocab=",
       .ffn_hidden = "ffn_hidden="},
      {.layers = kMaxGptLayers}));
  return c;
}

namespace {

std::string gpt_source(const GptCostConfig& g) {
  return fmt::format("--model layers={},hidden={},heads={},seq={},mbs={}", g.layers, g.hidden,
                     g.heads, g.seq, g.micro_batch);
}

// The tied embedding's step cost on each of its two stages (tied=1; 0 otherwise): the 2-rank
// all-reduce of its V x h gradient values on the model's link. Megatron-LM keeps a copy of the
// matrix on the first and on the last stage and reduces their gradients before the optimizer.
double tied_embedding_allreduce_time(const GptCostConfig& g) {
  if (!g.tied_embedding) return 0;
  const double grad_bytes =
      static_cast<double>(g.grad_dtype_bytes > 0 ? g.grad_dtype_bytes : g.param_dtype_bytes);
  return ring_allreduce_time(
      static_cast<double>(g.vocab) * static_cast<double>(g.hidden) * grad_bytes, 2,
      LinkCost{g.latency, g.bandwidth, g.message_overhead}, 0);
}

}  // namespace

LayerCosts gpt_layer_costs(const GptCostConfig& g) {
  const double s = static_cast<double>(g.seq), b = static_cast<double>(g.micro_batch),
               h = static_cast<double>(g.hidden), a = static_cast<double>(g.heads),
               V = static_cast<double>(g.vocab);
  const double f = g.ffn_hidden > 0 ? static_cast<double>(g.ffn_hidden) : 4 * h;  // MLP width
  const double sbh = s * b * h;
  const double dt = static_cast<double>(g.act_dtype_bytes) / 2.0;  // formulas assume 16-bit
  const double param_bytes = static_cast<double>(g.param_dtype_bytes);
  const double optimizer_bytes = static_cast<double>(g.optimizer_bytes_per_param);
  // One kind from its FLOPs (f, i, w), activation bytes and parameter count.
  const double grad_bytes =
      static_cast<double>(g.grad_dtype_bytes > 0 ? g.grad_dtype_bytes : g.param_dtype_bytes);
  auto kind = [&](double fwd, double i, double w, double act, double act_after_i, double params) {
    StageCost c;
    c.f = fwd / g.flops;
    c.i = i / g.flops;
    c.w = w / g.flops;
    c.b = c.i + c.w;
    c.recompute = c.f;
    c.optimizer = g.memory_bandwidth > 0
                      ? optimizer_step_time(params, g.optimizer_step_bytes, g.memory_bandwidth)
                      : 0.0;
    c.act_bytes = act;
    c.act_after_i_bytes = act_after_i;
    c.input_bytes = 0;
    c.param_bytes = params * param_bytes;
    c.grad_bytes = params * grad_bytes;
    c.optimizer_bytes = params * optimizer_bytes;
    return c;
  };
  LayerCosts out;
  // Attention (QKV and projection, 8sbh^2 per pass) and MLP (4sbhf) matmuls, attention scores
  // (4s^2bh forward, twice that for the input gradient); with f = 4h the paper's 24h + 4s.
  const double matmul = 8 * h + 4 * f;
  out.block = kind(sbh * (matmul + 4 * s), sbh * (matmul + 8 * s), sbh * matmul,
                   s * b * (18 * h + 4 * f + (g.flash_attention ? 0 : 5 * a * s)) * dt,
                   s * b * (16 * h + 4 * f) * dt, 4 * h * h + 2 * h * f + 9 * h + f);
  const double head = g.vocab > 0 ? 2 * sbh * V : 0;  // LM head + loss
  out.head = kind(head, head, head, 0, 0, V * h);
  out.embedding = kind(0, 0, 0, 0, 0, g.vocab > 0 ? V * h + s * h : 0);  // token + position
  out.message_bytes = static_cast<int64_t>(sbh) * g.act_dtype_bytes;
  out.link = LinkCost{g.latency, g.bandwidth, g.message_overhead};
  out.embedding.optimizer += tied_embedding_allreduce_time(g);
  out.head.optimizer += tied_embedding_allreduce_time(g);
  // A move from a temporary, not operator=(const char*): the latter's inlined replace() trips
  // GCC 12's -Wrestrict false positive here (GCC bug 105329, a one-character literal).
  out.time_unit = std::string("s");
  out.source = gpt_source(g);
  return out;
}

std::vector<StageLayers> even_layer_split(int64_t layers, int32_t stages) {
  TP_CHECK(stages > 0, "stages=", stages);
  std::vector<StageLayers> out(stages);
  for (int32_t st = 0; st < stages; ++st) {
    out[st].embedding = st == 0;
    out[st].blocks = static_cast<int32_t>(layers / stages + (st < layers % stages ? 1 : 0));
    out[st].head = st == stages - 1;
  }
  return out;
}

CostModel gpt_cost_model_for_layout(const GptCostConfig& g, const std::vector<StageLayers>& layout,
                                    const std::string& layout_name) {
  const LayerCosts kinds = gpt_layer_costs(g);
  const CostModel summed = cost_model_for_layout(kinds, layout, layout_name);
  std::vector<StageCost> stages;
  for (int32_t st = 0; st < summed.num_stages(); ++st) {
    stages.push_back(summed.stage(st));
    stages.back().input_bytes =
        static_cast<double>(g.seq * g.micro_batch * g.hidden * g.act_dtype_bytes);
    // One stage with both ends holds a tied matrix once: no all-reduce and no second copy to step.
    if (g.tied_embedding && layout[st].embedding && layout[st].head) {
      stages.back().optimizer = std::max(
          0.0, stages.back().optimizer - kinds.head.optimizer - tied_embedding_allreduce_time(g));
    }
  }
  return CostModel(std::move(stages), summed.link(), summed.time_unit(),
                   layout_name.empty() ? gpt_source(g) : summed.source());
}

Result<CostModel> gpt_cost_model(const GptCostConfig& g, int32_t ranks, int32_t stages) {
  TP_CHECK(ranks > 0 && stages > 0, "ranks=", ranks, " stages=", stages);
  if (g.layers < stages) {
    return Status::invalid_argument(fmt::format(
        "--model: {} layer(s) cannot fill {} stages; hint: use at least one layer per stage "
        "(layers >= pp * vpp)",
        g.layers, stages));
  }
  return gpt_cost_model_for_layout(g, even_layer_split(g.layers, stages), "");
}

Result<RuntimeHostTime> parse_runtime_host_time_us(std::string_view text, std::string_view flag) {
  constexpr std::string_view kKeys = "f, i, w, b, f_module, i_module, w_module, b_module";
  RuntimeHostTime h;
  Status st = parse_key_values(
      text, flag, kKeys, [&](const std::string& k, const std::string& v) -> Status {
        TP_ASSIGN_OR_RETURN(double x, non_negative(flag, k, v));
        if (!(x < 1e6)) {
          return Status::invalid_argument(
              fmt::format("{}: key '{}' is {} us, a second or more; hint: microseconds per action, "
                          "as tightpipe.torch.measure_host_time gives them",
                          flag, printable(k), printable(v)));
        }
        double* slot = k == "f"          ? &h.f
                       : k == "i"        ? &h.i
                       : k == "w"        ? &h.w
                       : k == "b"        ? &h.b
                       : k == "f_module" ? &h.f_module
                       : k == "i_module" ? &h.i_module
                       : k == "w_module" ? &h.w_module
                       : k == "b_module" ? &h.b_module
                                         : nullptr;
        if (slot == nullptr) {
          return Status::invalid_argument(
              fmt::format("{}: unknown key '{}' (value '{}'); hint: keys are {}, microseconds",
                          flag, printable(k), printable(v), kKeys));
        }
        *slot = x * 1e-6;
        return OkStatus();
      });
  TP_RETURN_IF_ERROR(st);
  return h;
}

Result<RuntimeHostTime> host_time_in_unit(const RuntimeHostTime& seconds,
                                          std::string_view time_unit, std::string_view flag,
                                          std::string_view costs_source) {
  const double unit = time_unit == "s"    ? 1.0
                      : time_unit == "ms" ? 1e-3
                      : time_unit == "us" ? 1e-6
                      : time_unit == "ns" ? 1e-9
                                          : 0.0;
  if (unit == 0.0) {
    return Status::invalid_argument(fmt::format(
        "{}: the costs ({}) are in '{}', not a time, so the host time cannot be added to them; "
        "hint: give the costs in seconds or milliseconds (--costs FILE.json with \"time_unit\": "
        "\"ms\", or --model, in s)",
        flag, printable(costs_source), printable(time_unit)));
  }
  RuntimeHostTime h = seconds;
  for (double* x : {&h.f, &h.i, &h.w, &h.b, &h.f_module, &h.i_module, &h.w_module, &h.b_module}) {
    *x /= unit;
  }
  return h;
}

CostModel with_host_time(const CostModel& costs, const RuntimeHostTime& host,
                         const std::vector<int32_t>& modules_per_stage) {
  if (!host.any()) return costs;
  TP_CHECK(
      !host.per_module() || static_cast<int32_t>(modules_per_stage.size()) == costs.num_stages(),
      "modules_per_stage has ", modules_per_stage.size(), " counts for ", costs.num_stages(),
      " stages");
  std::vector<StageCost> stages;
  for (int32_t s = 0; s < costs.num_stages(); ++s) {
    StageCost c = costs.stage(s);
    const double n = host.per_module() ? modules_per_stage[s] : 0;
    c.f += host.f + n * host.f_module;
    c.i += host.i + n * host.i_module;
    c.w += host.w + n * host.w_module;
    c.b += host.b + n * host.b_module;
    stages.push_back(c);
  }
  std::string note = fmt::format(", host time per action f/i/w/b {:.4g}/{:.4g}/{:.4g}/{:.4g} {}",
                                 host.f, host.i, host.w, host.b, costs.time_unit());
  if (host.per_module()) {
    note += fmt::format(" + per module {:.4g}/{:.4g}/{:.4g}/{:.4g}", host.f_module, host.i_module,
                        host.w_module, host.b_module);
  }
  return CostModel(std::move(stages), costs.link(), costs.time_unit(), costs.source() + note,
                   costs.real_bytes());
}

CostModel torch_runtime_costs(const CostModel& costs, const RuntimeHostTime& host,
                              const std::vector<int32_t>& modules_per_stage) {
  if (costs.num_stages() == 0) return costs;
  std::vector<StageCost> stages;
  for (int32_t s = 0; s < costs.num_stages(); ++s) stages.push_back(costs.stage(s));
  stages[0].w = stages[0].b;  // its whole backward, one pass (i + w unless b was measured)
  stages[0].i = 0;
  return with_host_time(
      CostModel(std::move(stages), costs.link(), costs.time_unit(),
                costs.source() + ", first stage's backward in W (PyTorch's runtime)",
                costs.real_bytes()),
      host, modules_per_stage);
}

}  // namespace tightpipe
