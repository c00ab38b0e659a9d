// Helpers of the data-parallel tests: a run's metrics and weights against a reference run's.
// Header-only (tests that link tp_exec).
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/model.h"

namespace tightpipe::testutil {

inline std::map<int64_t, nlohmann::json> read_metrics(const std::string& out) {
  std::map<int64_t, nlohmann::json> by_step;
  for (const auto& l : split(read_file(out + "/metrics.jsonl").value(), '\n')) {
    if (l.empty()) continue;
    auto j = nlohmann::json::parse(l);
    by_step[j["step"].get<int64_t>()] = j;
  }
  return by_step;
}

// Every parameter of the newest checkpoint under `root`, stage after stage: the stages of any
// split hold the model's parameters in the same order.
inline std::vector<float> weights(const std::string& root) {
  const std::string dir = nn::resolve_checkpoint(root).value().dir;
  const nn::Manifest man = nn::load_manifest(dir).value();
  std::vector<float> all;
  for (size_t s = 0; s < man.stages.size(); ++s) {
    nn::GptStage st(man.config, man.stages[s], 1);
    const auto loaded = nn::load_stage_checkpoint(nn::stage_checkpoint_path(dir, s), st);
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    all.insert(all.end(), st.params().begin(), st.params().end());
  }
  return all;
}

// ||a - b|| / ||b||.
inline double relative(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

// The losses, gradient norms (metrics.jsonl of `out`) and final weights (the newest checkpoint
// under `save`) of a run against those of a reference run: within 1e-6 relative.
inline void expect_trains_as(const std::string& out, const std::string& save,
                             const std::string& ref_out, const std::string& ref_save) {
  const auto mr = read_metrics(out), mf = read_metrics(ref_out);
  ASSERT_EQ(mr.size(), mf.size());
  for (const auto& [step, j] : mf) {
    SCOPED_TRACE(fmt::format("step {}", step));
    for (const char* k : {"loss", "grad_norm"}) {
      const double want = j[k].get<double>();
      EXPECT_NEAR(mr.at(step)[k].get<double>(), want, 1e-6 * std::fabs(want)) << k;
    }
  }
  const std::vector<float> w = weights(save);
  const std::vector<float> w1 = weights(ref_save);
  ASSERT_EQ(w.size(), w1.size());
  EXPECT_LT(relative(w, w1), 1e-6);
  EXPECT_NE(mf.begin()->second["loss"], mf.rbegin()->second["loss"]) << "nothing trained";
}

}  // namespace tightpipe::testutil
