// Every check the project holds, side by side in one table (issue 49): each figure the project
// predicts beside the published or measured number it is checked against, the error, the
// tolerance, the noise of the figure (the spread of identical runs; 0 for a computed one) and the
// verdict of bench/verdict.h, the one rule of every bench; the header names the CPU and the load.
// Groups (--group):
//   table4     the zero-bubble paper's Table 4 (REFERENCE.md section 5): measured throughput of
//              1F1B-I, ZB-1p and ZB-2p over 1F1B at p = 16 and 32, predicted by
//              tests/testutil/table4.h, the prediction src/sim/table4_test.cc asserts: the
//              paper's profiled costs and memory model plus the step's costs besides the
//              pipeline; ZB-1p and ZB-2p built for the span, stepping post-validated (the steady
//              state under `--engine zb`); 1F1B and 1F1B-I (v as the paper ran it) synchronous
//              under `--engine megatron`. Tolerance --table4-tolerance.
//   zb-rates   the span bubble of zb-1p, zb-2p and zb-v-auto at the authors' published settings
//              against their published rates (zb_paper_settings_bench's check): one-sided, no
//              worse than published to its 4 decimals.
//   reference  REFERENCE.md section 2's worked numbers (p = 4, m = 8: makespan, bubble, peak
//              memory, busy span), and the closed forms of sections 1 and 3 at p = 8, m = 32 and
//              the GPT layer's FLOPs: the simulator on uniform costs, exact to the printed digits.
//   plan       the planner's 2-rank candidates, predicted against measured on this machine by
//              plan_check_bench (--plan runs it, about 100 s; --plan-json reads the --json of an
//              earlier run): judged against the calibration's identical runs' spread.
//   shared-cores  more thread ranks than cores (bench/exec/shared_cores_bench.py --json, read
//              with --shared-cores-json): each schedule's plan with the cores shared (judged)
//              and with a core per rank (printed, not held), against the measured step; judged
//              against the calibration's identical runs' spread.
// Computed rows have no noise and pass or fail by their error alone. Peer runs (Megatron-Core,
// DeepSpeed under bench/peers/peers_bench.py) are recorded in the repository only as
// docs/peers.md's text, not as data: this table holds none of them. Usage: checks_bench [--group
// table4,zb-rates,reference] [--plan [--plan-args "..."]]
//                     [--plan-json FILE] [--shared-cores-json FILE] [--table4-tolerance F]
// Exit: 0 every judged check passes, 1 one fails (a judged miss stands whatever else could not
// be judged), 2 bad flag, 3 none fails and one could not be judged (the noise above its
// tolerance).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "bench_cli.h"
#include "reference_vectors.h"
#include "table4.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "verdict.h"
#include "zb_paper_settings.h"

using namespace tightpipe;
using nlohmann::json;

namespace {

// One check: a predicted figure against the number it is held to.
struct Row {
  std::string check;
  std::string source;     // where the number it is held to comes from
  std::string predicted;  // as printed
  std::string held_to;    // the published or measured number, as printed
  // predicted / held_to - 1, or (points) the difference of two rates in percentage points.
  std::optional<double> error;  // nullopt: a check that is not an error (the plan's ranking)
  double tolerance = 0;
  bool one_sided = false;             // only an error above 0 fails (a rate no worse than)
  bool held = true;                   // false: printed, not judged (the 1-device candidate)
  bool measured = false;              // a measured figure (else computed: no noise)
  std::optional<double> noise = 0.0;  // the identical runs' spread (0 when computed); nullopt:
                                      // unknown (measured once)
  bench::Verdict verdict = bench::Verdict::kPass;
};

struct Group {
  std::string name;
  bool points = false;  // errors in percentage points (rates), else relative
  std::vector<Row> rows;
  std::string note;  // printed under the summary (where the figures came from)
};

// The verdict rule on one row: bench::judge on its error (the part above 0 when one-sided).
void judge(Row& r) {
  if (!r.error) return;  // set by the group
  const double e = r.one_sided ? std::max(*r.error, 0.0) : *r.error;
  r.verdict = bench::judge(e, r.tolerance, r.noise);
}

Row relative(std::string check, std::string source, double predicted, double held_to,
             double tolerance, const std::string& unit = "") {
  Row r;
  r.check = std::move(check);
  r.source = std::move(source);
  r.predicted = fmt::format("{:.6g}{}", predicted, unit);
  r.held_to = fmt::format("{:.6g}{}", held_to, unit);
  r.error = predicted / held_to - 1;
  r.tolerance = tolerance;
  judge(r);
  return r;
}

// ----- the simulator ---------------------------------------------------------------------------

Schedule lowered(const Schedule& compute_only) {
  auto low = lower(compute_only);
  TP_CHECK(low.ok(), low.status().to_string());
  return std::move(low).value();
}

Schedule generated(const std::string& name, int32_t p, int32_t m, int32_t v) {
  GeneratorOptions o;
  o.ranks = p;
  o.microbatches = m;
  o.chunks = v;
  auto s = generate_schedule(name, o);
  TP_CHECK(s.ok(), s.status().to_string());
  return lowered(*s);
}

SimResult simulated(const Schedule& low, const CostModel& c) {
  SimOptions o;
  o.record_timeline = false;
  auto r = simulate(low, c, o);
  TP_CHECK(r.ok(), r.status().to_string());
  return std::move(r).value();
}

CostModel uniform(int32_t p, int32_t stages, double f, double i, double w) {
  UniformCosts u;
  u.f = f;
  u.i = i;
  u.w = w;
  return uniform_cost_model(u, p, stages);
}

// The automatic schedules at the paper's settings, built once each, with the paper's memory model
// and the span objective (zb_paper_problem).
class PaperBuilds {
 public:
  const Schedule& get(const testutil::ZbPaperSetting& s, const std::string& name) {
    const std::string key = fmt::format("{} {} {} {}", s.model, s.p, s.m, name);
    auto it = built_.find(key);
    if (it != built_.end()) return it->second;
    auto [costs, o] = testutil::zb_paper_problem(s, name);
    o.objective = zb_objective_for(optimizer_post_validated(Engine::kZb, false));
    auto b = build_auto_schedule(name, s.p, s.m, costs, o);
    TP_CHECK(b.ok(), b.status().to_string());
    return built_.emplace(key, lowered(*b)).first->second;
  }

 private:
  std::map<std::string, Schedule> built_;
};

// ----- the groups ------------------------------------------------------------------------------

Group table4(double tolerance) {
  Group g{"table4", false, {}, ""};
  const std::string source = "ZB paper Table 4 (REFERENCE.md 5)";
  for (const testutil::Table4Row& t : testutil::kZbPaperTable4) {
    const Result<testutil::Table4Prediction> p = testutil::predict_table4(t);
    TP_CHECK(p.ok(), p.status().to_string());
    for (const testutil::Table4Compared& c : testutil::table4_compared(t, p->full)) {
      const std::string what =
          c.name == std::string_view("1F1B-I") ? fmt::format("1F1B-I v={}", t.v) : c.name;
      Row r = relative(fmt::format("{} p={} m={}: {} / 1F1B", t.model, t.p, t.m, what), source,
                       c.predicted, c.measured, tolerance, "x");
      r.predicted = fmt::format("{:.3f}x", c.predicted);
      r.held_to = fmt::format("{:.3f}x ({:.2f} / {:.2f})", c.measured, c.throughput, t.one_f_one_b);
      g.rows.push_back(r);
    }
  }
  g.note = fmt::format(
      "table4: predicted = 1F1B's period / the schedule's, from the paper's profiled costs and "
      "the step's costs besides the pipeline (tests/testutil/table4.h, what table4_test "
      "asserts); published = the measured throughput ratio (printed to two decimals: about 1% "
      "of rounding); tolerance {:.0f}%",
      100 * tolerance);
  return g;
}

Group zb_rates(PaperBuilds& builds) {
  Group g{"zb-rates", true, {}, ""};
  for (const testutil::ZbPaperSetting& s : testutil::zb_paper_settings()) {
    for (const std::string name : {"zb-1p", "zb-2p", "zb-v-auto"}) {
      const double paper = testutil::zb_paper_rate(s, name);
      if (paper < 0) continue;
      const CostModel costs = testutil::zb_paper_problem(s, name).first;
      const double ours = simulated(builds.get(s, name), costs).span_bubble_ratio;
      Row r;
      r.check = fmt::format("{} p={} m={}: {} span bubble", s.model, s.p, s.m, name);
      r.source = name == "zb-v-auto" ? "ZB repo mem2bubble.npy" : "ZB repo efficiency.py";
      r.predicted = fmt::format("{:.2f}%", 100 * ours);
      r.held_to = fmt::format("{:.2f}%", 100 * paper);
      r.error = 100 * (ours - paper);
      r.tolerance = 0.005;  // half a unit of the 4 decimals published, in points
      r.one_sided = true;
      judge(r);
      g.rows.push_back(r);
    }
  }
  g.note =
      "zb-rates: error in percentage points, ours - published; one-sided (a lower bubble "
      "passes), tolerance half a unit of the published 4th decimal";
  return g;
}

Group reference() {
  Group g{"reference", false, {}, ""};
  constexpr double kExact = 1e-9;
  const std::string s2 = "REFERENCE.md 2";
  // Section 2: p = 4, m = 8, F = I = W = 1, B = 2, no communication.
  for (const testutil::ReferenceVector& v : testutil::reference_vectors()) {
    const Schedule low = generated(v.name, 4, 8, v.v);
    const SimResult r = simulated(low, uniform(4, low.num_stages, 1, 1, 1));
    const std::string what =
        fmt::format("{}{} p=4 m=8", v.name, v.v > 1 ? fmt::format(" v={}", v.v) : "");
    g.rows.push_back(relative(what + ": makespan", s2, r.makespan, v.makespan, kExact));
    if (v.bubble_printed) {
      // Printed to one decimal: held to half a unit of it.
      g.rows.push_back(relative(what + ": bubble", s2, 100 * r.bubble_ratio, v.bubble_percent,
                                0.05 / v.bubble_percent, "%"));
      g.rows.back().predicted = fmt::format("{:.2f}%", 100 * r.bubble_ratio);
    }
    if (v.busy_span > 0) {
      g.rows.push_back(
          relative(what + ": busy span (first F to last W)", s2, r.max_span, v.busy_span, kExact));
    }
    std::string ours, theirs;
    double worst = 0;
    for (size_t k = 0; k < v.peak.size(); ++k) {
      const double e = r.ranks[k].peak_activations / v.peak[k] - 1;
      if (std::fabs(e) > std::fabs(worst)) worst = e;
      ours += fmt::format("{}{:g}", k ? " " : "", r.ranks[k].peak_activations);
      theirs += fmt::format("{}{:g}", k ? " " : "", v.peak[k]);
    }
    Row peak = relative(what + ": peak activations per rank", s2, 1, 1, kExact);
    peak.predicted = ours;
    peak.held_to = theirs;
    peak.error = worst;
    judge(peak);
    g.rows.push_back(peak);
  }
  // Sections 1 and 3: closed forms at p = 8, m = 32 (F = I = W = 1 unless named).
  const int32_t p = 8, m = 32;
  const std::string s1 = "REFERENCE.md 1", s3 = "REFERENCE.md 3";
  const std::string at = fmt::format("p={} m={}", p, m);
  auto run = [&](const std::string& name, int32_t v, double f = 1, double i = 1, double w = 1) {
    const Schedule low = generated(name, p, m, v);
    return simulated(low, uniform(p, low.num_stages, f, i, w));
  };
  for (const char* name : {"gpipe", "1f1b"}) {
    g.rows.push_back(relative(fmt::format("{} {}: makespan (m+p-1)(F+B)", name, at), s3,
                              run(name, 1).makespan, (m + p - 1) * 3.0, kExact));
  }
  g.rows.push_back(relative(fmt::format("gpipe {}: bubble (p-1)/(m+p-1)", at), s1,
                            100 * run("gpipe", 1).bubble_ratio, 100.0 * (p - 1) / (m + p - 1),
                            kExact, "%"));
  for (const auto& [name, v] :
       {std::pair<const char*, int32_t>{"interleaved", 2}, {"interleaved", 4}, {"looped-bfs", 2}}) {
    g.rows.push_back(
        relative(fmt::format("{} v={} {}: makespan m(F+B) + (p-1)(F+B)/v", name, v, at), s3,
                 run(name, v).makespan, m * 3.0 + (p - 1) * 3.0 / v, kExact));
  }
  g.rows.push_back(
      relative(fmt::format("zb-h1 {} F=2 I=3 W=1: makespan m(F+I+W) + (p-1)(F+I-W)", at), s3,
               run("zb-h1", 1, 2, 3, 1).makespan, m * 6.0 + (p - 1) * 4.0, kExact));
  g.rows.push_back(relative(fmt::format("zb-h2 {}: span m(F+I+W), bubble (p-1)(F+I-2W) = 0", at),
                            s3, run("zb-h2", 1).max_span, 3.0 * m, kExact));
  g.rows.push_back(relative(fmt::format("zb-v {}: span m(F+I+W), no gap inside a rank", at), s1,
                            run("zb-v", 2).max_span, 3.0 * m, kExact));
  // Memory (section 1), whole-rank microbatch activations.
  auto peaks = [&](const std::string& check, const SimResult& r, auto want) {
    std::string ours, theirs;
    double worst = 0;
    for (int32_t k = 0; k < p; ++k) {
      const double e = r.ranks[k].peak_activations / want(k) - 1;
      if (std::fabs(e) > std::fabs(worst)) worst = e;
      ours += fmt::format("{}{:g}", k ? " " : "", r.ranks[k].peak_activations);
      theirs += fmt::format("{}{:g}", k ? " " : "", want(k));
    }
    Row row = relative(check, s1, 1, 1, kExact);
    row.predicted = ours;
    row.held_to = theirs;
    row.error = worst;
    judge(row);
    g.rows.push_back(row);
  };
  peaks(fmt::format("1f1b {}: peak min(p-r, m)", at), run("1f1b", 1),
        [&](int32_t r) { return double(std::min(p - r, m)); });
  peaks(fmt::format("zb-h1 {}: peak p", at), run("zb-h1", 1), [&](int32_t) { return double(p); });
  peaks(fmt::format("zb-h2 {}: peak 2p-1", at), run("zb-h2", 1),
        [&](int32_t) { return 2.0 * p - 1; });
  peaks(fmt::format("gpipe {}: peak m", at), run("gpipe", 1), [&](int32_t) { return double(m); });
  g.rows.push_back(relative(fmt::format("interleaved v=2 {}: rank 0 peak p(1 + (p-1)/(pv))", at),
                            s1, run("interleaved", 2).ranks[0].peak_activations,
                            p * (1 + (p - 1.0) / (p * 2)), kExact));
  // Section 3: the zero-bubble paper's FLOPs and memory per GPT layer, through --model's costs.
  GptCostConfig gpt;
  gpt.layers = 1;
  gpt.hidden = 1024;
  gpt.heads = 16;
  gpt.seq = 1024;
  gpt.flops = 1;  // times in FLOPs
  auto layer = gpt_cost_model(gpt, 1, 1);
  TP_CHECK(layer.ok(), layer.status().to_string());
  const StageCost& c = layer->stage(0);
  const double h = 1024, s = 1024, a = 16, sbh = s * h;
  const std::string shape = "GPT layer h=1024 s=1024 a=16 b=1";
  g.rows.push_back(
      relative(shape + ": F FLOPs sbh(24h+4s)", s3, c.f, sbh * (24 * h + 4 * s), kExact));
  g.rows.push_back(
      relative(shape + ": I FLOPs sbh(24h+8s)", s3, c.i, sbh * (24 * h + 8 * s), kExact));
  g.rows.push_back(relative(shape + ": W FLOPs sbh(24h)", s3, c.w, sbh * 24 * h, kExact));
  g.rows.push_back(relative(shape + ": share held until W 32h/(34h+5as)", s3,
                            c.act_after_i_bytes / c.act_bytes, 32 * h / (34 * h + 5 * a * s),
                            kExact));
  g.note =
      "reference: the simulator on uniform costs (F = I = W = 1, B = 2 unless named), no "
      "communication; exact, or half a unit of the printed decimal";
  return g;
}

// A bench's --json file whose measured figures are judged against its calibration's identical
// runs (plan_check_bench, bench/exec/shared_cores_bench.py): the object, its tolerance, the
// calibration's steps and their spread (the noise). `writer` names the bench in errors.
struct JudgedFile {
  std::string path, writer;
  json j;
  double tolerance = 0;
  std::vector<double> calibration;
  std::optional<double> noise;

  // One line naming the file, what is wrong and where a right one comes from.
  Status bad(const std::string& what) const {
    return Status::invalid_argument(
        fmt::format("{}: {}; hint: give the file `{} --json` writes", path, what, writer));
  }
  // A measured row of predicted and measured steps over the rounds, judged against the noise.
  Row row(std::string check, std::string source, const std::vector<double>& predicted,
          const std::vector<double>& measured, double error, bool held) const {
    Row r;
    r.check = std::move(check);
    r.source = std::move(source);
    r.predicted = fmt::format("{:.1f} ms", 1e3 * median(predicted));
    r.held_to = fmt::format("{:.1f} ms", 1e3 * median(measured));
    r.error = error;
    r.tolerance = tolerance;
    r.measured = true;
    r.noise = noise;
    r.held = held;
    judge(r);
    return r;
  }
  // The group's note: where its noise comes from and the machine it was recorded on.
  std::string note(const std::string& group) const {
    return fmt::format(
        "{}: noise = the calibration's identical runs ({} rounds: {}); recorded on {}", group,
        calibration.size(),
        noise ? fmt::format("spread {:.1f}%", 100 * *noise) : std::string("unknown"),
        j.value("machine", std::string("a machine not named")));
  }
};

// Reads `path` as JudgedFile: a JSON object holding "tolerance", "calibration_step_s" (each step
// above 0) and `keys`.
Result<JudgedFile> read_judged_file(const std::string& path, const std::string& writer,
                                    std::initializer_list<const char*> keys) {
  JudgedFile f{path, writer, {}, 0, {}, std::nullopt};
  const Result<std::string> text = read_file(path);
  if (!text.ok()) return text.status();
  f.j = json::parse(*text, nullptr, false);
  if (f.j.is_discarded() || !f.j.is_object()) return f.bad("not JSON");
  for (const char* key : {"tolerance", "calibration_step_s"}) {
    if (!f.j.contains(key)) return f.bad(fmt::format("no \"{}\"", key));
  }
  for (const char* key : keys) {
    if (!f.j.contains(key)) return f.bad(fmt::format("no \"{}\"", key));
  }
  try {
    f.tolerance = f.j.at("tolerance").get<double>();
    f.calibration = f.j.at("calibration_step_s").get<std::vector<double>>();
  } catch (const json::exception& e) {
    return f.bad(e.what());
  }
  for (double x : f.calibration) {
    if (!(x > 0)) return f.bad(fmt::format("a calibration step of {} s", x));
  }
  f.noise = bench::spread(f.calibration);
  return f;
}

// The plan group from a plan_check_bench --json file.
Result<Group> plan_group(const std::string& path, const std::string& source) {
  TP_ASSIGN_OR_RETURN(const JudgedFile f,
                      read_judged_file(path, "plan_check_bench", {"candidates", "pairs_wrong"}));
  Group g{"plan", false, {}, ""};
  try {
    for (const json& c : f.j.at("candidates")) {
      const std::vector<double> predicted = c.at("predicted_s").get<std::vector<double>>();
      const std::vector<double> measured = c.at("measured_s").get<std::vector<double>>();
      if (predicted.empty() || measured.empty()) return f.bad("a candidate without rounds");
      g.rows.push_back(f.row(fmt::format("plan: {} ({})", c.at("candidate").get<std::string>(),
                                         c.at("role").get<std::string>()),
                             source, predicted, measured, c.at("error").get<double>(),
                             c.at("held").get<bool>()));
    }
    const int judged = f.j.value("pairs_judged", 0), wrong = f.j.at("pairs_wrong").get<int>();
    Row ranking;
    ranking.check = "plan: ranking, pairs told apart beyond their noise";
    ranking.source = source;
    ranking.predicted = "the plan's order";
    ranking.held_to = fmt::format("{} of {} pairs agree", judged - wrong, judged);
    ranking.error = std::nullopt;
    ranking.measured = true;
    ranking.noise = f.noise;
    ranking.verdict = wrong == 0 ? bench::Verdict::kPass : bench::Verdict::kFail;
    g.rows.push_back(ranking);
    g.note = f.note("plan");
    if (const std::string why = bench::could_not_judge_reason(
            f.noise, f.tolerance,
            f.noise ? "rerun plan_check_bench on a quieter machine (nothing else running)"
                    : "rerun plan_check_bench with --rounds 3 or more");
        !why.empty()) {
      g.note += "\nplan: the predictions could not be judged: " + why;
    }
  } catch (const json::exception& e) {
    return f.bad(e.what());
  }
  return g;
}

// The shared-cores group from a bench/exec/shared_cores_bench.py --json file.
Result<Group> shared_cores_group(const std::string& path) {
  TP_ASSIGN_OR_RETURN(const JudgedFile f, read_judged_file(path, "shared_cores_bench.py",
                                                           {"schedules", "pp", "cores"}));
  Group g{"shared-cores", false, {}, ""};
  try {
    const int pp = f.j.at("pp").get<int>(), cores = f.j.at("cores").get<int>();
    for (const json& s : f.j.at("schedules")) {
      const std::vector<double> measured = s.at("measured_s").get<std::vector<double>>();
      if (measured.empty()) return f.bad("a schedule without rounds");
      // The plan with the cores shared is held; with a core per rank, printed beside it.
      for (const auto& [key, err, what, held] :
           {std::tuple{"shared_s", "error_shared", "cores shared", true},
            std::tuple{"alone_s", "error_alone", "a core per rank", false}}) {
        g.rows.push_back(f.row(fmt::format("shared cores: {} p={} on {} cores, plan with {}",
                                           s.at("schedule").get<std::string>(), pp, cores, what),
                               "shared_cores_bench, " + path, s.at(key).get<std::vector<double>>(),
                               measured, s.at(err).get<double>(), held));
      }
    }
    g.note = f.note("shared-cores");
  } catch (const json::exception& e) {
    return f.bad(e.what());
  }
  return g;
}

// Runs plan_check_bench --json (the same code as its own check) and reads its figures.
Result<Group> run_plan_check(const std::string& args) {
  const std::string bin = std::string(TP_BINARY_DIR) + "/bench/exec/plan_check_bench";
  if (access(bin.c_str(), X_OK) != 0) {
    return Status::not_found(
        fmt::format("{} is not built; hint: ninja -C build plan_check_bench", bin));
  }
  char tmpl[] = "/tmp/tp-checks-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) return Status::io_error("cannot make a directory under /tmp");
  const std::string dir = tmpl;
  const std::string cmd =
      fmt::format("{} --json {}/plan_check.json {} > {}/plan_check.log 2>&1", bin, dir, args, dir);
  std::printf("plan: %s\n", cmd.c_str());
  std::fflush(stdout);
  const int rc = std::system(cmd.c_str());
  (void)rc;  // its verdict is re-derived from its figures; a run that failed leaves no JSON
  Result<Group> g = plan_group(dir + "/plan_check.json", "plan_check_bench, this machine");
  if (!g.ok()) {
    return Status::failed_precondition(
        fmt::format("plan_check_bench left no figures; see {}/plan_check.log", dir));
  }
  g->note += fmt::format("\nplan: plan_check_bench's output in {}/plan_check.log", dir);
  return g;
}

// ----- the table -------------------------------------------------------------------------------

std::string cell(const std::string& text) {
  std::string out;
  for (char ch : text) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string error_text(const Group& g, const Row& r) {
  if (!r.error) return "-";
  return g.points ? fmt::format("{:+.3f} pts", *r.error) : fmt::format("{:+.2f}%", 100 * *r.error);
}

std::string tolerance_text(const Group& g, const Row& r) {
  if (!r.error) return "-";
  const std::string sign = r.one_sided ? "<= +" : "";
  if (g.points) return fmt::format("{}{:.3f} pts", sign, r.tolerance);
  if (r.tolerance <= 1e-9) return "exact";
  return fmt::format("{}{:.2f}%", sign, 100 * r.tolerance);
}

std::string noise_text(const Row& r) {
  if (!r.measured) return "-";
  if (!r.noise) return "unknown";
  return fmt::format("{:.1f}%", 100 * *r.noise);
}

std::string verdict_text(const Row& r) {
  return r.held ? std::string(bench::verdict_name(r.verdict)) : "not held";
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "Every check the project holds in one table: the zero-bubble paper's Table 4 ratios, the "
      "authors' published bubble rates, REFERENCE.md's worked numbers and closed forms and, with "
      "--plan or --plan-json, the planner's 2-rank candidates measured on this machine; each "
      "with its prediction, error, tolerance, noise and verdict. Exits 0 when every judged "
      "check passes, 1 when one fails, 3 when none fails and one could not be judged (its "
      "identical runs spread more than its tolerance).",
      "checks_bench");
  std::vector<std::string> groups = {"table4", "zb-rates", "reference"};
  bool plan = false;
  std::string plan_args, plan_json, shared_cores_json;
  double table4_tolerance = 0.05;
  flags.option("--group", groups, "the computed groups to print")
      .delimiter(',')
      .one_of({"table4", "zb-rates", "reference"})
      .show_default();
  flags.flag("--plan", plan,
             "also run plan_check_bench (real training runs on this machine, about 100 s)");
  flags.option("--plan-args", plan_args, "flags for plan_check_bench, e.g. \"--rounds 3\"");
  flags
      .option("--plan-json", plan_json,
              "also the plan group from this file (plan_check_bench --json of an earlier run)")
      .excludes("--plan");
  flags.option("--shared-cores-json", shared_cores_json,
               "also the shared-cores group from this file (bench/exec/shared_cores_bench.py "
               "--json of an earlier run)");
  flags
      .option("--table4-tolerance", table4_tolerance,
              "largest relative error of a Table 4 ratio (the authors' own prediction lands "
              "within 2-4%, the printed decimals carry about 1%)")
      .show_default()
      .range(0.0, 1.0);
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  const auto t0 = std::chrono::steady_clock::now();
  auto wanted = [&](const std::string& name) {
    return std::find(groups.begin(), groups.end(), name) != groups.end();
  };

  std::printf("checks_bench: %s\n", bench::machine_line().c_str());
  std::fflush(stdout);
  std::vector<Group> out;
  PaperBuilds builds;
  if (wanted("table4")) out.push_back(table4(table4_tolerance));
  if (wanted("zb-rates")) out.push_back(zb_rates(builds));
  if (wanted("reference")) out.push_back(reference());
  if (plan || !plan_json.empty()) {
    Result<Group> g = plan ? run_plan_check(plan_args)
                           : plan_group(plan_json, "plan_check_bench run in " + plan_json);
    if (!g.ok()) {
      std::fprintf(stderr, "checks_bench: %s\n", g.status().message().c_str());
      return bench::kExitFail;
    }
    out.push_back(std::move(g).value());
  }
  if (!shared_cores_json.empty()) {
    Result<Group> g = shared_cores_group(shared_cores_json);
    if (!g.ok()) {
      std::fprintf(stderr, "checks_bench: %s\n", g.status().message().c_str());
      return bench::kExitFail;
    }
    out.push_back(std::move(g).value());
  }

  std::printf(
      "\n| group | check | source | predicted | published / measured | error | tolerance | "
      "noise | verdict |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Group& g : out) {
    for (const Row& r : g.rows) {
      std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.name.c_str(),
                  cell(r.check).c_str(), cell(r.source).c_str(), cell(r.predicted).c_str(),
                  cell(r.held_to).c_str(), error_text(g, r).c_str(), tolerance_text(g, r).c_str(),
                  noise_text(r).c_str(), verdict_text(r).c_str());
    }
  }

  std::printf(
      "\n| group | checks | pass | fail | could not judge | median error | worst error | "
      "verdict |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  bench::Verdict all = bench::Verdict::kPass;
  std::string not_passing;  // the groups that did not pass, each with its verdict
  for (const Group& g : out) {
    bench::Verdict verdict = bench::Verdict::kPass;
    int counts[3] = {0, 0, 0};
    // Median and worst: of |error|, or of the signed error where a row is one-sided (there the
    // worst is the largest excess over the published, and a negative one is better).
    std::vector<double> errors;
    std::optional<double> worst;
    for (const Row& r : g.rows) {
      if (!r.held) continue;
      verdict = bench::combine(verdict, r.verdict);
      ++counts[static_cast<int>(r.verdict)];
      if (!r.error) continue;
      const double e = *r.error;
      errors.push_back(r.one_sided ? e : std::fabs(e));
      const bool worse = !worst || (r.one_sided ? e > *worst : std::fabs(e) > std::fabs(*worst));
      if (worse) worst = e;
    }
    const auto err = [&](double e) {
      return g.points ? fmt::format("{:.3f} pts", e) : fmt::format("{:.2f}%", 100 * e);
    };
    const std::string median_error = errors.empty() ? "-" : err(median(errors));
    const std::string worst_error = !worst ? "-" : (*worst >= 0 ? "+" : "") + err(*worst);
    std::printf("| %s | %zu | %d | %d | %d | %s | %s | %s |\n", g.name.c_str(), g.rows.size(),
                counts[0], counts[1], counts[2], median_error.c_str(), worst_error.c_str(),
                std::string(bench::verdict_name(verdict)).c_str());
    all = bench::combine(all, verdict);
    if (verdict != bench::Verdict::kPass) {
      not_passing += fmt::format("{}{} ({})", not_passing.empty() ? "" : ", ", g.name,
                                 bench::verdict_name(verdict));
    }
  }
  std::printf("\n");
  for (const Group& g : out) {
    if (!g.note.empty()) std::printf("%s\n", g.note.c_str());
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::string names;
  for (const Group& g : out) names += (names.empty() ? "" : ", ") + g.name;
  // The groups run, then the ones that did not pass: "FAIL: a, b, c; not passing: a (FAIL)".
  if (!not_passing.empty()) names += "; not passing: " + not_passing;
  std::printf("\n%s: %s; %.1f s\n", std::string(bench::verdict_name(all)).c_str(), names.c_str(),
              seconds);
  return bench::exit_code(all);
}
