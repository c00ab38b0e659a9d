// Test helpers for the data module: scratch directories, reading whole streams of batches.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/data.h"

namespace tightpipe::data_test {

// A fresh directory under the build tree named after the running test; removed on destruction.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(TP_BINARY_DIR) / "data_test_tmp" /
            (std::string(info->test_suite_name()) + "." + info->name());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!::testing::Test::HasFailure()) std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Deterministic pseudo-text of n bytes (printable, with newlines).
inline std::string make_text(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::string s(n, ' ');
  for (auto& c : s) {
    uint64_t r = rng.below(64);
    c = r == 0 ? '\n' : static_cast<char>('a' + r % 26);
  }
  return s;
}

// DataLoader::open(o), the test failing (and nullptr returned) when it does not open.
inline std::unique_ptr<DataLoader> open_ok(const DataOptions& o) {
  auto r = DataLoader::open(o);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? std::move(r).value() : nullptr;
}

// The tokens and targets of `n` batches, concatenated row by row as (T+1)-token rows.
inline std::vector<std::vector<int32_t>> take_rows(DataLoader& loader, int n) {
  std::vector<std::vector<int32_t>> rows;
  for (int i = 0; i < n; ++i) {
    Result<Batch> b = loader.next();
    if (!b.ok()) {
      ADD_FAILURE() << b.status().to_string();
      return rows;
    }
    const int32_t T = b->seq_length;
    for (int32_t r = 0; r < b->batch_size; ++r) {
      std::vector<int32_t> row(b->tokens.begin() + r * T, b->tokens.begin() + (r + 1) * T);
      row.push_back(b->targets[(r + 1) * T - 1]);
      for (int32_t t = 0; t + 1 < T; ++t) {
        EXPECT_EQ(b->targets[r * T + t], b->tokens[r * T + t + 1]) << "row " << r << " t " << t;
      }
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace tightpipe::data_test
