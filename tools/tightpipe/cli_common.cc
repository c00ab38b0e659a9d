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

void add_engine_flag(CLI::App& app, std::string& engine, std::string_view what) {
  app.add_option(
         "--engine", engine,
         fmt::format("the engine that will run the job, whose p2p waits and optimizer {} "
                     "simulates: tightpipe, megatron, megatron-overlap, torch, zb, deepspeed "
                     "(docs/cost_model.md \"Engine profiles\")",
                     what))
      ->capture_default_str();
}

void add_core_sharing_flags(CLI::App& app, CoreSharing& sharing) {
  app.add_option("--cores", sharing.cores,
                 "the cores the ranks' compute shares (CPU ranks): with more ranks computing at "
                 "once, each gets cores / ranks of one; 0: a core per rank "
                 "(docs/cost_model.md \"Shared cores\")")
      ->capture_default_str();
  app.add_option("--core-slowdown", sharing.slowdown,
                 "how much longer each of several ranks computing at once takes than one alone "
                 "(cores that slow each other: SMT siblings, a VM's vCPUs), >= 1")
      ->capture_default_str();
}

void add_tokenizer_flags(CLI::App& app, TokenizerFlags& flags) {
  app.add_option("--tokenizer-type", flags.type,
                 "GPT2BPETokenizer, SentencePieceTokenizer or ByteTokenizer");
  app.add_option("--vocab-file", flags.options.vocab_file, "GPT2BPETokenizer: vocab.json");
  app.add_option("--merge-file", flags.options.merge_file, "GPT2BPETokenizer: merges.txt");
  app.add_option("--tokenizer-model", flags.options.tokenizer_model,
                 "SentencePieceTokenizer: the .model file");
}

Result<TokenizerOptions> TokenizerFlags::resolve() const {
  TokenizerOptions o = options;
  if (!type.empty()) {
    TP_ASSIGN_OR_RETURN(o.type, parse_tokenizer_type(type));
  } else if (!o.vocab_file.empty() || !o.merge_file.empty() || !o.tokenizer_model.empty()) {
    return Status::invalid_argument(
        "--vocab-file/--merge-file/--tokenizer-model without --tokenizer-type; hint: "
        "--tokenizer-type GPT2BPETokenizer (vocab.json and merges.txt) or "
        "SentencePieceTokenizer (--tokenizer-model)");
  }
  TP_RETURN_IF_ERROR(o.validate());
  return o;
}

}  // namespace tightpipe::cli
