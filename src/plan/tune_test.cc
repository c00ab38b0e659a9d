// tune (tune.h): a measured module table through the planner. The head-heavy split counts the
// head (against a brute force over every split), the first module stays on stage 0, the fit to a
// run's stages, PyTorch's first stage in the costs, keeping a good current setup, bad input.
#include "tightpipe/tune.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tightpipe {
namespace {

using json = nlohmann::json;

// A table: module 0 costs `first`, the last `last`, `blocks` blocks of `block` in between (f = i
// = w = the value each).
std::string table(double first, int blocks, double block, double last) {
  json layers = json::array();
  auto entry = [](const std::string& name, double t) {
    return json{{"name", name},
                {"f", t},
                {"i", t},
                {"w", t},
                {"act_bytes", 100},
                {"act_after_i_bytes", 100},
                {"input_bytes", 10},
                {"output_bytes", 10},
                {"param_bytes", 1000},
                {"grad_bytes", 1000},
                {"optimizer_bytes", 2000}};
  };
  layers.push_back(entry("tok_embeddings", first));
  for (int k = 0; k < blocks; ++k) layers.push_back(entry("layers." + std::to_string(k), block));
  layers.push_back(entry("output", last));
  return json{{"format", "tightpipe-layers/1"},
              {"time_unit", "s"},
              {"microbatch_input_shape", {2, 64}},
              {"layers", layers}}
      .dump();
}

MeasuredModules parse_ok(const std::string& text) {
  auto m = parse_measured_modules(text, "layers.json");
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

// Options for `table_text` at p = `pp`, m microbatches, searching `schedules` (empty: every one).
TuneOptions options(const std::string& table_text, int32_t pp, int32_t microbatches,
                    std::vector<std::string> schedules = {}) {
  TuneOptions o;
  o.modules = parse_ok(table_text);
  o.pp = pp;
  o.microbatches = microbatches;
  o.schedules = std::move(schedules);
  return o;
}

TEST(Tune, HeadHeavyModelSplitsTheHeadsStageShorterAndBeatsTheEvenSplit) {
  // 12 blocks and a head of 5 blocks (GPT-2 small's proportions): the even split's last stage
  // holds 6 blocks + the head.
  TuneOptions o = options(table(0.01, 12, 1.0, 5.0), 2, 8, {"1f1b"});
  o.current = TuneCurrent{{7, 7}, "1f1b", 1, std::nullopt};
  auto r = tune(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TuneSetup& best = r->candidates.at(r->recommended);
  // min over splits of max(stage F+B): stage 0 = embedding + k blocks, stage 1 = 12-k + head:
  // 3(0.01 + k) vs 3(17 - k): k = 8 (24.03 / 27) beats 9 (27.03 / 24).
  ASSERT_EQ(best.module_names.size(), 2u);
  EXPECT_EQ(best.module_names[0].front(), "tok_embeddings");
  EXPECT_EQ(best.module_names[1].back(), "output");
  EXPECT_EQ(best.module_names[0].size(), 9u) << "tok_embeddings + 8 blocks";
  EXPECT_TRUE(r->change);
  // 1F1B at p = 2 without messages: m x the slower stage's F + B plus the other stage's once.
  // Now: stage 1 = 6 blocks + head = 33, stage 0 = 6 blocks + embedding = 18.03.
  EXPECT_NEAR(r->current->step_s, 8 * 33 + 18.03, 1e-9);
  // Tuned: 8 blocks on stage 0 (24.03), 4 + head on stage 1 (27).
  EXPECT_NEAR(best.step_s, 8 * 27 + 24.03, 1e-9);
}

// Ranks that share one core (docs/cost_model.md "Shared cores"): whatever the split and the
// schedule, the step is the model's whole work (8 microbatches x 3 x (0.01 + 12 + 5)) run back
// to back, so tune keeps the current setup; the prediction says the sharing it assumed.
TEST(Tune, OnOneSharedCoreNoSplitOrScheduleGains) {
  TuneOptions o = options(table(0.01, 12, 1.0, 5.0), 2, 8);
  o.current = TuneCurrent{{7, 7}, "1f1b", 1, std::nullopt};
  o.core_sharing.cores = 1;
  auto r = tune(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const double work = 8 * 3 * (0.01 + 12 + 5);
  EXPECT_NEAR(r->current->step_s, work, 1e-9 * work);
  for (const TuneSetup& c : r->candidates) EXPECT_NEAR(c.step_s, work, 1e-9 * work) << c.schedule;
  EXPECT_FALSE(r->change) << r->why;
  EXPECT_EQ(r->current->sim.core_sharing.cores, 1);
}

TEST(Tune, PyTorchsFirstStageRunsItsWholeBackwardInW) {
  TuneOptions o = options(table(0.5, 2, 1.0, 1.0), 2, 4, {"zb-h1"});
  auto r = tune(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const CostModel& c = *r->candidates.front().costs;
  EXPECT_EQ(c.stage(0).i, 0.0);
  EXPECT_GT(c.stage(0).w, 0.0);
  EXPECT_GT(c.stage(1).i, 0.0);
}

TEST(Tune, HostTimeIsAFixedPartPerKindPlusAPartPerModuleOfTheStage) {
  // Stage 0: embedding + 2 blocks (3 modules), stage 1: 1 block + head (2 modules).
  TuneOptions o = options(table(1.0, 3, 1.0, 1.0), 2, 4, {"zb-h1"});
  o.current = TuneCurrent{{3, 2}, "zb-h1", 1, std::nullopt};
  o.host_time = RuntimeHostTime{.f = 0.1,
                                .i = 0.2,
                                .w = 0.3,
                                .b = 0.4,
                                .f_module = 0.01,
                                .i_module = 0.02,
                                .w_module = 0.03,
                                .b_module = 0.04};
  auto r = tune(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const CostModel& c = *r->current->costs;
  // Stage 0's I runs nothing and its W the whole backward (i 3 + w 3), each action still pays
  // its host time.
  EXPECT_DOUBLE_EQ(c.stage(0).f, 3.0 + 0.1 + 3 * 0.01);
  EXPECT_DOUBLE_EQ(c.stage(0).i, 0.2 + 3 * 0.02);
  EXPECT_DOUBLE_EQ(c.stage(0).w, 6.0 + 0.3 + 3 * 0.03);
  EXPECT_DOUBLE_EQ(c.stage(1).f, 2.0 + 0.1 + 2 * 0.01);
  EXPECT_DOUBLE_EQ(c.stage(1).i, 2.0 + 0.2 + 2 * 0.02);
  EXPECT_DOUBLE_EQ(c.stage(1).w, 2.0 + 0.3 + 2 * 0.03);
  EXPECT_DOUBLE_EQ(c.stage(1).b, 4.0 + 0.4 + 2 * 0.04);
  // The search prices its candidates with the same host time: the current split is a candidate.
  bool found = false;
  for (const TuneSetup& t : r->candidates) {
    if (t.schedule == "zb-h1" && t.module_names.size() == 2 && t.module_names[0].size() == 3) {
      found = true;
      EXPECT_DOUBLE_EQ(t.step_s, r->current->step_s);
    }
  }
  EXPECT_TRUE(found);
  // One time for every kind (--action-overhead-us) is the uniform form.
  const RuntimeHostTime u = RuntimeHostTime::uniform(0.5);
  EXPECT_EQ(u.f + u.i + u.w + u.b, 2.0);
  EXPECT_FALSE(u.per_module());
}

TEST(Tune, HostTimeFlagParsesMicrosecondsAndNamesBadKeys) {
  auto h = parse_runtime_host_time_us("f=480, b=620,w_module=340", "--host-time-us");
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_DOUBLE_EQ(h->f, 480e-6);
  EXPECT_DOUBLE_EQ(h->b, 620e-6);
  EXPECT_DOUBLE_EQ(h->w_module, 340e-6);
  EXPECT_EQ(h->i, 0.0);
  for (auto [text, words] :
       {std::pair{"f=1,g=2", "unknown key 'g'"}, std::pair{"f=-1", "negative value -1"},
        std::pair{"f=2e6", "a second or more"}, std::pair{"f=1,f=2", "given twice"},
        std::pair{"f", "not key=value"}}) {
    auto bad = parse_runtime_host_time_us(text, "--host-time-us");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find("--host-time-us"), std::string::npos);
    EXPECT_NE(bad.status().message().find(words), std::string::npos) << bad.status().message();
  }
}

TEST(Tune, KeepsTheCurrentSetupWhenNothingGainsEnough) {
  TuneOptions o = options(table(1e-6, 8, 1.0, 1e-6), 2, 64);
  o.current = TuneCurrent{{5, 5}, "1f1b", 1, std::nullopt};
  auto r = tune(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_FALSE(r->change) << r->why;
  EXPECT_NE(r->why.find("1F1B is enough"), std::string::npos) << r->why;
}

TEST(Tune, FitScalesEachStagesModulesToTheRun) {
  const MeasuredModules probe = parse_ok(table(1.0, 2, 1.0, 1.0));  // 4 modules, 2 per stage
  // The run measured stage 0's F at 4 (probe 2) and stage 1's backward at 8 (probe 4).
  StageTimes run{{4.0, 2.0}, {0.0, 4.0}, {4.0, 4.0}};
  auto fit = fit_modules_to_run(probe, {2, 2}, run);
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_DOUBLE_EQ(fit->modules[0].cost.f, 2.0);
  EXPECT_DOUBLE_EQ(fit->modules[2].cost.f, 1.0);
  // Stage 0: the run's whole backward (i 0 + w 4) against the probe's 4: unchanged.
  EXPECT_DOUBLE_EQ(fit->modules[1].cost.i + fit->modules[1].cost.w, 2.0);
  // Stage 1: 8 against 4: doubled, the probe's I : W share kept.
  EXPECT_DOUBLE_EQ(fit->modules[3].cost.i, 2.0);
  EXPECT_DOUBLE_EQ(fit->modules[3].cost.w, 2.0);
  EXPECT_FALSE(fit_modules_to_run(probe, {3, 2}, run).ok());
  EXPECT_FALSE(fit_modules_to_run(probe, {1, 1, 2}, run).ok());
}

// measure_layers' b, the whole backward as one autograd pass, is the B of every whole-backward
// action and PyTorch's first stage's W; a table without it costs them i + w.
TEST(Tune, MeasuredWholeBackwardCostsBAndTheFirstStagesW) {
  json doc = json::parse(table(1.0, 2, 1.0, 1.0));  // i = w = 1 per module
  for (json& l : doc["layers"]) l["b"] = 1.8;       // one pass: cheaper than 2
  const MeasuredModules m = parse_ok(doc.dump());
  for (const ModuleCost& mc : m.modules) EXPECT_DOUBLE_EQ(mc.cost.b, 1.8) << mc.name;
  EXPECT_DOUBLE_EQ(parse_ok(table(1.0, 2, 1.0, 1.0)).modules[1].cost.b, 2.0);  // without b
  // PyTorch's runtime: stage 0 runs its whole backward in W (2 modules: 3.6), its I nothing.
  const CostModel two =
      cost_model_for_layout(module_layer_costs(m), {{1, 1, 0}, {0, 1, 1}}, "E,t|t,L");
  const CostModel torch = torch_runtime_costs(two);
  EXPECT_DOUBLE_EQ(torch.stage(0).w, 3.6);
  EXPECT_DOUBLE_EQ(torch.stage(0).i, 0.0);
  EXPECT_DOUBLE_EQ(torch.stage(1).b, 3.6);
  EXPECT_DOUBLE_EQ(torch.stage(1).i + torch.stage(1).w, 4.0);  // the split keeps i + w
  // A fused run's backward is held to the probe's b: stage 0 measured 7.2 against b 3.6 doubles
  // i, w and b; a split run's (stage 1: 8 against i + w 4) doubles them too.
  auto fit = fit_modules_to_run(m, {2, 2}, StageTimes{{2.0, 2.0}, {7.2, 4.0}, {}});
  ASSERT_TRUE(fit.ok()) << fit.status().message();
  EXPECT_DOUBLE_EQ(fit->modules[1].cost.b, 3.6);
  EXPECT_DOUBLE_EQ(fit->modules[1].cost.i, 2.0);
  auto split = fit_modules_to_run(m, {2, 2}, StageTimes{{2.0, 2.0}, {4.0, 4.0}, {4.0, 4.0}});
  ASSERT_TRUE(split.ok()) << split.status().message();
  EXPECT_DOUBLE_EQ(split->modules[3].cost.w, 2.0);
  EXPECT_DOUBLE_EQ(split->modules[3].cost.b, 3.6);
  doc["layers"][1]["b"] = -1;
  auto bad = parse_measured_modules(doc.dump(), "layers.json");
  ASSERT_FALSE(bad.ok());
  for (const char* part : {"layers.json", "layers[1]", "'b'"}) {
    EXPECT_NE(bad.status().message().find(part), std::string::npos) << bad.status().message();
  }
}

// Each rank's compute by kind of action (tune.json's "compute_s"): zb-h1 at p = 2, m = 4 on a
// table of f = i = w = 1 per module, 2 modules a stage. Stage 0 (PyTorch's first stage): F 2,
// I 0, W its whole backward 4 (no b measured: i + w); stage 1: F 2, I 2, W 2; four of each.
// The kinds add up to the simulated busy time (no optimizer), and the JSON carries them.
TEST(Tune, ComputeByKindCountsEachRanksActionsAndAddsUpToItsBusyTime) {
  TuneOptions o = options(table(1.0, 2, 1.0, 1.0), 2, 4, {"zb-h1"});
  o.current = TuneCurrent{{2, 2}, "zb-h1", 1, std::nullopt};
  auto r = tune(o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TuneSetup& cur = *r->current;
  const ComputeByKind k0 = compute_by_kind(cur, 0), k1 = compute_by_kind(cur, 1);
  EXPECT_DOUBLE_EQ(k0.f, 8.0);
  EXPECT_DOUBLE_EQ(k0.i, 0.0);
  EXPECT_DOUBLE_EQ(k0.w, 16.0);
  EXPECT_DOUBLE_EQ(k0.b, 0.0);
  EXPECT_DOUBLE_EQ(k1.f, 8.0);
  EXPECT_DOUBLE_EQ(k1.i, 8.0);
  EXPECT_DOUBLE_EQ(k1.w, 8.0);
  for (int32_t rank : {0, 1}) {
    const ComputeByKind k = compute_by_kind(cur, rank);
    EXPECT_NEAR(k.f + k.i + k.w + k.b, cur.sim.ranks[rank].busy, 1e-12) << rank;
  }
  // 1F1B's whole backward is B (stage 1) and W (stage 0).
  o.current = TuneCurrent{{2, 2}, "1f1b", 1, std::nullopt};
  auto f = tune(o);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_DOUBLE_EQ(compute_by_kind(*f->current, 1).b, 16.0);
  EXPECT_DOUBLE_EQ(compute_by_kind(*f->current, 1).i, 0.0);
  const json j = json::parse(tune_setup_json(*r, cur, "a.csv", "b.csv"));
  const json& ranks = j["prediction"]["ranks"];
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_DOUBLE_EQ(ranks[1]["compute_s"]["i"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(ranks[0]["compute_s"]["w"].get<double>(), 16.0);
}

TEST(Tune, ACpuTableMeasuredUnderTheDefaultMallocGetsANoteWithTheFix) {
  // measure_layers writes the allocator it ran under; page faults under glibc's default malloc
  // move with the heap's history (docs/torch.md section 7), so tune says how to measure without.
  auto notes = [](const std::string& device, const std::string& malloc_mode) {
    json doc = json::parse(table(0.5, 2, 1.0, 1.0));
    if (!device.empty()) doc["device"] = device;
    if (!malloc_mode.empty()) doc["malloc"] = malloc_mode;
    TuneOptions o = options(doc.dump(), 2, 4, {"1f1b"});
    auto r = tune(o);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? std::make_pair(r->notes, format_tune(*r))
                  : std::make_pair(std::vector<std::string>{}, std::string());
  };
  auto [def, text] = notes("cpu", "default");
  ASSERT_EQ(def.size(), 1u);
  EXPECT_NE(def[0].find("layers.json was measured under glibc's default malloc"), std::string::npos)
      << def[0];
  EXPECT_NE(def[0].find("steady_malloc()"), std::string::npos) << def[0];
  EXPECT_NE(text.find(def[0] + "\n"), std::string::npos) << "format_tune prints it:\n" << text;
  EXPECT_TRUE(notes("cpu", "steady").first.empty());
  EXPECT_TRUE(notes("cuda", "default").first.empty()) << "the GPU's allocator is PyTorch's own";
  EXPECT_TRUE(notes("", "").first.empty()) << "a table that does not say";
}

TEST(Tune, BadInputIsOneLineNamingIt) {
  auto expect_error = [](const Status& st, const std::string& words) {
    EXPECT_FALSE(st.ok());
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  };
  expect_error(parse_measured_modules("[", "l.json").status(), "l.json: not a JSON object");
  expect_error(parse_measured_modules(R"({"format": "x"})", "l.json").status(), "format 'x'");
  json one = json::parse(table(1, 0, 1, 1));
  one["layers"].erase(1);
  expect_error(parse_measured_modules(one.dump(), "l.json").status(), "at least two");
  json neg = json::parse(table(1, 1, 1, 1));
  neg["layers"][1]["f"] = -1;
  expect_error(parse_measured_modules(neg.dump(), "l.json").status(), "'f' is -1");
  json dup = json::parse(table(1, 1, 1, 1));
  dup["layers"][1]["name"] = "output";
  expect_error(parse_measured_modules(dup.dump(), "l.json").status(), "listed twice");
  json bad_malloc = json::parse(table(1, 1, 1, 1));
  bad_malloc["malloc"] = 1;
  expect_error(parse_measured_modules(bad_malloc.dump(), "l.json").status(),
               "l.json: 'malloc' is 1, not a string");

  TuneOptions o;
  o.modules = parse_ok(table(1, 2, 1, 1));
  o.microbatches = 4;
  o.pp = 5;
  expect_error(tune(o).status(), "cannot be split further");
  o.pp = 2;
  o.memory_limit_bytes = 100;
  expect_error(tune(o).status(), "no candidate fits it per rank: the smallest need is");
  o.memory_limit_bytes = 0;
  o.current = TuneCurrent{{1, 2}, "1f1b", 1, std::nullopt};
  expect_error(tune(o).status(), "--current-split 1,2: 3 modules");
  o.current = TuneCurrent{{1, 1, 2}, "1f1b", 1, std::nullopt};
  expect_error(tune(o).status(), "3 stages, but the current schedule (1f1b) has 2");
}

}  // namespace
}  // namespace tightpipe
