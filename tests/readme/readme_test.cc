// The commands of README.md and of every docs/*.md page, run as written (ctest label `readme`),
// the benches' --help, and the links between those pages.
//
// What runs: every command of the pages' indented code blocks (lines indented 4 spaces after a
// blank line), read at test time, backslash continuations joined; README.md first, then the
// docs/*.md pages in name order (not docs/notes/). Fenced blocks (```) are not commands and are
// not run. A line of a block that is only a shell comment (`# -> ...`) is not a command. Each
// page runs in order in a scratch directory of its own, so a command can use what an earlier one
// of the same page wrote (`tightpipe report run` after `tightpipe train ... --out-dir run`) and a
// page never depends on another. Each scratch directory sits next to a link `shared` ->
// ../shared of the repository and holds a link `build` -> this build and `tests/data` -> the
// repository's tests/data, so `../shared/data/...`, `build/bench/...` and `tests/data/...`
// resolve as they do from the repository root; the built tightpipe comes first on PATH. Each
// command must exit 0 within kTimeLimitS.
//
// Leading environment settings (`NAME=VALUE ...`, `env -u NAME ...`) are not the command: the
// rules look at the program after them. The rules, first match wins; a skipped command is printed
// with its rule:
//  1. placeholder: a token `...`, a file the reader supplies (`my_*`), a name in capitals for
//     what the reader supplies (`DIR`, `RUN_DIR`; not a variable name after `-x` or `-u`) or a
//     `<...>` part (`crash-<sha1>`): not runnable as written.
//  2. not run here: `./scripts/*.sh` (they install packages, build and run the whole suite),
//     `mpirun` (ctest's *_mpi tests run the MPI transport), `chromium` (label `browser`), `nsys`
//     (Nsight Systems needs a GPU), `git` (a fresh clone for ./scripts/test.sh: docs/testing.md),
//     `build-sanitize/...` (the sanitizer build that ./scripts/test.sh makes and runs), and the
//     Python environment's interpreter `$(./scripts/setup-python.sh --print-venv)/bin/python`
//     (ctest label `python`).
//  3. long: `tightpipe train` with --train-iters above kMaxTrainIters.
//  4. needs a skipped command's output: a token equal to or under a path that a skipped command
//     writes (its --out-dir, --save, --out, --output, --trace or --svg).
//  5. `build/bench/...`: run with `--help` only (a bench takes minutes); must print its usage.
//  6. `tightpipe ...`: run as written.
// Any other command fails the test: give it a rule here rather than skipping it silently.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
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
  int line = 0;      // 1-based line of the page where the command starts
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
      if (!pending && text.starts_with("#")) {  // a comment line of the block, not a command
        prev_blank = blank;
        continue;
      }
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

const char* const kOutputFlags[] = {"--out-dir", "--save", "--out", "--output", "--trace", "--svg"};

// `NAME=VALUE`: an environment setting before the program.
bool is_assignment(const std::string& t) {
  const size_t eq = t.find('=');
  if (eq == std::string::npos || eq == 0) return false;
  return std::all_of(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(eq), [](char c) {
    return std::isupper(static_cast<unsigned char>(c)) || c == '_' ||
           std::isdigit(static_cast<unsigned char>(c));
  });
}

// The words from the program on: leading `NAME=VALUE` settings and `env [-u NAME] [NAME=VALUE]`
// dropped.
std::vector<std::string> program_words(const std::vector<std::string>& w) {
  size_t i = 0;
  while (i < w.size() && is_assignment(w[i])) ++i;
  if (i < w.size() && w[i] == "env") {
    ++i;
    while (i < w.size()) {
      if (w[i] == "-u" && i + 1 < w.size()) {
        i += 2;
      } else if (is_assignment(w[i])) {
        ++i;
      } else {
        break;
      }
    }
  }
  return {w.begin() + static_cast<std::ptrdiff_t>(i), w.end()};
}

// A name in capitals standing for what the reader supplies: `DIR`, `RUN_DIR`, `PREFIX`.
bool is_capital_placeholder(const std::string& t) {
  return t.size() >= 3 && std::all_of(t.begin(), t.end(), [](char c) {
           return std::isupper(static_cast<unsigned char>(c)) || c == '_';
         });
}

Verdict classify(const std::vector<std::string>& all_words,
                 const std::set<std::string>& skipped_outputs) {
  const std::vector<std::string> w = program_words(all_words);
  if (w.empty()) return {Action::kUnknown, "empty command"};
  for (const std::string& t : w) {
    if (t == "..." || fs::path(t).filename().string().starts_with("my_")) {
      return {Action::kSkip, fmt::format("rule 1, placeholder '{}'", t)};
    }
  }
  for (size_t i = 0; i < w.size(); ++i) {
    const std::string& t = w[i];
    const bool names_a_variable = i > 0 && (w[i - 1] == "-x" || w[i - 1] == "-u");  // mpirun, env
    if ((is_capital_placeholder(t) && !names_a_variable) ||
        (t.find('<') != std::string::npos && t.find('>') != std::string::npos)) {
      return {Action::kSkip, fmt::format("rule 1, placeholder '{}'", t)};
    }
  }
  if (w[0].starts_with("./scripts/") && w[0].ends_with(".sh")) {
    return {Action::kSkip,
            "rule 2, ./scripts/*.sh: the two main commands and the scripts they run (setup, "
            "sanitizer, fuzzing, Python environment), or a helper a test runs (netns-hosts.sh: "
            "cross_host_mpi_test)"};
  }
  if (w[0] == "mpirun") return {Action::kSkip, "rule 2, mpirun (ctest label mpi covers it)"};
  if (w[0] == "chromium") return {Action::kSkip, "rule 2, chromium (ctest label browser)"};
  if (w[0] == "nsys") return {Action::kSkip, "rule 2, nsys (Nsight Systems needs a GPU)"};
  if (w[0] == "git") {
    return {Action::kSkip, "rule 2, git (a fresh clone for ./scripts/test.sh: docs/testing.md)"};
  }
  if (w[0].starts_with("build-sanitize/")) {
    return {Action::kSkip, "rule 2, build-sanitize/ (the sanitizer build ./scripts/test.sh runs)"};
  }
  if (w[0].starts_with("$(./scripts/setup-python.sh")) {
    return {Action::kSkip, "rule 2, the Python environment's interpreter (ctest label python)"};
  }
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
  // The docs' forms.
  EXPECT_EQ(action("tightpipe report rank*.sqlite --out DIR"), Action::kSkip);
  EXPECT_EQ(action("build-sanitize/fuzz/fuzz_cost build-sanitize/fuzz-artifacts/cost-crash-<sha1>"),
            Action::kSkip);
  EXPECT_EQ(action("build-sanitize/fuzz/fuzz_cost -help=1"), Action::kSkip);
  EXPECT_EQ(action("FUZZ_SECONDS=0 ./scripts/sanitize.sh"), Action::kSkip);
  EXPECT_EQ(
      action("env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE build/bench/nn/bench_nn --steps 3"),
      Action::kRunHelp);
  EXPECT_EQ(program_words(words("env -u A B=1 build/bench/nn/bench_nn --x"))[0],
            "build/bench/nn/bench_nn");
  EXPECT_EQ(action("nsys profile --trace cuda,nvtx --output rank0 python train.py"), Action::kSkip);
  EXPECT_EQ(action("tightpipe report rank0.sqlite --out report/", {"rank0.sqlite"}), Action::kSkip);
  EXPECT_EQ(action("git clone . /tmp/proof && cd /tmp/proof"), Action::kSkip);
  EXPECT_EQ(classify(words("mpirun -x OPENBLAS_CORETYPE tightpipe train ..."), {}).why,
            "rule 1, placeholder '...'");
  EXPECT_EQ(action("PYTHONPATH=python $(./scripts/setup-python.sh --print-venv)/bin/python b.py"),
            Action::kSkip);
  EXPECT_EQ(action("tightpipe sample --load ck --prompt \"ROMEO:\""), Action::kRun);
  EXPECT_EQ(action("tightpipe train --tokenizer-type GPT2BPETokenizer --train-iters 5"),
            Action::kRun);
}

TEST(ReadmeExtractTest, CommentLinesAreNotCommands) {
  const auto c = extract_commands(
      "text\n\n    tightpipe a \\\n      --b 1\n    # -> what it wrote\n    tightpipe c\n");
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].text, "tightpipe a --b 1");
  EXPECT_EQ(c[1].text, "tightpipe c");
}

// README.md, then docs/*.md in name order: the pages whose commands run, as paths relative to
// the repository.
std::vector<std::string> pages() {
  std::vector<std::string> docs;
  for (const auto& e : fs::directory_iterator(fs::path(TP_SOURCE_DIR) / "docs")) {
    if (e.is_regular_file() && e.path().extension() == ".md") {
      docs.push_back("docs/" + e.path().filename().string());
    }
  }
  std::sort(docs.begin(), docs.end());
  docs.insert(docs.begin(), "README.md");
  return docs;
}

TEST(ReadmeTest, CommandsRunAsWritten) {
  const std::string tp = testutil::tightpipe_binary();
  if (!fs::exists(tp)) GTEST_SKIP() << "tightpipe not built at " << tp;
  int total = 0, ran = 0, skipped = 0;
  double total_s = 0;
  for (const std::string& page : pages()) {
    auto text = read_file(std::string(TP_SOURCE_DIR) + "/" + page);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    const std::vector<ReadmeCommand> commands = extract_commands(*text);
    if (page == "README.md") {
      ASSERT_FALSE(commands.empty()) << "README.md has no indented code block";
    }
    if (commands.empty()) continue;
    const Scratch scratch = make_scratch();
    std::printf("%s: commands run in %s (tightpipe = %s)\n", page.c_str(), scratch.dir.c_str(),
                tp.c_str());
    std::set<std::string> skipped_outputs;
    int page_ran = 0, page_skipped = 0;
    double page_s = 0;
    const bool failed_before = ::testing::Test::HasFailure();
    for (const ReadmeCommand& c : commands) {
      const std::vector<std::string> w = words(c.text);
      const Verdict v = classify(w, skipped_outputs);
      if (v.action == Action::kSkip) {
        std::printf("%s:%d  skip (%s): %s\n", page.c_str(), c.line, v.why.c_str(), c.text.c_str());
        for (const char* f : kOutputFlags)
          if (auto p = flag_value(w, f)) skipped_outputs.insert(*p);
        ++page_skipped;
        continue;
      }
      if (v.action == Action::kUnknown) {
        ADD_FAILURE() << page << ":" << c.line << ": " << v.why << ": " << c.text
                      << "\nhint: give it a rule in tests/readme/readme_test.cc, or, if it is not "
                         "a command, put it in a fenced block (```)";
        continue;
      }
      const std::string command =
          v.action == Action::kRunHelp ? program_words(w)[0] + " --help" : c.text;
      const Ran r = run_in(scratch, command, kTimeLimitS);
      page_s += r.seconds;
      ++page_ran;
      std::printf("%s:%d  exit %d in %.1f s: %s\n", page.c_str(), c.line, r.result.exit_code,
                  r.seconds, command.c_str());
      std::fflush(stdout);
      if (r.result.exit_code == 124 || r.result.exit_code == 137) {
        ADD_FAILURE() << page << ":" << c.line << ": did not finish within " << kTimeLimitS
                      << " s: " << command;
        continue;
      }
      EXPECT_EQ(r.result.exit_code, 0) << page << ":" << c.line << ": " << command << "\nstdout:\n"
                                       << tail(r.result.out) << "\nstderr:\n"
                                       << tail(r.result.err);
      if (v.action == Action::kRunHelp) {
        EXPECT_NE(r.result.out.find("Usage"), std::string::npos)
            << page << ":" << c.line << ": " << command << " printed no usage:\n"
            << tail(r.result.out);
      }
    }
    std::printf("%s: %zu commands, %d run (%.1f s), %d skipped by rule\n", page.c_str(),
                commands.size(), page_ran, page_s, page_skipped);
    if (page == "README.md") {
      EXPECT_GT(page_ran, 0) << "every README command was skipped";
    }
    total += static_cast<int>(commands.size());
    ran += page_ran;
    skipped += page_skipped;
    total_s += page_s;
    if (!failed_before && !::testing::Test::HasFailure()) fs::remove_all(scratch.root);
  }
  std::printf("all pages: %d commands, %d run (%.1f s), %d skipped by rule\n", total, ran, total_s,
              skipped);
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

// Every `build/bench/...` the README or a docs page names, in code blocks or in the text, is built
// (and so answers --help above).
TEST(ReadmeTest, BenchesThePagesNameExist) {
  if (bench_binaries().empty()) GTEST_SKIP() << "no bench built (TIGHTPIPE_BENCH=OFF)";
  const std::regex re(R"(build/bench/[A-Za-z0-9_]+/[A-Za-z0-9_]+)");
  std::map<std::string, std::string> named;  // bench -> the first page naming it
  for (const std::string& page : pages()) {
    auto text = read_file(std::string(TP_SOURCE_DIR) + "/" + page);
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    for (auto it = std::sregex_iterator(text->begin(), text->end(), re);
         it != std::sregex_iterator(); ++it)
      named.emplace(it->str(), page);
  }
  EXPECT_FALSE(named.empty());
  for (const auto& [n, page] : named) {
    const std::string path = std::string(TP_BINARY_DIR) + n.substr(std::string("build").size());
    EXPECT_TRUE(fs::exists(path)) << page << " names " << n << ", not built at " << path;
  }
}

// Every relative link of the pages (`[text](target)`, `![alt](image)`) names a file of the
// repository, and every `docs/NAME.md` the text mentions exists: a page that moves or is renamed
// leaves no dangling reference. Anchors (`#...`) are not checked; http(s) links are not followed.
TEST(ReadmeTest, LinksBetweenThePagesResolve) {
  const fs::path root(TP_SOURCE_DIR);
  const std::regex link(R"(\]\(([^)\s]+)\))");
  const std::regex mention(R"(docs/[A-Za-z0-9_]+\.md)");
  int checked = 0;
  for (const std::string& page : pages()) {
    auto text = read_file((root / page).string());
    ASSERT_TRUE(text.ok()) << text.status().to_string();
    const fs::path dir = (root / page).parent_path();
    for (auto it = std::sregex_iterator(text->begin(), text->end(), link);
         it != std::sregex_iterator(); ++it) {
      std::string target = (*it)[1].str();
      if (target.starts_with("http://") || target.starts_with("https://") ||
          target.starts_with("#") || target.starts_with("mailto:"))
        continue;
      target = target.substr(0, target.find('#'));
      ++checked;
      EXPECT_TRUE(fs::exists(dir / target)) << page << ": link to '" << (*it)[1].str()
                                            << "', no such file " << (dir / target).string();
    }
    for (auto it = std::sregex_iterator(text->begin(), text->end(), mention);
         it != std::sregex_iterator(); ++it) {
      ++checked;
      EXPECT_TRUE(fs::exists(root / it->str()))
          << page << " mentions " << it->str() << ", which does not exist";
    }
  }
  std::printf("%d links and docs/ mentions checked\n", checked);
}

}  // namespace
}  // namespace tightpipe
