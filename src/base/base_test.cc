#include "tightpipe/base.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "tightpipe/input_file.h"
#include "tightpipe/status.h"

namespace tightpipe {
namespace {

using ::testing::HasSubstr;

Result<int> half(int x) {
  if (x % 2) return Status::invalid_argument("odd");
  return x / 2;
}
Result<int> quarter(int x) {
  TP_ASSIGN_OR_RETURN(int h, half(x));
  TP_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

TEST(StatusTest, CodesAndContext) {
  Status s = Status::not_found("no file 'a'").with_context("--data-path");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: --data-path: no file 'a'");
  EXPECT_TRUE(OkStatus().ok());
  EXPECT_EQ(quarter(8).value(), 2);
  EXPECT_EQ(quarter(6).status().message(), "odd");
}

TEST(CheckDeathTest, AbortsWithValues) {
  EXPECT_DEATH(TP_CHECK(1 + 1 == 3, "x=", 7), "TP_CHECK\\(1 \\+ 1 == 3\\) failed: x=7");
}

TEST(RngTest, SameSeedSameStreamAndForksDiffer) {
  Rng a(42), b(42), c(43);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
  EXPECT_NE(Rng(42).next_u64(), c.next_u64());
  Rng f1 = Rng(1).fork(0), f2 = Rng(1).fork(1);
  EXPECT_NE(f1.next_u64(), f2.next_u64());
  Rng r(7);
  double sum = 0, sq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    double x = r.normal();
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.03);
  EXPECT_NEAR(sq / n, 1.0, 0.05);
  for (int i = 0; i < 1000; ++i) EXPECT_LT(r.below(7), 7u);
}

TEST(RngTest, StateRoundTrips) {
  Rng r(5);
  r.next_u64();
  auto st = r.state();
  uint64_t x = r.next_u64();
  Rng q(0);
  q.set_state(st);
  EXPECT_EQ(q.next_u64(), x);
}

TEST(StringsTest, ParseAndSplit) {
  EXPECT_EQ(parse_double(" 1.5 ").value(), 1.5);
  EXPECT_FALSE(parse_double("1.5x").ok());
  EXPECT_FALSE(parse_double("").ok());
  EXPECT_EQ(parse_int("12").value(), 12);
  EXPECT_FALSE(parse_int("12.5").ok());
  EXPECT_EQ(split("a,b,,c", ','), (std::vector<std::string>{"a", "b", "", "c"}));
  EXPECT_EQ(join({"a", "b"}, "-"), "a-b");
  EXPECT_EQ(human_bytes(2048), "2.0 KiB");
}

TEST(StringsTest, OutOfRangeNumbersSayWhy) {
  auto tiny = parse_double("1e-320");
  ASSERT_FALSE(tiny.ok());
  EXPECT_THAT(tiny.status().message(), HasSubstr("too small"));
  auto huge = parse_double("1e999");
  ASSERT_FALSE(huge.ok());
  EXPECT_THAT(huge.status().message(), HasSubstr("out of range"));
  EXPECT_FALSE(parse_double("inf").ok());
  EXPECT_FALSE(parse_double("nan").ok());
  auto big = parse_int("99999999999999999999");
  ASSERT_FALSE(big.ok());
  EXPECT_THAT(big.status().message(), HasSubstr("out of range"));
}

TEST(StringsTest, PrintableEscapesAndCuts) {
  EXPECT_EQ(printable("abc"), "abc");
  EXPECT_EQ(printable(std::string_view("a\0b\n", 4)), "a\\x00b\\x0a");
  EXPECT_EQ(printable("a\\b"), "a\\\\b");
  const std::string big(10'000'000, 'x');
  const std::string shown = printable(big);
  EXPECT_LT(shown.size(), 120u);
  EXPECT_THAT(shown, HasSubstr("10000000 bytes in all"));
}

TEST(FilesTest, MissingFileNamesPath) {
  auto r = read_file("/nonexistent/tp_file");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("/nonexistent/tp_file"), std::string::npos);
}

// A fresh directory under $TMPDIR (or /tmp) for the input-file tests.
std::string input_test_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/tp_input_file-XXXXXX";
  EXPECT_NE(::mkdtemp(templ.data()), nullptr);
  return templ;
}

constexpr InputKind kTestKind{"test file", 1024, "a small test file"};

TEST(InputFileTest, ReadsARegularFileWhole) {
  const std::string dir = input_test_dir();
  const std::string bytes("text\0more\n", 10);
  ASSERT_TRUE(write_file(dir + "/a.txt", bytes).ok());
  auto r = read_input_file("--x", dir + "/a.txt", kTestKind);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, bytes);
  auto f = open_input_file("--x", dir + "/a.txt", kTestKind);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_GE(f->fd(), 0);
  EXPECT_EQ(f->size(), 10);
  // Exactly at the cap is still accepted.
  ASSERT_EQ(::truncate((dir + "/a.txt").c_str(), 1024), 0);
  EXPECT_TRUE(read_input_file("--x", dir + "/a.txt", kTestKind).ok());
}

// Each kind of path that is not a regular file: one line naming what reads it, the path and what
// it is, with a hint; none of them blocks (a FIFO would block a plain open forever: the alarm
// ends the test binary instead of hanging the suite).
TEST(InputFileTest, RefusesWhatIsNotARegularFileWithoutBlocking) {
  const std::string dir = input_test_dir();
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  ASSERT_EQ(::symlink("loop_b", (dir + "/loop_a").c_str()), 0);
  ASSERT_EQ(::symlink("loop_a", (dir + "/loop_b").c_str()), 0);
  ASSERT_EQ(::symlink("gone.txt", (dir + "/dangling").c_str()), 0);
  ::alarm(60);
  const struct {
    std::string path;
    StatusCode code;
    const char* says;
  } cases[] = {
      {dir + "/fifo", StatusCode::kInvalidArgument, "is a FIFO (named pipe), not a regular file"},
      {"/dev/zero", StatusCode::kInvalidArgument, "is a character device, not a regular file"},
      {dir, StatusCode::kInvalidArgument, "is a directory, not a regular file"},
      {dir + "/loop_a", StatusCode::kInvalidArgument, "is a symbolic link loop"},
      {dir + "/dangling", StatusCode::kNotFound, "is a symbolic link to 'gone.txt'"},
      {dir + "/nope.txt", StatusCode::kNotFound, "does not exist"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    for (const Status& s : {read_input_file("--x", c.path, kTestKind).status(),
                            open_input_file("--x", c.path, kTestKind).status(),
                            check_input_file("--x", c.path, kTestKind)}) {
      EXPECT_EQ(s.code(), c.code) << s.message();
      EXPECT_THAT(s.message(), HasSubstr("--x '" + c.path + "'"));
      EXPECT_THAT(s.message(), HasSubstr(c.says));
      EXPECT_THAT(s.message(), HasSubstr("hint: "));
      EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
    }
  }
  ::alarm(0);
}

TEST(InputFileTest, RefusesAFileOverItsKindsCapBeforeReadingIt) {
  const std::string dir = input_test_dir();
  const std::string big = dir + "/big.json";
  ASSERT_TRUE(write_file(big, "").ok());
  ASSERT_EQ(::truncate(big.c_str(), 1025), 0);  // sparse: costs no disk
  for (const Status& s : {read_input_file("--costs", big, kTestKind).status(),
                          open_input_file("--costs", big, kTestKind).status(),
                          check_input_file("--costs", big, kTestKind)}) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("--costs '" + big +
                                       "' is 1.0 KiB (1025 bytes), more than "
                                       "the 1.0 KiB a test file may be; hint: "));
    EXPECT_THAT(s.message(), HasSubstr("a small test file"));
  }
  // A real cap: 300 MiB of sparse schedule is refused without reading (or allocating) it.
  ASSERT_EQ(::truncate(big.c_str(), int64_t{300} << 20), 0);
  auto r = read_input_file("schedule file", big, input_kind::kSchedule);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("(314572800 bytes), more than the 256.0 MiB"));
}

TEST(InputFileTest, AFileWhoseSizeSaysNothingIsReadUpToTheCap) {
  // /proc files say 0 bytes and still hold text: read to their end, bounded by the cap.
  auto r = read_input_file("status", "/proc/self/status", input_kind::kConfig);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_THAT(*r, HasSubstr("VmSize"));
  auto small =
      read_input_file("status", "/proc/self/status", InputKind{"status file", 16, "a short one"});
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(small.status().message(), HasSubstr("grew past the 16 B a status file may be"));
}

TEST(InputFileTest, UnreadableFileSaysTheOsReason) {
  if (::geteuid() == 0) GTEST_SKIP() << "root reads files whatever their mode";
  const std::string dir = input_test_dir();
  ASSERT_TRUE(write_file(dir + "/secret.txt", "x").ok());
  ASSERT_EQ(::chmod((dir + "/secret.txt").c_str(), 0), 0);
  auto r = read_input_file("--x", dir + "/secret.txt", kTestKind);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_THAT(r.status().message(), HasSubstr("cannot be opened: Permission denied; hint:"));
}

TEST(CheckedProductTest, RefusesOverflowAndNegatives) {
  EXPECT_EQ(checked_product({8, 128, 128}), 8 * 128 * 128);
  EXPECT_EQ(checked_product({}), 1);
  // B x NH x T x T of the largest flags: 2^16 x 2^16 x 2^17 x 2^17 overflows 64 bits.
  EXPECT_FALSE(
      checked_product({int64_t{1} << 16, int64_t{1} << 16, int64_t{1} << 17, int64_t{1} << 17}));
  EXPECT_FALSE(checked_product({INT64_MAX, 2}));
  EXPECT_FALSE(checked_product({4, -1}));
  EXPECT_EQ(checked_product({INT64_MAX, 1}), INT64_MAX);
}

TEST(AvailableMemoryTest, NamesItsSource) {
  const AvailableMemory m = available_memory();
  EXPECT_GT(m.bytes, 0);
  EXPECT_FALSE(m.source.empty());
}

}  // namespace
}  // namespace tightpipe
