// A checkpoint's parallel.json (saved_data_parallel_size): what `train --load` compares with the
// run's data-parallel size. Absent: 1; a size: that size; anything else: Corruption naming it.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "exec/train_internal.h"
#include "run.h"

namespace tightpipe::train_internal {
namespace {

std::string dir_with(const std::string& text) {
  const std::string dir = testutil::make_temp_dir("parallel_file");
  std::ofstream(std::filesystem::path(dir) / kParallelFile) << text;
  return dir;
}

TEST(ParallelFile, AbsentIsOnePipelineAndASizeIsRead) {
  auto none = saved_data_parallel_size(testutil::make_temp_dir("parallel_file"));
  ASSERT_TRUE(none.ok()) << none.status().to_string();
  EXPECT_EQ(*none, 1);
  auto two = saved_data_parallel_size(dir_with("{\"data_parallel_size\": 2, \"pp\": 4}\n"));
  ASSERT_TRUE(two.ok()) << two.status().to_string();
  EXPECT_EQ(*two, 2);
}

TEST(ParallelFile, DamagedIsOneLineNamingTheFile) {
  for (const char* text : {"", "{", "[1]", "{\"data_parallel_size\": \"2\"}",
                           "{\"data_parallel_size\": 0}", "{\"data_parallel_size\": -3}",
                           "{\"data_parallel_size\": 2.5}", "{\"data_parallel_size\": 1e300}",
                           "{\"data_parallel_size\": 99999999999}", "{\"pp\": 2}"}) {
    SCOPED_TRACE(text);
    auto r = saved_data_parallel_size(dir_with(text));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
    EXPECT_NE(r.status().message().find(kParallelFile), std::string::npos);
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

}  // namespace
}  // namespace tightpipe::train_internal
