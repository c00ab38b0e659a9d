// The README's commands, run as written (ctest label `readme`), and the benches' --help.
//
// What runs: every command of README.md's indented code blocks (lines indented 4 spaces after a
// blank line), read at test time, backslash continuations joined, in README order and all in
// one scratch directory, so a command can use what an earlier one wrote (`tightpipe report run`
// after `tightpipe train ... --out-dir run`). The scratch directory sits next to a link
// `shared` -> ../shared of the repository and holds a link `build` -> this build and
// `tests/data` -> the repository's tests/data, so `../shared/data/...`, `build/bench/...` and
// `tests/data/...` resolve as they do from the repository root; the
// built tightpipe comes first on PATH. Each command must exit 0 within kTimeLimitS.
//
// The rules, first match wins; a skipped command is printed with its rule:
//  1. placeholder: a token `...` or a file the reader supplies (`my_*`): not runnable as written.
//  2. not run here: `./scripts/*.sh` (they install packages, build and run the whole suite),
//     `mpirun` (ctest's *_mpi tests run the MPI transport), `chromium` (label `browser`).
//  3. long: `tightpipe train` with --train-iters above kMaxTrainIters.
//  4. needs a skipped command's output: a token equal to or under a path that a skipped command
//     writes (its --out-dir, --save, --out, --trace or --svg).
//  5. `build/bench/...`: run with `--help` only (a bench takes minutes); must print its usage.
//  6. `tightpipe ...`: run as written.
// Any other command fails the test: give it a rule here rather than skipping it silently.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "run.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

constexpr int kTimeLimitS = 90;     // per command
constexpr int kMaxTrainIters = 50;  // rule 3
constexpr int kBenchHelpLimitS = 10;

// ----- extraction --------------------------------------------------------------------------------

struct ReadmeCommand {
  int line = 0;      // 1-based line of README.md where the command starts
  std::string text;  // continuations joined, indentation and trailing spaces removed
};

std::string rstrip(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

// The commands of the indented code blocks: a block starts with a line indented 4 or more
// spaces after a blank line and runs while lines are indented or blank; fenced blocks (```)
// are not indented code and are left out. A line ending in '\' continues on the next one.
std::vector<ReadmeCommand> extract_commands(const std::string& markdown) {
  std::vector<ReadmeCommand> out;
  const std::vector<std::string> lines = split(markdown, '\n');
  bool prev_blank = true, in_block = false, in_fence = false;
  std::optional<ReadmeCommand> pending;  // a command continued with '\'
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string line = rstrip(lines[i]);
    const bool blank = trim(line).empty();
    if (trim(line).starts_with("```")) in_fence = !in_fence;
    const bool indented = line.starts_with("    ") || line.starts_with("\t");
    if (in_fence) {
      in_block = false;
    } else if (indented && (in_block || prev_blank)) {
      in_block = true;
      std::string text(trim(line));
      const bool continues = text.ends_with("\\");
      if (continues) text = rstrip(text.substr(0, text.size() - 1));
      if (pending) {
        pending->text += " " + text;
      } else {
        pending = ReadmeCommand{static_cast<int>(i + 1), text};
      }
      if (!continues) {
        out.push_back(*pending);
        pending.reset();
      }
    } else if (!blank) {
      in_block = false;
    }
    prev_blank = blank;
  }
  if (pending) out.push_back(*pending);
  return out;
}

// Shell-like words: whitespace separates, '...' and "..." quote (quotes removed), an unquoted
// word starting with '#' ends the command (a comment).
std::vector<std::string> words(const std::string& command) {
  std::vector<std::string> out;
  std::string cur;
  bool have = false;
  char quote = 0;
  for (char c : command) {
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      have = true;
    } else if (c == ' ' || c == '\t') {
      if (have) out.push_back(cur);
      cur.clear();
      have = false;
    } else if (c == '#' && !have) {
      break;
    } else {
      cur += c;
      have = true;
    }
  }
  if (have) out.push_back(cur);
  return out;
}

// The value of `--flag V` or `--flag=V`.
std::optional<std::string> flag_value(const std::vector<std::string>& w, const std::string& flag) {
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] == flag && i + 1 < w.size()) return w[i + 1];
    if (w[i].starts_with(flag + "=")) return w[i].substr(flag.size() + 1);
  }
  return std::nullopt;
}

// ----- the rules
// -----------------------------------------------------------------------------------

enum class Action { kRun, kRunHelp, kSkip, kUnknown };

struct Verdict {
  Action action = Action::kUnknown;
  std::string why;  // the rule, for skips
};

const char* const kOutputFlags[] = {"--out-dir", "--save", "--out", "--trace", "--svg"};

Verdict classify(const std::vector<std::string>& w, const std::set<std::string>& skipped_outputs) {
  if (w.empty()) return {Action::kUnknown, "empty command"};
  for (const std::string& t : w) {
    if (t == "..." || fs::path(t).filename().string().starts_with("my_")) {
      return {Action::kSkip, fmt::format("rule 1, placeholder '{}'", t)};
    }
  }
  if (w[0].starts_with("./scripts/") && w[0].ends_with(".sh")) {
    return {Action::kSkip,
            "rule 2, ./scripts/*.sh: the two main commands, or a helper an mpi test runs "
            "(netns-hosts.sh: cross_host_mpi_test)"};
  }
  if (w[0] == "mpirun") return {Action::kSkip, "rule 2, mpirun (ctest label mpi covers it)"};
  if (w[0] == "chromium") return {Action::kSkip, "rule 2, chromium (ctest label browser)"};
  if (w[0] == "tightpipe" && w.size() > 1 && w[1] == "train") {
    if (auto it = flag_value(w, "--train-iters")) {
      auto n = parse_int(*it);
      if (!n.ok() || *n > kMaxTrainIters) {
        return {Action::kSkip,
                fmt::format("rule 3, long: --train-iters {} > {}", *it, kMaxTrainIters)};
      }
    }
  }
  for (const std::string& t : w) {
    for (const std::string& p : skipped_outputs) {
      if (t == p || t.starts_with(p + "/")) {
        return {Action::kSkip, fmt::format("rule 4, needs '{}', written by a skipped command", p)};
      }
    }
  }
  if (w[0].starts_with("build/bench/")) return {Action::kRunHelp, ""};
  if (w[0] == "tightpipe") return {Action::kRun, ""};
  return {Action::kUnknown, "no rule for this command"};
}

// ----- running ---------------------------------------------------------------------------------

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

struct Scratch {
  std::string root;  // removed when the test passes
  std::string dir;   // cwd of the commands
  std::string path_env;
};

Scratch make_scratch() {
  const std::string root = testutil::make_temp_dir("tp-readme");
  fs::create_directory_symlink(fs::canonical(TP_SHARED_DIR), root + "/shared");
  const std::string dir = root + "/repo";
  fs::create_directory(dir);
  fs::create_directory_symlink(fs::canonical(TP_BINARY_DIR), dir + "/build");
  fs::create_directory(dir + "/tests");
  fs::create_directory_symlink(fs::canonical(std::string(TP_SOURCE_DIR) + "/tests/data"),
                               dir + "/tests/data");
  const char* path = std::getenv("PATH");
  return {root, dir,
          std::string(TP_BINARY_DIR) + "/tools/tightpipe:" + (path ? path : "/usr/bin:/bin")};
}

struct Ran {
  testutil::CommandResult result;
  double seconds = 0;
};

Ran run_in(const Scratch& s, const std::string& command, int limit_s) {
  const std::string full =
      fmt::format("cd {} && PATH={} timeout -k 5 {} /bin/sh -c {}", shell_quote(s.dir),
                  shell_quote(s.path_env), limit_s, shell_quote(command));
  const auto t0 = std::chrono::steady_clock::now();
  Ran r{testutil::run_command(full), 0};
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::string tail(const std::string& s, size_t n = 1500) {
  return s.size() > n ? "..." + s.substr(s.size() - n) : s;
}

// ----- tests -------------------------------------------------------------------------------------

TEST(ReadmeExtractTest, IndentedBlocksContinuationsAndComments) {
  const std::string md =
      "# title\n"
      "text\n"
      "    not code: no blank line before\n"
      "\n"
      "    tightpipe a --x 1   # note\n"
      "    tightpipe b --y \\\n"
      "        --z 'q r' \\\n"
      "      --w\n"
      "\n"
      "    tightpipe c\n"
      "text again\n"
      "```\n"
      "\n"
      "    fenced, not indented code\n"
      "```\n";
  const auto c = extract_commands(md);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].text, "tightpipe a --x 1   # note");
  EXPECT_EQ(c[0].line, 5);
  EXPECT_EQ(c[1].text, "tightpipe b --y --z 'q r' --w");
  EXPECT_EQ(c[1].line, 6);
  EXPECT_EQ(c[2].text, "tightpipe c");
  EXPECT_EQ(words(c[0].text), (std::vector<std::string>{"tightpipe", "a", "--x", "1"}));
  EXPECT_EQ(words(c[1].text),
            (std::vector<std::string>{"tightpipe", "b", "--y", "--z", "q r", "--w"}));
}

TEST(ReadmeExtractTest, Rules) {
  auto action = [](const std::string& cmd, std::set<std::string> skipped = {}) {
    return classify(words(cmd), skipped).action;
  };
  EXPECT_EQ(action("tightpipe schedule --check my_schedule.csv"), Action::kSkip);
  EXPECT_EQ(action("tightpipe train ... --load x"), Action::kSkip);
  EXPECT_EQ(action("./scripts/demo.sh"), Action::kSkip);
  EXPECT_EQ(action("mpirun -np 4 tightpipe train"), Action::kSkip);
  EXPECT_EQ(action("tightpipe train --train-iters 500"), Action::kSkip);
  EXPECT_EQ(action("tightpipe train --train-iters 30"), Action::kRun);
  EXPECT_EQ(action("tightpipe sample --load runs/tiny/ckpt", {"runs/tiny/ckpt"}), Action::kSkip);
  EXPECT_EQ(action("tightpipe report run", {"run"}), Action::kSkip);
  EXPECT_EQ(action("tightpipe report run", {"runs"}), Action::kRun);
  EXPECT_EQ(action("build/bench/sim/bench_sim"), Action::kRunHelp);
  EXPECT_EQ(action("rm -rf /"), Action::kUnknown);
}

TEST(ReadmeTest, CommandsRunAsWritten) {
  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built at " << tp;
  auto text = read_file(std::string(TP_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const std::vector<ReadmeCommand> commands = extract_commands(*text);
  ASSERT_FALSE(commands.empty()) << "README.md has no indented code block";
  const Scratch scratch = make_scratch();
  std::printf("README commands run in %s (tightpipe = %s)\n", scratch.dir.c_str(), tp.c_str());

  std::set<std::string> skipped_outputs;
  int ran = 0, skipped = 0;
  double total_s = 0;
  for (const ReadmeCommand& c : commands) {
    const std::vector<std::string> w = words(c.text);
    const Verdict v = classify(w, skipped_outputs);
    if (v.action == Action::kSkip) {
      std::printf("README.md:%d  skip (%s): %s\n", c.line, v.why.c_str(), c.text.c_str());
      for (const char* f : kOutputFlags)
        if (auto p = flag_value(w, f)) skipped_outputs.insert(*p);
      ++skipped;
      continue;
    }
    if (v.action == Action::kUnknown) {
      ADD_FAILURE() << "README.md:" << c.line << ": " << v.why << ": " << c.text
                    << "\nhint: give it a rule in tests/readme/readme_test.cc";
      continue;
    }
    const std::string command = v.action == Action::kRunHelp ? w[0] + " --help" : c.text;
    const Ran r = run_in(scratch, command, kTimeLimitS);
    total_s += r.seconds;
    ++ran;
    std::printf("README.md:%d  exit %d in %.1f s: %s\n", c.line, r.result.exit_code, r.seconds,
                command.c_str());
    std::fflush(stdout);
    if (r.result.exit_code == 124 || r.result.exit_code == 137) {
      ADD_FAILURE() << "README.md:" << c.line << ": did not finish within " << kTimeLimitS
                    << " s: " << command;
      continue;
    }
    EXPECT_EQ(r.result.exit_code, 0) << "README.md:" << c.line << ": " << command << "\nstdout:\n"
                                     << tail(r.result.out) << "\nstderr:\n"
                                     << tail(r.result.err);
    if (v.action == Action::kRunHelp) {
      EXPECT_NE(r.result.out.find("Usage"), std::string::npos)
          << "README.md:" << c.line << ": " << command << " printed no usage:\n"
          << tail(r.result.out);
    }
  }
  std::printf("README: %zu commands, %d run (%.1f s), %d skipped by rule\n", commands.size(), ran,
              total_s, skipped);
  EXPECT_GT(ran, 0) << "every README command was skipped";
  if (!::testing::Test::HasFailure()) fs::remove_all(scratch.root);
}

// The bench binaries of this build: build/bench/<area>/<name>.
std::vector<std::string> bench_binaries() {
  std::vector<std::string> out;
  const fs::path dir = fs::path(TP_BINARY_DIR) / "bench";
  if (!fs::is_directory(dir)) return out;
  for (const auto& area : fs::directory_iterator(dir)) {
    if (!area.is_directory() || area.path().filename() == "CMakeFiles") continue;
    for (const auto& f : fs::directory_iterator(area.path())) {
      if (!f.is_regular_file() || f.path().has_extension()) continue;
      if ((f.status().permissions() & fs::perms::owner_exec) != fs::perms::none)
        out.push_back(f.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ReadmeTest, EveryBenchAnswersHelpAndRejectsUnknownFlags) {
  const std::vector<std::string> benches = bench_binaries();
  if (benches.empty()) GTEST_SKIP() << "no bench built (TIGHTPIPE_BENCH=OFF)";
  const Scratch scratch = make_scratch();
  for (const std::string& b : benches) {
    const Ran help = run_in(scratch, b + " --help", kBenchHelpLimitS);
    EXPECT_EQ(help.result.exit_code, 0) << b << " --help\n" << tail(help.result.err);
    EXPECT_NE(help.result.out.find("Usage"), std::string::npos) << b << " --help:\n"
                                                                << tail(help.result.out);
    const Ran bad = run_in(scratch, b + " --no-such-flag", kBenchHelpLimitS);
    EXPECT_EQ(bad.result.exit_code, 2) << b << " --no-such-flag\n" << tail(bad.result.out);
    EXPECT_EQ(std::count(bad.result.err.begin(), bad.result.err.end(), '\n'), 1)
        << b << " --no-such-flag: want one line\n"
        << bad.result.err;
    EXPECT_NE(bad.result.err.find("--no-such-flag"), std::string::npos) << bad.result.err;
    std::printf("%s: --help %.1f s, --no-such-flag exit %d\n", b.c_str(), help.seconds,
                bad.result.exit_code);
  }
  if (!::testing::Test::HasFailure()) fs::remove_all(scratch.root);
}

// Every `build/bench/...` the README names, in code blocks or in the text, is built and answers
// --help.
TEST(ReadmeTest, BenchesTheReadmeNamesExist) {
  if (bench_binaries().empty()) GTEST_SKIP() << "no bench built (TIGHTPIPE_BENCH=OFF)";
  auto text = read_file(std::string(TP_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const std::regex re(R"(build/bench/[A-Za-z0-9_]+/[A-Za-z0-9_]+)");
  std::set<std::string> named;
  for (auto it = std::sregex_iterator(text->begin(), text->end(), re); it != std::sregex_iterator();
       ++it)
    named.insert(it->str());
  EXPECT_FALSE(named.empty());
  for (const std::string& n : named) {
    const std::string path = std::string(TP_BINARY_DIR) + n.substr(std::string("build").size());
    EXPECT_TRUE(fs::exists(path)) << "README names " << n << ", not built at " << path;
  }
}

}  // namespace
}  // namespace tightpipe
