// plan.html in headless Chromium: the page renders its plot (one point per candidate with a
// memory figure, the budget line, the recommended mark in the DOM; a screenshot that is not
// blank) without console output. Label: browser. Skips when Debian's `chromium` is not installed
// (scripts/setup.sh installs it).
// The page comes from plan_to_html on the hand-built result of plan_test_sample.h; once
// `tightpipe plan --html` exists this can render the CLI's page instead.
#include <gtest/gtest.h>

#include <cstdio>

#include "browser.h"
#include "plan_test_sample.h"
#include "run.h"
#include "tightpipe/base.h"
#include "tightpipe/plan.h"

namespace tightpipe {
namespace {

using testutil::count_occurrences;

TEST(PlanBrowserTest, PlanPageRendersInHeadlessChromium) {
  const std::string chrome = testutil::chromium_binary();
  if (chrome.empty()) GTEST_SKIP() << "chromium not installed (apt-get install chromium)";
  const std::string dir = testutil::make_temp_dir("tp-plan-browser");
  const std::string html = dir + "/plan.html";
  ASSERT_TRUE(write_file(html, plan_to_html(testutil::sample_plan_result())).ok());

  const std::string png = dir + "/shot.png";
  const auto run = testutil::render_headless(chrome, html, png, 1100, 1300);
  // Both runs exit 0 and log no console message (the page has no script).
  ASSERT_EQ(testutil::render_problem(run), "");

  // The rendered DOM: 4 filled and 2 hollow points (the candidate refused by shape has none),
  // the budget line, the recommended ring and its label, the baseline's, the cost axis, the
  // table with the recommended and the baseline rows.
  const std::string& d = run.dom.out;
  EXPECT_EQ(count_occurrences(d, "class=\"pt fit\""), 4u);
  EXPECT_EQ(count_occurrences(d, "class=\"pt nofit\""), 2u);
  EXPECT_EQ(count_occurrences(d, "class=\"budget\""), 1u);
  EXPECT_EQ(count_occurrences(d, "class=\"rec-mark\""), 1u);
  EXPECT_NE(d.find("recommended: zb-v p=8 v=2 m=32"), std::string::npos);
  EXPECT_EQ(count_occurrences(d, "class=\"base-mark\""), 1u);
  EXPECT_GE(count_occurrences(d, "class=\"usd\""), 3u);
  EXPECT_EQ(count_occurrences(d, "<tr class=\"rec\""), 1u);
  EXPECT_EQ(count_occurrences(d, "<tr class=\"base\""), 1u);
  // The escaped schedule name came back as text, not markup.
  EXPECT_NE(d.find("sched&lt;&amp;&gt;"), std::string::npos);
  EXPECT_EQ(d.find("<script"), std::string::npos);

  // The screenshot is not blank: the plot, the points in several colours, the table.
  const testutil::PngStats st = testutil::png_stats(png);
  ASSERT_EQ(st.width, 1100) << "not a PNG: " << png;
  EXPECT_GT(st.non_white, int64_t(st.width) * st.height / 50);
  EXPECT_GT(st.distinct_colors, 20);
  std::printf("%s\n", testutil::png_summary(st).c_str());
  testutil::keep_copy_if_asked(png, "TP_PLAN_SCREENSHOT");
}

}  // namespace
}  // namespace tightpipe
