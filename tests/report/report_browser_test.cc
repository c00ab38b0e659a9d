// report.html in headless Chromium: the page renders its timelines and bars (SVG elements in the
// DOM, a screenshot that is not blank) without console errors. Label: browser. Skips when
// Debian's `chromium` is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>

#include <cstdio>

#include "browser.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/report.h"
#include "tightpipe/trainer.h"
#include "tiny_train.h"

namespace tightpipe {
namespace {

using testutil::count_occurrences;

TEST(ReportBrowserTest, ReportRendersInHeadlessChromium) {
  const std::string chrome = testutil::chromium_binary();
  if (chrome.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  const std::string dir = testutil::make_temp_dir("tp-rep-browser");
  TrainOptions o = testutil::tiny_train_options(dir + "/run", "1f1b", /*pp=*/4, /*microbatches=*/8);
  o.exec.emulated = true;
  o.exec.costs = EmulatedCompute::parse("f=2,b=4").value();
  o.world.link = parse_link_options("latency_us=1000").value();
  ASSERT_TRUE(run_training(o).ok());
  ReportOptions ro;
  ro.what_if = parse_what_if("zb-h1,zb-v,interleaved:2").value();
  auto rep = build_report(o.out_dir, ro);
  ASSERT_TRUE(rep.ok()) << rep.status().to_string();
  ASSERT_TRUE(write_report(*rep, dir + "/out").ok());
  const std::string html = dir + "/out/report.html";
  const std::string page = read_file(html).value();
  // Self-contained: no external resource.
  EXPECT_EQ(page.find("src=\"http"), std::string::npos);
  EXPECT_EQ(page.find("<link"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);

  const std::string png = dir + "/shot.png";
  const auto run = testutil::render_headless(chrome, html, png, 1200, 1600);
  // Both runs exit 0 and log no console message (the page has no script).
  ASSERT_EQ(testutil::render_problem(run), "");
  // The rendered DOM: both timelines (one row per rank each), the stacked bars, the loss curve,
  // the memory bars.
  const std::string& d = run.dom.out;
  EXPECT_EQ(count_occurrences(d, "class=\"rank\""), 8u) << "4 ranks x (measured + predicted)";
  EXPECT_GT(count_occurrences(d, "class=\"ev\""), 4u * 16);
  EXPECT_GE(count_occurrences(d, "class=\"bar measured\""), 4u);
  EXPECT_GE(count_occurrences(d, "class=\"bar predicted\""), 4u);
  EXPECT_GT(count_occurrences(d, "class=\"seg\""), 4u * 3);
  EXPECT_EQ(count_occurrences(d, "class=\"curve\""), 1u);
  EXPECT_EQ(count_occurrences(d, "class=\"mem\""), 8u);
  EXPECT_NE(d.find("interleaved:2"), std::string::npos);
  // The screenshot is not blank: many non-white pixels in many colours.
  const testutil::PngStats st = testutil::png_stats(png);
  ASSERT_EQ(st.width, 1200) << "not a PNG: " << png;
  EXPECT_GT(st.non_white, int64_t(st.width) * st.height / 20);
  EXPECT_GT(st.distinct_colors, 20);
  std::printf("%s\n", testutil::png_summary(st).c_str());
  testutil::keep_copy_if_asked(png, "TP_REPORT_SCREENSHOT");
}

}  // namespace
}  // namespace tightpipe
