// report.html in headless Chromium: the page renders its timelines and bars (SVG elements in the
// DOM, a screenshot that is not blank) without console errors. Label: browser. Skips when
// Debian's `chromium` is not installed (scripts/setup.sh installs it).
#include <gtest/gtest.h>
#include <png.h>

#include <cstdio>
#include <filesystem>
#include <regex>
#include <set>

#include "run.h"
#include "tiny_train.h"
#include "tightpipe/base.h"
#include "tightpipe/report.h"
#include "tightpipe/trainer.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

std::string chromium() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (fs::exists(p)) return p;
  return "";
}

struct PngStats {
  int width = 0, height = 0;
  int64_t non_white = 0, distinct_colors = 0;
};

// Counts the pixels that are not (near) white. Empty stats when the file is not a PNG.
PngStats png_stats(const std::string& path) {
  PngStats st;
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&img, path.c_str())) return st;
  img.format = PNG_FORMAT_RGB;
  std::vector<unsigned char> px(PNG_IMAGE_SIZE(img));
  if (!png_image_finish_read(&img, nullptr, px.data(), 0, nullptr)) return st;
  st.width = static_cast<int>(img.width);
  st.height = static_cast<int>(img.height);
  std::set<uint32_t> colors;
  for (size_t k = 0; k + 2 < px.size(); k += 3) {
    const int r = px[k], g = px[k + 1], b = px[k + 2];
    if (r < 245 || g < 245 || b < 245) ++st.non_white;
    if (colors.size() < 4096) colors.insert(uint32_t(r) << 16 | uint32_t(g) << 8 | uint32_t(b));
  }
  st.distinct_colors = static_cast<int64_t>(colors.size());
  return st;
}

size_t count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

TEST(ReportBrowserTest, ReportRendersInHeadlessChromium) {
  const std::string chrome = chromium();
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

  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --hide-scrollbars "
      "--user-data-dir=" +
      testutil::make_temp_dir("tp-chrome-profile") + " ";
  const std::string png = dir + "/shot.png";
  auto shot = testutil::run_command("timeout 90 " + chrome + flags +
                                    "--enable-logging=stderr --v=0"
                                    " --window-size=1200,1600 --screenshot=" +
                                    png + " file://" + html);
  ASSERT_EQ(shot.exit_code, 0) << shot.err;
  auto dom = testutil::run_command("timeout 90 " + chrome + flags +
                                   "--enable-logging=stderr --v=0"
                                   " --dump-dom file://" +
                                   html);
  ASSERT_EQ(dom.exit_code, 0) << dom.err;
  // No console output at all (the page has no script): Chromium 120+ logs every page console
  // message, errors and uncaught exceptions included, as "INFO:CONSOLE:<line>] ..." with
  // --enable-logging=stderr (checked by hand with a page that throws).
  for (const auto* err : {&shot.err, &dom.err}) {
    EXPECT_EQ(err->find("Uncaught"), std::string::npos) << *err;
    EXPECT_FALSE(std::regex_search(*err, std::regex(R"(CONSOLE[:(])"))) << *err;
  }
  // The rendered DOM: both timelines (one row per rank each), the stacked bars, the loss curve,
  // the memory bars.
  const std::string& d = dom.out;
  EXPECT_EQ(count(d, "class=\"rank\""), 8u) << "4 ranks x (measured + predicted)";
  EXPECT_GT(count(d, "class=\"ev\""), 4u * 16);
  EXPECT_GE(count(d, "class=\"bar measured\""), 4u);
  EXPECT_GE(count(d, "class=\"bar predicted\""), 4u);
  EXPECT_GT(count(d, "class=\"seg\""), 4u * 3);
  EXPECT_EQ(count(d, "class=\"curve\""), 1u);
  EXPECT_EQ(count(d, "class=\"mem\""), 8u);
  EXPECT_NE(d.find("interleaved:2"), std::string::npos);
  // The screenshot is not blank: many non-white pixels in many colours.
  const PngStats st = png_stats(png);
  ASSERT_EQ(st.width, 1200) << "not a PNG: " << png;
  EXPECT_GT(st.non_white, int64_t(st.width) * st.height / 20);
  EXPECT_GT(st.distinct_colors, 20);
  std::printf("screenshot %dx%d: %lld non-white pixels (%.1f%%), %lld colours\n", st.width,
              st.height, static_cast<long long>(st.non_white),
              100.0 * st.non_white / (double(st.width) * st.height),
              static_cast<long long>(st.distinct_colors));
  if (const char* keep = std::getenv("TP_REPORT_SCREENSHOT"))
    fs::copy_file(png, keep, fs::copy_options::overwrite_existing);
}

}  // namespace
}  // namespace tightpipe
