// Shards end to end: write_shards, GNU tar interop, exact token order for seeds and 1..4 workers,
// splits, paths.
#include "tightpipe/shard.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "data/order.h"
#include "data/tar_samples.h"
#include "data/test_util.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using data_test::make_text;
using data_test::open_ok;
using data_test::ScratchDir;
using data_test::take_rows;
using Tokens = std::vector<int32_t>;

// Runs a shell command, returns its stdout; fails the test on a non-zero exit.
std::string sh(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  EXPECT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  EXPECT_EQ(rc, 0) << cmd << "\n" << out;
  return out;
}

// Writes `text` as shards of `per_shard` samples of T+1 = `chunk` bytes; returns the samples per
// shard in write order.
std::vector<std::vector<Tokens>> write_text_shards(const ScratchDir& dir, const std::string& text,
                                                   int32_t chunk, int64_t per_shard) {
  EXPECT_TRUE(write_file(dir.file("in.txt"), text).ok());
  ShardWriterOptions w;
  w.inputs = {dir.file("in.txt")};
  w.out_dir = dir.file("shards");
  w.seq_length = chunk - 1;
  w.samples_per_shard = per_shard;
  auto summary = write_shards(w);
  EXPECT_TRUE(summary.ok()) << summary.status().to_string();
  std::vector<std::vector<Tokens>> shards;
  for (size_t at = 0, i = 0; at < text.size(); at += chunk, ++i) {
    if (i % per_shard == 0) shards.emplace_back();
    shards.back().push_back(byte_tokenize(std::string_view(text).substr(at, chunk)));
  }
  if (summary.ok()) {
    EXPECT_EQ(summary->shards.size(), shards.size());
    EXPECT_EQ(summary->tokens, static_cast<int64_t>(text.size()));
    EXPECT_EQ(summary->dtype, "uint16");
  }
  return shards;
}

// The documented order (docs/data_format.md), written out independently of the loader: sources
// permuted per epoch, source p read by worker p % N, round-robin merge, shuffle buffer.
std::vector<Tokens> reference_order(const std::vector<std::vector<Tokens>>& shards, uint64_t seed,
                                    int32_t workers, int32_t buffer, int epochs) {
  std::vector<Tokens> out;
  const bool shuffle = buffer > 1;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::vector<size_t> order(shards.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    if (shuffle) {
      Rng rng = Rng(seed).fork(1).fork(epoch);
      for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
    }
    std::vector<std::vector<Tokens>> per_worker(workers);
    for (size_t p = 0; p < order.size(); ++p) {
      for (const Tokens& t : shards[order[p]]) per_worker[p % workers].push_back(t);
    }
    std::vector<Tokens> merged;
    std::vector<size_t> at(workers, 0);
    for (bool any = true; any;) {
      any = false;
      for (int32_t w = 0; w < workers; ++w) {
        if (at[w] < per_worker[w].size()) {
          merged.push_back(per_worker[w][at[w]++]);
          any = true;
        }
      }
    }
    if (!shuffle) {
      out.insert(out.end(), merged.begin(), merged.end());
      continue;
    }
    Rng rng = Rng(seed).fork(2).fork(epoch);
    std::vector<Tokens> buf;
    size_t next = 0;
    while (true) {
      while (next < merged.size() && buf.size() < static_cast<size_t>(buffer)) {
        buf.push_back(merged[next++]);
      }
      if (buf.empty()) break;
      size_t j = rng.below(buf.size());
      out.push_back(buf[j]);
      buf[j] = buf.back();
      buf.pop_back();
    }
  }
  return out;
}

TEST(Shards, WriterOutputListsAndExtractsWithGnuTar) {
  ScratchDir dir;
  const std::string text = make_text(5000, 11);
  auto shards = write_text_shards(dir, text, 100, 20);  // 50 samples -> 3 shards
  ASSERT_EQ(shards.size(), 3u);
  std::string listing = sh("tar -tvf " + dir.file("shards/shard-000000.tar"));
  EXPECT_NE(listing.find("000000000.tokens"), std::string::npos) << listing;
  EXPECT_NE(listing.find("000000019.json"), std::string::npos) << listing;
  EXPECT_EQ(listing.find("000000020"), std::string::npos) << listing;
  sh("mkdir -p " + dir.file("x") + " && tar -xf " + dir.file("shards/shard-000001.tar") + " -C " +
     dir.file("x"));
  auto tokens = read_file(dir.file("x/000000021.tokens"));
  ASSERT_TRUE(tokens.ok());
  ASSERT_EQ(tokens->size(), 200u);
  for (size_t i = 0; i < 100; ++i) {
    EXPECT_EQ(static_cast<unsigned char>((*tokens)[2 * i]),
              static_cast<unsigned char>(text[2100 + i]));
    EXPECT_EQ((*tokens)[2 * i + 1], 0);
  }
  auto meta = read_file(dir.file("x/000000021.json"));
  ASSERT_TRUE(meta.ok());
  EXPECT_NE(meta->find("\"offset\":2100"), std::string::npos) << *meta;
  EXPECT_NE(meta->find("\"dtype\":\"uint16\""), std::string::npos) << *meta;
}

TEST(Shards, WriterIsReproducibleAndHonorsShardSize) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("in.txt"), make_text(300000, 12)).ok());
  ShardWriterOptions w;
  w.inputs = {dir.file("in.txt")};
  w.out_dir = dir.file("a");
  w.seq_length = 1023;
  w.shard_size = 100 << 10;
  auto a = write_shards(w);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  w.out_dir = dir.file("b");
  auto b = write_shards(w);
  ASSERT_TRUE(b.ok());
  ASSERT_EQ(a->shards.size(), b->shards.size());
  EXPECT_GE(a->shards.size(), 6u);  // 600 KB of uint16 tokens at <= 100 KiB per shard
  for (size_t i = 0; i < a->shards.size(); ++i) {
    EXPECT_LE(fs::file_size(a->shards[i]), 100u << 10) << a->shards[i];
    EXPECT_EQ(*read_file(a->shards[i]), *read_file(b->shards[i])) << "shard " << i;
  }
  EXPECT_EQ(a->samples, (300000 + 1023) / 1024);
}

// The "Done when" test: exact token sequences, in the order the seed dictates, workers 1..4.
TEST(Shards, ExactOrderForSeedAndWorkers) {
  ScratchDir dir;
  const int32_t T = 31;
  const std::string text = make_text(32 * 7 * 13 + 32 * 5, 13);  // 96 samples, last shard short
  auto shards = write_text_shards(dir, text, T + 1, 13);
  ASSERT_EQ(shards.size(), 8u);
  size_t total = 0;
  for (auto& s : shards) total += s.size();
  for (int32_t buffer : {0, 10}) {
    for (uint64_t seed : {1u, 2u}) {
      for (int32_t workers = 1; workers <= 4; ++workers) {
        DataOptions o;
        o.path = dir.file("shards/shard-{000000..000007}.tar");
        o.split = Split::kAll;
        o.micro_batch_size = 3;
        o.seq_length = T;
        o.seed = seed;
        o.num_workers = workers;
        o.shuffle_buffer = buffer;
        o.prefetch = 1;  // small queues: exercises blocking
        auto loader = open_ok(o);
        ASSERT_TRUE(loader);
        auto rows = take_rows(*loader, static_cast<int>(2 * total / 3));  // two epochs
        auto want = reference_order(shards, seed, workers, buffer, 2);
        ASSERT_EQ(rows.size(), want.size());
        for (size_t i = 0; i < rows.size(); ++i) {
          ASSERT_EQ(rows[i], want[i])
              << "row " << i << " buffer " << buffer << " seed " << seed << " workers " << workers;
        }
        // The second epoch is used up but not yet left: that happens on the next sample.
        EXPECT_EQ(loader->stats().epochs_completed, 1);
        EXPECT_EQ(loader->position().epoch, 1);
        EXPECT_EQ(loader->position().samples_in_epoch, static_cast<int64_t>(total));
      }
    }
  }
}

TEST(Shards, GnuTarShardsOfTxtAndJsonAreRead) {
  ScratchDir dir;
  std::vector<std::string> texts;
  fs::create_directories(dir.file("plain"));
  for (int i = 0; i < 6; ++i) {
    texts.push_back(make_text(50 + 17 * i, 100 + i));
    ASSERT_TRUE(write_file(dir.file(fmt::format("plain/{:04}.txt", i)), texts.back()).ok());
    ASSERT_TRUE(write_file(dir.file(fmt::format("plain/{:04}.json", i)), "{\"label\": 1}").ok());
  }
  ASSERT_TRUE(write_file(dir.file("plain/README"), "no extension: ignored").ok());
  fs::create_directories(dir.file("gnu"));
  // Sorted names so that entries of one key are consecutive; './' prefixes and a directory entry.
  sh("cd " + dir.file("plain") + " && tar --sort=name --format=gnu -cf ../gnu/shard-000000.tar .");
  sh("cd " + dir.file("plain") + " && tar --sort=name --format=posix -cf ../gnu/shard-000001.tar " +
     "0000.txt 0000.json 0001.json 0001.txt");
  DataOptions o;
  o.path = dir.file("gnu");
  o.split = Split::kAll;
  o.shuffle_buffer = 0;
  o.micro_batch_size = 1;
  o.seq_length = 9;
  auto loader = open_ok(o);
  ASSERT_TRUE(loader);
  std::string stream;
  for (const auto& t : texts) stream += t;
  stream += texts[0] + texts[1];
  const size_t rows = stream.size() / 10;
  auto got = take_rows(*loader, static_cast<int>(rows));
  for (size_t r = 0; r < rows; ++r) {
    ASSERT_EQ(got[r], byte_tokenize(std::string_view(stream).substr(r * 10, 10))) << "row " << r;
  }
}

TEST(Shards, ReTarredWithGnuTarGivesTheSameTokens) {
  ScratchDir dir;
  const std::string text = make_text(3000, 14);
  write_text_shards(dir, text, 64, 100);
  sh("mkdir -p " + dir.file("x") + " " + dir.file("re") + " && tar -xf " +
     dir.file("shards/shard-000000.tar") + " -C " + dir.file("x") + " && cd " + dir.file("x") +
     " && tar --sort=name -cf ../re/shard-000000.tar *");
  DataOptions o;
  o.split = Split::kAll;
  o.shuffle_buffer = 0;
  o.micro_batch_size = 5;
  o.seq_length = 63;
  o.path = dir.file("shards/shard-000000.tar");
  auto a = open_ok(o);
  o.path = dir.file("re/shard-000000.tar");
  auto b = open_ok(o);
  ASSERT_TRUE(a && b);
  auto ra = take_rows(*a, 9);
  EXPECT_EQ(ra, take_rows(*b, 9));
  EXPECT_EQ(ra[0], byte_tokenize(text.substr(0, 64)));
}

TEST(Shards, SplitTrainValByShardAndBySampleForOneShard) {
  ScratchDir dir;
  const std::string text = make_text(16 * 120, 15);
  auto shards = write_text_shards(dir, text, 16, 10);  // 12 shards of 10
  ASSERT_EQ(shards.size(), 12u);
  DataOptions o;
  o.path = dir.file("shards");
  o.shuffle_buffer = 0;
  o.micro_batch_size = 10;
  o.seq_length = 15;
  o.split = Split::kVal;
  auto val = open_ok(o);
  ASSERT_EQ(val->sources().size(), 2u);  // ceil(12/10) shards
  EXPECT_EQ(val->sources()[0], dir.file("shards/shard-000010.tar"));
  auto rows = take_rows(*val, 2);
  EXPECT_EQ(rows.front(), shards[10][0]);
  EXPECT_EQ(rows.back(), shards[11][9]);
  o.split = Split::kTrain;
  auto train = open_ok(o);
  EXPECT_EQ(train->sources().size(), 10u);

  // One shard: samples 9, 19, ... are val.
  o.path = dir.file("shards/shard-000003.tar");
  o.micro_batch_size = 1;
  o.split = Split::kVal;
  auto v1 = open_ok(o);
  auto r1 = take_rows(*v1, 2);
  EXPECT_EQ(r1[0], shards[3][9]);
  EXPECT_EQ(r1[1], shards[3][9]) << "one val sample per epoch";
  o.split = Split::kTrain;
  auto t1 = open_ok(o);
  auto r9 = take_rows(*t1, 10);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(r9[i], shards[3][i]);
  EXPECT_EQ(r9[9], shards[3][0]);
}

TEST(Shards, ReplicasPartitionEachEpoch) {
  ScratchDir dir;
  const std::string text = make_text(16 * 60, 16);
  auto shards = write_text_shards(dir, text, 16, 7);
  std::multiset<Tokens> got, want;
  for (auto& s : shards) want.insert(s.begin(), s.end());
  for (int32_t r = 0; r < 4; ++r) {
    DataOptions o;
    o.path = dir.file("shards");
    o.split = Split::kAll;
    o.shuffle_buffer = 8;
    o.num_workers = 2;
    o.replica = r;
    o.num_replicas = 4;
    o.micro_batch_size = 15;
    o.seq_length = 15;
    auto l = open_ok(o);
    for (auto& row : take_rows(*l, 1)) got.insert(row);
    EXPECT_EQ(l->stats().epochs_completed, 0);
    EXPECT_EQ(l->stats().samples, 15);
  }
  EXPECT_EQ(got, want);
}

TEST(Shards, PositionRestoreAcrossShardsAndWorkers) {
  ScratchDir dir;
  auto shards = write_text_shards(dir, make_text(40 * 90, 17), 40, 9);
  for (int32_t workers : {1, 3}) {
    DataOptions o;
    o.path = dir.file("shards");
    o.split = Split::kAll;
    o.num_workers = workers;
    o.shuffle_buffer = 12;
    o.micro_batch_size = 4;
    o.seq_length = 25;  // rows straddle samples
    auto a = open_ok(o);
    take_rows(*a, 50);  // past one epoch
    DataPosition pos = a->position();
    EXPECT_GE(pos.epoch, 1);
    auto expected = take_rows(*a, 10);
    auto b = open_ok(o);
    ASSERT_TRUE(b->restore(*DataPosition::from_json(pos.to_json())).ok());
    EXPECT_EQ(take_rows(*b, 10), expected) << workers << " workers";
    o.num_workers = workers + 1;
    auto c = open_ok(o);
    EXPECT_EQ(c->restore(pos).code(), StatusCode::kInvalidArgument);
  }
}

TEST(Shards, KeySplitFollowsWebDataset) {
  using data_internal::split_key;
  EXPECT_EQ(split_key("a/b/0001.tokens")->first, "a/b/0001");
  EXPECT_EQ(split_key("./x/0001.seg.txt")->second, "seg.txt");
  EXPECT_EQ(split_key("dir.v2/0001.json")->first, "dir.v2/0001");
  EXPECT_FALSE(split_key("README").has_value());
  EXPECT_FALSE(split_key("a/.hidden").has_value());
  EXPECT_FALSE(split_key("a/").has_value());
}

TEST(Shards, ParseByteSize) {
  EXPECT_EQ(*parse_byte_size("64MiB"), 64 << 20);
  EXPECT_EQ(*parse_byte_size("4096"), 4096);
  EXPECT_EQ(*parse_byte_size("1.5GiB"), 3ll << 29);
  EXPECT_EQ(*parse_byte_size("100MB"), 100000000);
  EXPECT_EQ(*parse_byte_size("2k"), 2048);
  EXPECT_FALSE(parse_byte_size("MiB").ok());
  EXPECT_FALSE(parse_byte_size("12 parsecs").ok());
  EXPECT_FALSE(parse_byte_size("0").ok());
}

}  // namespace
}  // namespace tightpipe
