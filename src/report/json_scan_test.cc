// scan_json against nlohmann's own SAX parser: the same handler calls on every valid text (the
// bundled real traces, tricky values, random mutations, every read size), false on every text
// nlohmann refuses; and the Kineto reader's fallback to nlohmann (its error messages, a
// byte-order mark).
#include "report/json_scan.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/gpu_trace.h"

namespace tightpipe::report_internal {
namespace {

namespace fs = std::filesystem;

// Writes down every call, arguments included (a double by its bits).
class Recorder : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::vector<std::string> calls;
  bool null() override { return add("null"); }
  bool boolean(bool v) override { return add(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return add(fmt::format("int {}", v)); }
  bool number_unsigned(number_unsigned_t v) override { return add(fmt::format("uint {}", v)); }
  bool number_float(number_float_t v, const string_t& s) override {
    return add(fmt::format("float {:a} '{}'", v, s));
  }
  bool string(string_t& v) override { return add(fmt::format("string {} '{}'", v.size(), v)); }
  bool binary(binary_t&) override { return add("binary"); }
  bool start_object(std::size_t n) override { return add(fmt::format("{{ {}", n)); }
  bool key(string_t& k) override {
    std::string s = fmt::format("key {} '{}'", k.size(), k);
    k = "moved away";  // as a handler that takes the string may leave it
    return add(std::move(s));
  }
  bool end_object() override { return add("}"); }
  bool start_array(std::size_t n) override { return add(fmt::format("[ {}", n)); }
  bool end_array() override { return add("]"); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

 private:
  bool add(std::string s) {
    calls.push_back(std::move(s));
    return true;
  }
};

struct Outcome {
  bool ok = false;
  std::vector<std::string> calls;
};

Outcome by_nlohmann(const std::string& text) {
  Outcome o;
  Recorder r;
  std::istringstream in(text);
  o.ok = nlohmann::json::sax_parse(in, &r, nlohmann::json::input_format_t::json, true);
  o.calls = std::move(r.calls);
  return o;
}

// `text` handed over `chunk` bytes per read.
Outcome by_scanner(const std::string& text, size_t chunk) {
  Outcome o;
  Recorder r;
  size_t at = 0;
  o.ok = scan_json(
      [&](char* buf, size_t cap) -> int64_t {
        const size_t n = std::min({cap, chunk, text.size() - at});
        std::memcpy(buf, text.data() + at, n);
        at += n;
        return static_cast<int64_t>(n);
      },
      &r);
  o.calls = std::move(r.calls);
  return o;
}

// Whenever the scanner says yes, nlohmann says yes with the same calls; and the scanner says yes
// to everything nlohmann takes, except texts starting with a byte-order mark (left to nlohmann).
void expect_agree(const std::string& text, size_t chunk) {
  const Outcome want = by_nlohmann(text);
  const Outcome got = by_scanner(text, chunk);
  const std::string shown = printable(text, 200);
  if (got.ok) {
    ASSERT_TRUE(want.ok) << "the scanner took what nlohmann refuses: " << shown;
    ASSERT_EQ(got.calls, want.calls) << shown;
  } else if (want.ok && static_cast<unsigned char>(text[0]) != 0xEF) {
    FAIL() << "the scanner refused valid JSON (read size " << chunk << "): " << shown;
  }
}

std::string gunzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr) << path;
  std::string text;
  if (!f) return text;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return text;
}

std::vector<std::string> bundled_traces() {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(std::string(TP_SHARED_DIR) + "/data/traces")) {
    if (e.path().string().ends_with(".json.gz")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

const std::vector<std::string> kValid = {
    R"({})",
    R"([])",
    R"("")",
    "0",
    "-0",
    "7",
    "-7",
    "0.5",
    "-0.0",
    "1e5",
    "1E+5",
    "1e-5",
    "12.345e-6",
    "1700000000123.456",
    "4458676983543.183",
    "9223372036854775807",
    "9223372036854775808",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "-9223372036854775809",
    "123456789012345678901234567890",
    "1e308",
    "true",
    "false",
    "null",
    " \t\r\n{ \"a\" : [ 1 , 2.5 , \"x\" , null , true , false , { } , [ ] ] } \n",
    R"({"a":{"b":{"c":[[[]]]}},"":""})",
    R"(["\"\\\/\b\f\n\r\t", "\u0041\u00e9\u20ac\uD83D\uDE00", "\u0000x", "tab\u0009"])",
    "[\"caf\xC3\xA9\", \"\xE2\x82\xAC\", \"\xF0\x9F\x98\x80\", \"\xED\x9F\xBF\", \"\x7F\"]",
    R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 1.5,
       "dur": 2, "args": {"correlation": 3, "grid": [1, 1, 1]}}], "dup": 1, "dup": 2})",
    "\xEF\xBB\xBF{\"bom\": 1}",
};

const std::vector<std::string> kInvalid = {
    "",
    " ",
    "{",
    "[",
    "}",
    "]",
    "[1,]",
    "{\"a\"}",
    "{\"a\":}",
    "{\"a\" 1}",
    "{a:1}",
    "[1 2]",
    "01",
    "-",
    "-a",
    "1.",
    "1.e5",
    ".5",
    "1e",
    "1e+",
    "+1",
    "0x10",
    "NaN",
    "Infinity",
    "1e400",
    "-1e400",
    "tru",
    "nul",
    "falsy",
    "\"abc",
    "\"a\\x\"",
    "\"\\u12\"",
    "\"\\uZZZZ\"",
    "\"\\uD83D\"",
    "\"\\uD83Dx\"",
    "\"\\uD83D\\u0041\"",
    "\"\\uDE00\"",
    "\"a\nb\"",
    "\"\x01\"",
    "\"\x80\"",
    "\"\xC0\xAF\"",
    "\"\xC3\"",
    "\"\xE0\x80\x80\"",
    "\"\xED\xA0\x80\"",
    "\"\xF4\x90\x80\x80\"",
    "\"\xF5\x80\x80\x80\"",
    "\"\xFF\"",
    "{} {}",
    "[] x",
    "1 2",
    "[1]]",
    "{\"a\":1}}",
    "\xEF\xBB{}",
    "{\"a\":1,}",
    "[\"a\",,1]",
    "/* c */ 1",
};

TEST(JsonScan, BundledTracesGiveNlohmannsCalls) {
  const auto traces = bundled_traces();
  ASSERT_FALSE(traces.empty());
  for (const std::string& path : traces) {
    const std::string text = gunzip(path);
    ASSERT_FALSE(text.empty()) << path;
    const Outcome want = by_nlohmann(text);
    ASSERT_TRUE(want.ok) << path;
    for (size_t chunk : {size_t{1} << 20, size_t{4093}}) {
      const Outcome got = by_scanner(text, chunk);
      EXPECT_TRUE(got.ok) << path;
      EXPECT_EQ(got.calls.size(), want.calls.size()) << path;
      EXPECT_TRUE(got.calls == want.calls)
          << path << ": the calls differ (read size " << chunk << ")";
    }
  }
}

TEST(JsonScan, TrickyValuesAtEveryReadSize) {
  for (const std::string& text : kValid) {
    EXPECT_TRUE(by_nlohmann(text).ok) << "not valid after all: " << printable(text);
    for (size_t chunk : {1, 2, 3, 5, 1000}) expect_agree(text, chunk);
    if (static_cast<unsigned char>(text[0]) != 0xEF) {
      EXPECT_TRUE(by_scanner(text, 3).ok) << printable(text);
    }
  }
}

TEST(JsonScan, InvalidTextIsLeftToNlohmann) {
  for (const std::string& text : kInvalid) {
    EXPECT_FALSE(by_nlohmann(text).ok) << "valid after all: " << printable(text);
    for (size_t chunk : {1, 7, 1000}) {
      EXPECT_FALSE(by_scanner(text, chunk).ok) << printable(text) << " (read size " << chunk << ")";
    }
  }
}

// Random edits of valid texts (a byte replaced by one that matters to JSON, deleted, inserted,
// or a piece repeated): whatever comes out, the scanner agrees with nlohmann.
TEST(JsonScan, MutatedTextsAgree) {
  std::string slice = gunzip(std::string(TP_SHARED_DIR) + "/data/traces/rocm_mi250_rank0.json.gz");
  ASSERT_GT(slice.size(), 2000u);
  std::vector<std::string> bases = kValid;
  bases.push_back(slice.substr(0, 3000));  // cut: invalid, and mutations may not repair it
  bases.push_back(slice);
  static const std::string kBytes =
      std::string(
          "{}[],:\" \\/.eE+-0123456789tfnulbrxuDdA\t\n\x01\x1f\x7f\x80\xbf\xc3\xa9\xe2"
          "\xed\xef\xf0\xf4\xff") +
      std::string(1, '\0');
  Rng rng(15);
  int agreed_valid = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string t = bases[rng.below(bases.size())];
    const int edits = 1 + static_cast<int>(rng.below(3));
    for (int e = 0; e < edits && !t.empty(); ++e) {
      const size_t at = rng.below(t.size());
      switch (rng.below(4)) {
        case 0:
          t[at] = kBytes[rng.below(kBytes.size())];
          break;
        case 1:
          t.erase(at, 1);
          break;
        case 2:
          t.insert(t.begin() + static_cast<std::ptrdiff_t>(at), kBytes[rng.below(kBytes.size())]);
          break;
        default:
          t.insert(at, t.substr(at, 1 + rng.below(8)));
          break;
      }
    }
    if (t.empty()) continue;
    const size_t chunk = 1 + rng.below(64);
    expect_agree(t, chunk);
    if (HasFatalFailure()) return;
    agreed_valid += by_nlohmann(t).ok;
  }
  EXPECT_GT(agreed_valid, 100);  // the mutations kept enough texts valid to compare calls
}

TEST(JsonScan, ReadErrorGivesUpEvenAfterACompleteValue) {
  Recorder r;
  bool done = false;
  EXPECT_FALSE(scan_json(
      [&](char* buf, size_t) -> int64_t {
        if (done) return -1;
        done = true;
        std::memcpy(buf, "[1]", 3);
        return 3;
      },
      &r));
}

TEST(JsonScan, AHandlerThatStopsStopsTheScan) {
  struct Stop : Recorder {
    bool number_unsigned(number_unsigned_t) override { return false; }
  } s;
  size_t at = 0;
  const std::string text = "[1, 2]";
  EXPECT_FALSE(scan_json(
      [&](char* buf, size_t cap) -> int64_t {
        const size_t n = std::min(cap, text.size() - at);
        std::memcpy(buf, text.data() + at, n);
        at += n;
        return static_cast<int64_t>(n);
      },
      &s));
  EXPECT_EQ(s.calls, std::vector<std::string>{"[ 18446744073709551615"});
}

// ----- the Kineto reader: what the scanner leaves to nlohmann ---------------------------------

constexpr const char* kTinyTrace = R"({"distributedInfo": {"backend": "nccl", "rank": 0,
  "world_size": 1}, "traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#3", "ts": 100, "dur": 50},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 2,
   "args": {"correlation": 7}},
  {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 120.5, "dur": 10.25,
   "args": {"correlation": 7, "device": 0, "stream": 7}}]})";

std::string write_temp(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("json_scan_test_{}", getpid());
  fs::create_directories(dir);
  const std::string path = (dir / name).string();
  EXPECT_TRUE(write_file(path, text).ok());
  return path;
}

TEST(JsonScan, ReaderTakesAByteOrderMarkThroughNlohmann) {
  auto plain = read_kineto_trace(write_temp("plain.json", kTinyTrace));
  auto bom = read_kineto_trace(write_temp("bom.json", std::string("\xEF\xBB\xBF") + kTinyTrace));
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  ASSERT_TRUE(bom.ok()) << bom.status().to_string();
  ASSERT_EQ(plain->events.size(), 1u);
  ASSERT_EQ(bom->events.size(), 1u);
  EXPECT_EQ(plain->events[0].start_ns, 120'500);
  EXPECT_EQ(plain->events[0].end_ns, 130'750);
  EXPECT_EQ(plain->events[0].step, 3);
  EXPECT_EQ(bom->events[0].start_ns, plain->events[0].start_ns);
  EXPECT_EQ(bom->events[0].end_ns, plain->events[0].end_ns);
  EXPECT_EQ(bom->events[0].step, plain->events[0].step);
  EXPECT_EQ(bom->job, plain->job);
}

// Where nlohmann's parser stops on `text`.
size_t nlohmann_error_at(const std::string& text) {
  struct Where : Recorder {
    size_t at = 0;
    bool parse_error(std::size_t pos, const std::string&,
                     const nlohmann::detail::exception&) override {
      at = pos;
      return false;
    }
  } where;
  std::istringstream in(text);
  EXPECT_FALSE(nlohmann::json::sax_parse(in, &where, nlohmann::json::input_format_t::json, true));
  return where.at;
}

TEST(JsonScan, ReaderErrorsAreNlohmannsPositions) {
  std::string broken = kTinyTrace;
  broken.insert(broken.find("\"gemm\"") + 6, ",,");
  const std::string cut = std::string(kTinyTrace).substr(0, 200);
  for (const std::string& text : {broken, cut}) {
    auto got = read_kineto_trace(write_temp("broken.json", text));
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find(
                  fmt::format("invalid JSON at byte {} ", nlohmann_error_at(text))),
              std::string::npos)
        << got.status().to_string();
  }
}

TEST(JsonScan, ANulByteAfterTheValueEndsTheInputAsForNlohmann) {
  // nlohmann's lexer reads a NUL byte as the end of the input: a trace padded with zeros reads.
  for (const std::string text :
       {std::string("[1]\0\0\0", 6), std::string("{} \0garbage", 11), std::string("7\0", 2)}) {
    EXPECT_TRUE(by_nlohmann(text).ok);
    for (size_t chunk : {1, 1000}) expect_agree(text, chunk);
    EXPECT_TRUE(by_scanner(text, 1).ok) << printable(text);
  }
  auto padded = read_kineto_trace(write_temp("padded.json", kTinyTrace + std::string(64, '\0')));
  ASSERT_TRUE(padded.ok()) << padded.status().to_string();
  EXPECT_EQ(padded->events.size(), 1u);
}

}  // namespace
}  // namespace tightpipe::report_internal
