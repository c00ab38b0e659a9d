// Bad inputs: truncated, corrupt, empty and non-tar shards each get an error naming the file, the
// entry and the byte offset, or are skipped and counted under OnCorrupt::kSkip.
#include <gtest/gtest.h>

#include <filesystem>

#include "data/test_util.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/shard.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using data_test::make_text;
using data_test::ScratchDir;
using data_test::take_rows;

// 3 shards of 10 samples of 32 tokens; returns the shard paths.
std::vector<std::string> good_shards(const ScratchDir& dir, const std::string& sub = "shards") {
  EXPECT_TRUE(write_file(dir.file("in.txt"), make_text(32 * 30, 21)).ok());
  ShardWriterOptions w;
  w.inputs = {dir.file("in.txt")};
  w.out_dir = dir.file(sub);
  w.seq_length = 31;
  w.samples_per_shard = 10;
  auto s = write_shards(w);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? s->shards : std::vector<std::string>{};
}

DataOptions options_for(const std::string& path, OnCorrupt on_corrupt = OnCorrupt::kFail) {
  DataOptions o;
  o.path = path;
  o.split = Split::kAll;
  o.shuffle_buffer = 0;
  o.micro_batch_size = 2;
  o.seq_length = 31;
  o.on_corrupt = on_corrupt;
  return o;
}

// Reads batches until an error or `max_batches`; returns the first error (OK if none).
Status drain(const DataOptions& o, int max_batches = 40) {
  auto l = DataLoader::open(o);
  if (!l.ok()) return l.status();
  for (int i = 0; i < max_batches; ++i) {
    auto b = (*l)->next();
    if (!b.ok()) {
      // Sticky: the same error again.
      auto again = (*l)->next();
      EXPECT_EQ(again.status().message(), b.status().message());
      return b.status();
    }
  }
  return OkStatus();
}

void expect_mentions(const Status& s, std::initializer_list<std::string> parts) {
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
  }
}

std::string bytes_of(const std::string& path) { return *read_file(path); }

TEST(CorruptShards, TruncatedInsideAnEntry) {
  ScratchDir dir;
  auto shards = good_shards(dir);
  std::string b = bytes_of(shards[1]);
  // Entries are 512-byte header + 512 data each (64-byte tokens, < 512 json): cut in entry 5's
  // data.
  ASSERT_TRUE(write_file(shards[1], b.substr(0, 5 * 1024 + 512 + 20)).ok());
  Status s = drain(options_for(dir.file("shards")));
  expect_mentions(s, {shards[1], "000000012.json", "byte offset 5120", "truncated"});
}

TEST(CorruptShards, TruncatedAtAnEntryBoundaryHasNoEndMarker) {
  ScratchDir dir;
  auto shards = good_shards(dir);
  ASSERT_TRUE(write_file(shards[0], bytes_of(shards[0]).substr(0, 8 * 1024)).ok());
  Status s = drain(options_for(shards[0]));
  expect_mentions(s, {shards[0], "end-of-archive", "byte offset 8192", "000000003.json"});
}

TEST(CorruptShards, DamagedHeader) {
  ScratchDir dir;
  auto shards = good_shards(dir);
  std::string b = bytes_of(shards[2]);
  b[3 * 1024 + 150] ^= 0x5a;  // checksum field of the 4th entry's header
  ASSERT_TRUE(write_file(shards[2], b).ok());
  Status s = drain(options_for(dir.file("shards")));
  expect_mentions(s, {shards[2], "bad tar header at byte offset 3072", "000000021.tokens"});
}

TEST(CorruptShards, NotATar) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("x.tar"), make_text(5000, 22)).ok());
  Status s = drain(options_for(dir.file("x.tar")));
  expect_mentions(s, {dir.file("x.tar"), "not a tar archive", "byte offset 0"});
}

TEST(CorruptShards, EmptyFileAndEntrylessTar) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("empty.tar"), "").ok());
  expect_mentions(drain(options_for(dir.file("empty.tar"))), {dir.file("empty.tar"), "0 bytes"});
  ASSERT_TRUE(write_file(dir.file("zeros.tar"), std::string(10240, '\0')).ok());
  expect_mentions(drain(options_for(dir.file("zeros.tar"))), {dir.file("zeros.tar"), "no samples"});
}

TEST(CorruptShards, BadSamples) {
  ScratchDir dir;
  fs::create_directories(dir.file("p"));
  ASSERT_TRUE(write_file(dir.file("p/0001.tokens"), std::string("\x01\x00\x02", 3)).ok());
  ASSERT_TRUE(write_file(dir.file("p/0001.json"), "{\"dtype\": \"uint16\"}").ok());
  std::system(("cd " + dir.file("p") + " && tar -cf ../odd.tar 0001.tokens 0001.json").c_str());
  expect_mentions(drain(options_for(dir.file("odd.tar"))),
                  {dir.file("odd.tar"), "entry '0001.tokens' at byte offset 0", "multiple of 2"});

  ASSERT_TRUE(write_file(dir.file("p/0001.tokens"), std::string("\x01\x00\x02\x01", 4)).ok());
  std::system(("cd " + dir.file("p") + " && tar -cf ../big.tar 0001.tokens 0001.json").c_str());
  expect_mentions(drain(options_for(dir.file("big.tar"))),
                  {"token 258 at index 1 is outside the vocabulary (size 256)"});

  ASSERT_TRUE(write_file(dir.file("p/0001.json"), "{\"dtype\": ").ok());
  std::system(("cd " + dir.file("p") + " && tar -cf ../json.tar 0001.tokens 0001.json").c_str());
  expect_mentions(drain(options_for(dir.file("json.tar"))),
                  {"entry '0001.json' at byte offset 1024", "not a JSON object"});

  std::system(("cd " + dir.file("p") + " && tar -cf ../nojson.tar 0001.json").c_str());
  expect_mentions(drain(options_for(dir.file("nojson.tar"))), {"no .tokens or .txt"});
}

TEST(CorruptShards, SkipCountsAndSaysWhich) {
  ScratchDir dir;
  auto shards = good_shards(dir);
  // Shard 1: cut inside entry 5 (samples 10, 11 survive); add an empty and a non-tar shard.
  ASSERT_TRUE(write_file(shards[1], bytes_of(shards[1]).substr(0, 5 * 1024 + 600)).ok());
  ASSERT_TRUE(write_file(dir.file("shards/shard-000003.tar"), "").ok());
  ASSERT_TRUE(write_file(dir.file("shards/shard-000004.tar"), "hello, not a tar").ok());
  DataOptions o = options_for(dir.file("shards"), OnCorrupt::kSkip);
  o.micro_batch_size = 22;  // 10 + 2 + 10 good samples: exactly one epoch
  auto l = DataLoader::open(o);
  ASSERT_TRUE(l.ok());
  auto rows = take_rows(**l, 2);
  DataStats st = (*l)->stats();
  // Counted in stream order: epoch 0's three, then shard 1's again in epoch 1 (its 2 good samples
  // come before the cut); shards 3 and 4 of epoch 1 are not reached yet.
  EXPECT_EQ(st.corrupt_skipped, 4);
  ASSERT_EQ(st.corrupt_messages.size(), 4u);
  EXPECT_NE(st.corrupt_messages[0].find(shards[1]), std::string::npos) << st.corrupt_messages[0];
  EXPECT_NE(st.corrupt_messages[1].find("shard-000003.tar"), std::string::npos);
  EXPECT_NE(st.corrupt_messages[2].find("not a tar"), std::string::npos);
  auto text = make_text(32 * 30, 21);
  EXPECT_EQ(rows[11], byte_tokenize(text.substr(11 * 32, 32)));
  EXPECT_EQ(rows[12], byte_tokenize(text.substr(20 * 32, 32)));
  EXPECT_EQ(st.samples, 44);
  EXPECT_EQ(rows[22], rows[0]);
}

TEST(CorruptShards, SkipEverythingIsAnErrorNotAHang) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("a.tar"), "junk").ok());
  ASSERT_TRUE(write_file(dir.file("b.tar"), "").ok());
  DataOptions o = options_for(dir.str(), OnCorrupt::kSkip);
  o.num_workers = 2;
  Status s = drain(o);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.to_string();
  EXPECT_NE(s.message().find("2 corrupt"), std::string::npos) << s.message();
}

TEST(CorruptShards, MissingPatternMemberIsNotFound) {
  ScratchDir dir;
  good_shards(dir);
  auto l = DataLoader::open(options_for(dir.file("shards/shard-{000000..000005}.tar")));
  EXPECT_EQ(l.status().code(), StatusCode::kNotFound);
  EXPECT_NE(l.status().message().find("3 of 6 files missing, first"), std::string::npos)
      << l.status().message();
  auto e = DataLoader::open(options_for(dir.file("in.txt") + ".d"));
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tightpipe
