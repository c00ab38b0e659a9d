// `tightpipe data preprocess` end to end: the files, Megatron's progress line on stderr with docs/s
// and MB/s, the summary; and its refusals, each one line on stderr with the exit code of its kind
// (2 for a flag the user can fix, 1 for a file that is missing or does not parse).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "run.h"
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
  expect_one_line(run_command(kTp + " data preprocess --input " + dir +
                              "/in.txt --tokenizer-type ByteTokenizer --output-prefix " + dir +
                              "/no/such/out"),
                  1, "--output-prefix: cannot create");
  EXPECT_FALSE(std::filesystem::exists(dir + "/out_text_document.bin"));
}

}  // namespace
}  // namespace tightpipe
