// Test helpers for the pages tightpipe writes (report.html, plan.html), label browser: Debian's
// headless Chromium renders a page to a screenshot and dumps its DOM; the screenshot's pixels
// are counted with libpng.
#pragma once

#include <cstdint>
#include <string>

#include "run.h"

namespace tightpipe::testutil {

// The Chromium binary, or "" when it is not installed (the tests skip then).
std::string chromium_binary();

struct HeadlessRender {
  CommandResult screenshot;  // --screenshot=<png>
  CommandResult dom;         // --dump-dom: the rendered DOM on stdout
};

// Renders file `html` in headless Chromium (a fresh profile, no network, logging to stderr):
// once into the PNG `png`, `width` x `height` pixels, and once dumping the DOM.
HeadlessRender render_headless(const std::string& chrome, const std::string& html,
                               const std::string& png, int width, int height);

// Whether Chromium's stderr reports a console message or an uncaught exception. Chromium 120+
// logs every page console message as "INFO:CONSOLE:<line>] ..." with --enable-logging=stderr;
// a page without script logs none.
bool has_console_output(const std::string& chrome_stderr);

// What went wrong rendering a page, "" when nothing did: a run that failed (its exit code and
// stderr) or one that logged a console message (the stderr). The page tests assert it is empty.
std::string render_problem(const HeadlessRender& render);

struct PngStats {
  int width = 0, height = 0;    // 0 when the file is not a PNG
  int64_t non_white = 0;        // pixels not near white
  int64_t distinct_colors = 0;  // counted up to 4096
};
PngStats png_stats(const std::string& path);

// "screenshot 1200x1600: 123456 non-white pixels (6.4%), 812 colours".
std::string png_summary(const PngStats& stats);

// Copies `path` to the file the environment variable `env_var` names, if it is set (to keep a
// test's screenshot: TP_REPORT_SCREENSHOT=docs/report-screenshot.png).
void keep_copy_if_asked(const std::string& path, const char* env_var);

// Occurrences of `needle` in `text` (overlapping ones too).
size_t count_occurrences(const std::string& text, const std::string& needle);

}  // namespace tightpipe::testutil
