#include <fmt/format.h>

#include <cstdio>

#include "commands.h"

namespace tightpipe::cli {

int parse_or_exit(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    std::fputs(app.help().c_str(), stdout);
    return kExitOk;
  } catch (const CLI::CallForAllHelp& e) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "%s: %s\nhint: run '%s --help' for the flags\n", app.get_name().c_str(),
                 e.what(), app.get_name().c_str());
    return kExitUsage;
  }
  return -1;
}

int report_error(std::string_view command, const Status& status) {
  std::fprintf(stderr, "tightpipe %.*s: error: %s\n", static_cast<int>(command.size()),
               command.data(), status.message().c_str());
  return status.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitError;
}

}  // namespace tightpipe::cli
