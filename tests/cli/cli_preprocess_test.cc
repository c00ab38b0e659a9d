// `tightpipe data preprocess` end to end: the files, Megatron's progress line on stderr with docs/s
// and MB/s, the summary; and its refusals, each one line on stderr with the exit code of its kind
// (2 for a flag the user can fix, 1 for a file that is missing or does not parse).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "run.h"
#include "sanitizer.h"
#include "tightpipe/base.h"

namespace tightpipe {
namespace {

using testutil::run_command;
const std::string kTp = testutil::tightpipe_binary();

void expect_one_line(const testutil::CommandResult& r, int code, const std::string& needle) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_NE(r.err.find("tightpipe data preprocess"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << r.err;
}

TEST(CliPreprocessTest, WritesTheDatasetAndReportsProgress) {
  const std::string dir = testutil::make_temp_dir("tp-preprocess");
  std::string text;
  for (int i = 0; i < 50; ++i) text += "paragraph " + std::to_string(i) + "\n\n";
  ASSERT_TRUE(write_file(dir + "/in.txt", text).ok());
  auto r = run_command(kTp + " data preprocess --input " + dir + "/in.txt --output-prefix " + dir +
                       "/out --tokenizer-type ByteTokenizer --workers 2 --log-interval 10");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/out_text_document.bin"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/out_text_document.idx"));
  // 50 paragraphs and the empty piece after the last "\n\n".
  EXPECT_NE(r.out.find("51 documents, 50 sequences"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("processed 51 documents ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" docs/s, "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" MB/s)"), std::string::npos) << r.err;
}

TEST(CliPreprocessTest, RefusalsAreOneLine) {
  const std::string dir = testutil::make_temp_dir("tp-preprocess-bad");
  ASSERT_TRUE(write_file(dir + "/in.txt", "a\n\nb\n").ok());
  ASSERT_TRUE(write_file(dir + "/in.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n").ok());
  const std::string base = kTp + " data preprocess --output-prefix " + dir + "/out ";
  expect_one_line(run_command(base + "--input " + dir + "/none.txt --tokenizer-type ByteTokenizer"),
                  1, "none.txt' does not exist");
  expect_one_line(run_command(base + "--input " + dir + "/in.jsonl --tokenizer-type ByteTokenizer"),
                  2, "in.jsonl' line 2: no key 'text'");
  expect_one_line(
      run_command(base + "--input " + dir + "/in.txt --tokenizer-type ByteTokenizer --append-eod"),
      2, "--append-eod: --tokenizer-type ByteTokenizer has no end-of-document token");
  expect_one_line(run_command(base + "--input " + dir + "/in.txt --tokenizer-type Bytes"), 2,
                  "--tokenizer-type Bytes: unknown");
  expect_one_line(
      run_command(kTp + " data preprocess --input " + dir +
                  "/in.txt --tokenizer-type ByteTokenizer --output-prefix " + dir + "/no/such/out"),
      1, "--output-prefix: cannot create");
  EXPECT_FALSE(std::filesystem::exists(dir + "/out_text_document.bin"));
}

// The files in `dir` whose name ends in ".tmp".
std::vector<std::string> temp_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() == ".tmp") out.push_back(e.path().filename().string());
  }
  return out;
}

const std::string kGpt2Flags = " --tokenizer-type GPT2BPETokenizer --vocab-file " +
                               std::string(TP_SHARED_DIR) + "/data/gpt2/vocab.json --merge-file " +
                               std::string(TP_SHARED_DIR) + "/data/gpt2/merges.txt";

// One word of 32 MiB (no space: one pre-token) under a 1 GiB address-space limit: it took about
// 50 bytes a byte and died of std::bad_alloc, leaving a 0-byte .bin.tmp.
TEST(CliPreprocessTest, OneHugeWordFitsInBoundedMemory) {
  // ASan reserves terabytes of shadow address space: ulimit -v cannot hold a sanitized binary.
  TP_SKIP_IF_SANITIZED("ulimit -v on a sanitized binary");
  const std::string dir = testutil::make_temp_dir("tp-preprocess-word");
  constexpr size_t kBytes = size_t{32} << 20;
  ASSERT_TRUE(write_file(dir + "/in.txt", std::string(kBytes, 'x')).ok());
  auto r = run_command("ulimit -v 1048576 && " + kTp + " data preprocess --input " + dir +
                       "/in.txt --output-prefix " + dir + "/out" + kGpt2Flags + " --workers 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // GPT-2 merges a run of 'x' into tokens of eight, uint16 each.
  EXPECT_NE(r.out.find("1 documents, 1 sequences, " + std::to_string(kBytes / 8) + " tokens"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(std::filesystem::file_size(dir + "/out_text_document.bin"), kBytes / 8 * 2);
  EXPECT_TRUE(temp_files(dir).empty());
}

// A run stopped by SIGTERM (or Ctrl-C) while it writes removes its .tmp files and dies of the
// signal; so does one that fails on a bad line in the middle.
TEST(CliPreprocessTest, InterruptedOrFailedRunLeavesNoTempFile) {
  const std::string dir = testutil::make_temp_dir("tp-preprocess-kill");
  auto corpus = read_file(std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt");
  ASSERT_TRUE(corpus.ok());
  std::string text;
  while (text.size() < (size_t{24} << 20)) text += *corpus;  // seconds of work
  ASSERT_TRUE(write_file(dir + "/in.txt", text).ok());
  // Wait (at most 60 s) for the .bin.tmp, then stop the run.
  auto r = run_command(kTp + " data preprocess --input " + dir + "/in.txt --output-prefix " + dir +
                       "/out" + kGpt2Flags + " --workers 1 & pid=$!; n=0; while [ ! -e " + dir +
                       "/out_text_document.bin.tmp ] && [ $n -lt 6000 ]; do sleep 0.01; "
                       "n=$((n+1)); done; kill -TERM $pid; wait $pid; echo \"rc=$?\"");
  EXPECT_NE(r.out.find("rc=143"), std::string::npos) << r.out << r.err;  // 128 + SIGTERM
  EXPECT_TRUE(temp_files(dir).empty());
  EXPECT_FALSE(std::filesystem::exists(dir + "/out_text_document.bin"));

  std::string lines;
  for (int i = 0; i < 20000; ++i) lines += "{\"text\": \"line " + std::to_string(i) + "\"}\n";
  lines += "{\"text\": 7}\n";
  ASSERT_TRUE(write_file(dir + "/in.jsonl", lines).ok());
  expect_one_line(
      run_command(kTp + " data preprocess --input " + dir + "/in.jsonl --output-prefix " + dir +
                  "/out --tokenizer-type ByteTokenizer --workers 2 --log-interval 100000"),
      2, "line 20001: key 'text' is a JSON number");
  EXPECT_TRUE(temp_files(dir).empty());
  EXPECT_FALSE(std::filesystem::exists(dir + "/out_text_document.bin"));
}

}  // namespace
}  // namespace tightpipe
