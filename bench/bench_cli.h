// Flag parsing shared by the benches (CLI11): `--help` prints the usage and returns before the
// bench runs anything; an unknown flag or a bad value is one line on stderr and exit code 2.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>

namespace tightpipe::bench {

constexpr int kExitUsage = 2;

// Parses argv into `app`. Returns -1 when the bench should run, otherwise the exit code for main
// to return at once: 0 after printing --help, kExitUsage after a parse error.
inline int parse_bench_flags(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::fprintf(stderr, "%s: %s; hint: run '%s --help' for the flags\n", app.get_name().c_str(),
                 what.c_str(), app.get_name().c_str());
    return kExitUsage;
  }
  return -1;
}

}  // namespace tightpipe::bench
