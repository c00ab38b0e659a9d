// report.html of GPU traces in headless Chromium: `tightpipe report`'s page for the two ranks of
// the 128-rank NCCL job and for the 2-rank data-parallel job renders its tables, bars and
// timeline without any console message, and the screenshot is not blank. Label: browser. Skips
// when Debian's `chromium` is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include <cstdio>

#include "browser.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"

namespace tightpipe {
namespace {

using testutil::count_occurrences;

const std::string kTraces = std::string(TP_SHARED_DIR) + "/data/traces/";

void render_and_check(const std::vector<std::string>& files, const std::string& tag) {
  const std::string chrome = testutil::chromium_binary();
  if (chrome.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  std::vector<std::string> paths;
  for (const auto& f : files) paths.push_back(kTraces + f);
  auto rep = build_gpu_trace_report(paths);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  const std::string dir = testutil::make_temp_dir("tp-gpuhtml-browser");
  ASSERT_TRUE(write_gpu_trace_report(*rep, dir + "/out").ok());
  const std::string html = dir + "/out/report.html";

  const std::string png = dir + "/shot.png";
  const auto run = testutil::render_headless(chrome, html, png, 1200, 1600);
  // Both runs exit 0 and log no console message (the page has no script).
  ASSERT_EQ(testutil::render_problem(run), "");

  // The rendered DOM: a usage row per rank and per step, a bar per rank, the timeline's row per
  // rank with its kernels, the cause rows; the escaped kernel names came back as text.
  const std::string& d = run.dom.out;
  const size_t ranks = rep->ranks.size();
  size_t steps = 0;
  for (const auto& r : rep->ranks) steps += r.steps.size();
  EXPECT_EQ(count_occurrences(d, "<tr class=\"whole\""), ranks);
  EXPECT_EQ(count_occurrences(d, "<tr class=\"step\""), steps);
  EXPECT_EQ(count_occurrences(d, "class=\"bar trace\""), ranks);
  EXPECT_GE(count_occurrences(d, "class=\"seg\""), 2 * ranks);
  EXPECT_EQ(count_occurrences(d, "class=\"rank\""), ranks);
  EXPECT_GT(count_occurrences(d, "class=\"ev\""), 100u * ranks);
  EXPECT_EQ(count_occurrences(d, "<tr class=\"cause\""), ranks);
  EXPECT_NE(d.find("worst step: rank"), std::string::npos);
  EXPECT_NE(d.find("&lt;float"), std::string::npos) << "templated kernel names, escaped";
  EXPECT_EQ(d.find("<script"), std::string::npos);

  const testutil::PngStats st = testutil::png_stats(png);
  ASSERT_EQ(st.width, 1200) << "not a PNG: " << png;
  EXPECT_GT(st.non_white, int64_t(st.width) * st.height / 20);
  EXPECT_GT(st.distinct_colors, 20);
  std::printf("%s: %s\n", tag.c_str(), testutil::png_summary(st).c_str());
  testutil::keep_copy_if_asked(png, "TP_GPU_REPORT_SCREENSHOT");
}

TEST(GpuHtmlBrowserTest, Dp128TwoRanksRenderInHeadlessChromium) {
  render_and_check({"dp128_rank0.json.gz", "dp128_rank1.json.gz"}, "dp128 rank 0+1");
}

TEST(GpuHtmlBrowserTest, Dp2RenderInHeadlessChromium) {
  render_and_check({"dp2_rank0.json.gz"}, "dp2 rank 0");
}

// The check above can fail: a page that logs to the console is caught.
TEST(GpuHtmlBrowserTest, AConsoleMessageIsCaught) {
  const std::string chrome = testutil::chromium_binary();
  if (chrome.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  const std::string dir = testutil::make_temp_dir("tp-gpuhtml-browser");
  ASSERT_TRUE(write_file(dir + "/log.html",
                         "<!DOCTYPE html><html><body><p>x</p><script>console.log('gpuhtml "
                         "probe')</script></body></html>\n")
                  .ok());
  const auto run = testutil::render_headless(chrome, dir + "/log.html", dir + "/log.png", 200, 200);
  EXPECT_NE(testutil::render_problem(run).find("console output"), std::string::npos)
      << run.screenshot.err;
}

}  // namespace
}  // namespace tightpipe
