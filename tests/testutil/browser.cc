#include "browser.h"

#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <set>
#include <vector>

namespace tightpipe::testutil {

std::string chromium_binary() {
  for (const char* p : {"/usr/bin/chromium", "/usr/bin/chromium-browser"})
    if (std::filesystem::exists(p)) return p;
  return "";
}

HeadlessRender render_headless(const std::string& chrome, const std::string& html,
                               const std::string& png, int width, int height) {
  const std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-background-networking "
      "--disable-component-update --disable-sync --no-first-run --hide-scrollbars "
      "--enable-logging=stderr --v=0 --user-data-dir=" +
      make_temp_dir("tp-chrome-profile") + " ";
  HeadlessRender r;
  r.screenshot =
      run_command("timeout 90 " + chrome + flags + "--window-size=" + std::to_string(width) + "," +
                  std::to_string(height) + " --screenshot=" + png + " file://" + html);
  r.dom = run_command("timeout 90 " + chrome + flags + "--dump-dom file://" + html);
  return r;
}

bool has_console_output(const std::string& chrome_stderr) {
  return chrome_stderr.find("Uncaught") != std::string::npos ||
         std::regex_search(chrome_stderr, std::regex(R"(CONSOLE[:(])"));
}

std::string render_problem(const HeadlessRender& r) {
  std::string out;
  for (const auto& [what, run] : {std::pair{"screenshot", &r.screenshot}, {"dump-dom", &r.dom}}) {
    if (run->exit_code != 0) {
      out += std::string(what) + ": exit code " + std::to_string(run->exit_code) + ": " + run->err;
    } else if (has_console_output(run->err)) {
      out += std::string(what) + ": console output: " + run->err;
    }
  }
  return out;
}

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

std::string png_summary(const PngStats& st) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "screenshot %dx%d: %lld non-white pixels (%.1f%%), %lld colours",
                st.width, st.height, static_cast<long long>(st.non_white),
                100.0 * st.non_white / std::max(1.0, double(st.width) * st.height),
                static_cast<long long>(st.distinct_colors));
  return buf;
}

void keep_copy_if_asked(const std::string& path, const char* env_var) {
  if (const char* keep = std::getenv(env_var))
    std::filesystem::copy_file(path, keep, std::filesystem::copy_options::overwrite_existing);
}

size_t count_occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

}  // namespace tightpipe::testutil
