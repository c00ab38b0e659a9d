// The tightpipe CLI: one function per subcommand, each parsing its own flags (CLI11), validating
// them and calling the library. Exit codes: 0 success, 1 runtime error, 2 usage error.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "tightpipe/simulator.h"
#include "tightpipe/status.h"
#include "tightpipe/tokenizer.h"

namespace tightpipe::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;

int cmd_schedule(int argc, char** argv);
int cmd_simulate(int argc, char** argv);
int cmd_train(int argc, char** argv);
int cmd_sample(int argc, char** argv);
int cmd_data(int argc, char** argv);
int cmd_report(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_tune(int argc, char** argv);

// Runs app.parse; on a parse error prints one line "tightpipe <cmd>: <error>" plus a hint to
// --help and returns kExitUsage; on --help prints help and returns kExitOk; otherwise -1.
int parse_or_exit(CLI::App& app, int argc, char** argv);
// Prints "tightpipe <cmd>: error: <message>" to stderr and returns the exit code for `status`
// (kExitUsage for InvalidArgument, kExitError otherwise).
int report_error(std::string_view command, const Status& status);

// Megatron-LM's tokenizer flags (--tokenizer-type, --vocab-file, --merge-file,
// --tokenizer-model), shared by `data preprocess`, `train` and `sample`.
struct TokenizerFlags {
  std::string type;  // empty: not given
  TokenizerOptions options;
  bool given() const {
    return !type.empty() || !options.vocab_file.empty() || !options.merge_file.empty() ||
           !options.tokenizer_model.empty();
  }
  // The options with the parsed type; ByteTokenizer when no flag was given. InvalidArgument naming
  // the flag for an unknown type, or files the type needs or does not read.
  Result<TokenizerOptions> resolve() const;
};
void add_tokenizer_flags(CLI::App& app, TokenizerFlags& flags);
// --engine (simulator.h Engine) on simulate, plan and report: the flag, its help with `what`
// (what the engine's profile is applied to) appended; parse it with parse_engine().
void add_engine_flag(CLI::App& app, std::string& engine, std::string_view what);
// --cores and --core-slowdown (simulator.h CoreSharing) on simulate and tune; check them with
// check_core_sharing().
void add_core_sharing_flags(CLI::App& app, CoreSharing& sharing);

}  // namespace tightpipe::cli
