#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tightpipe/base.h"
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
