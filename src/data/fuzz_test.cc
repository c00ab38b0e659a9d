// Fuzz: deterministic mutations of a real shard (bit flips, random bytes, truncation, zeroed and
// garbled headers, insertions). Every mutant must end in batches or a clean Status, never a crash,
// a hang or a token outside the vocabulary. Run under -DTIGHTPIPE_SANITIZE=ON to catch memory
// errors. TP_DATA_FUZZ_CASES overrides the number of mutants.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "data/test_util.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/shard.h"

namespace tightpipe {
namespace {

using data_test::make_text;
using data_test::ScratchDir;

std::string mutate(std::string b, Rng& rng, int kind) {
  const size_t n = b.size();
  switch (kind) {
    case 0: {  // flip a few bits anywhere
      int flips = 1 + static_cast<int>(rng.below(8));
      for (int i = 0; i < flips; ++i) b[rng.below(n)] ^= static_cast<char>(1 << rng.below(8));
      break;
    }
    case 1: {  // overwrite a short run with random bytes
      size_t at = rng.below(n), len = 1 + rng.below(64);
      for (size_t i = at; i < std::min(n, at + len); ++i) b[i] = static_cast<char>(rng.below(256));
      break;
    }
    case 2:  // truncate anywhere
      b.resize(rng.below(n));
      break;
    case 3: {  // zero one 512-byte block (an early end-of-archive or a hole in data)
      size_t block = rng.below(n / 512) * 512;
      std::fill(b.begin() + block, b.begin() + block + 512, '\0');
      break;
    }
    case 4: {  // insert random bytes (shifts every later header)
      size_t at = rng.below(n), len = 1 + rng.below(700);
      std::string junk(len, '\0');
      for (auto& c : junk) c = static_cast<char>(rng.below(256));
      b.insert(at, junk);
      break;
    }
    case 5: {  // garble one field of one header: name, size, checksum, type, magic
      size_t header = rng.below(n / 1024) * 1024;  // every entry here is 1 header + 1 data block
      static constexpr size_t kFields[] = {0, 124, 130, 148, 156, 257};
      size_t at = header + kFields[rng.below(6)] + rng.below(6);
      b[at] = static_cast<char>(rng.below(2) ? rng.below(256) : '7');
      break;
    }
  }
  return b;
}

int fuzz_cases() {
  const char* env = std::getenv("TP_DATA_FUZZ_CASES");
  return env ? std::atoi(env) : 240;
}

TEST(DataFuzz, MutatedShardsNeverCrash) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("in.txt"), make_text(16 * 24, 31)).ok());
  ShardWriterOptions w;
  w.inputs = {dir.file("in.txt")};
  w.out_dir = dir.file("good");
  w.seq_length = 15;
  w.samples_per_shard = 12;
  auto written = write_shards(w);
  ASSERT_TRUE(written.ok()) << written.status().to_string();
  ASSERT_EQ(written->shards.size(), 2u);
  const std::string original = *read_file(written->shards[0]);
  const std::string other = *read_file(written->shards[1]);

  Rng rng(20261129);
  std::map<std::string, int> outcomes;
  const int cases = fuzz_cases();
  for (int c = 0; c < cases; ++c) {
    const int kind = c % 6;
    std::string mutant = mutate(original, rng, kind);
    const std::string sub = dir.file("m");
    std::filesystem::remove_all(sub);
    std::filesystem::create_directories(sub);
    ASSERT_TRUE(write_file(sub + "/shard-000000.tar", mutant).ok());
    ASSERT_TRUE(write_file(sub + "/shard-000001.tar", other).ok());
    DataOptions o;
    o.path = sub;
    o.split = Split::kAll;
    o.micro_batch_size = 2;
    o.seq_length = 15;
    o.num_workers = 1 + c % 2;
    o.shuffle_buffer = c % 3 == 0 ? 4 : 0;
    o.on_corrupt = (c / 6) % 2 == 0 ? OnCorrupt::kFail : OnCorrupt::kSkip;
    auto l = DataLoader::open(o);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    Status end;
    for (int i = 0; i < 40 && end.ok(); ++i) {  // 40 batches = 80 samples > 3 epochs of 24
      auto b = (*l)->next();
      if (!b.ok()) {
        end = b.status();
        break;
      }
      for (int32_t t : b->tokens) ASSERT_TRUE(t >= 0 && t < 256) << "case " << c << ": " << t;
    }
    std::string key = std::string(on_corrupt_name(o.on_corrupt)) + "/";
    if (end.ok()) {
      key += (*l)->stats().corrupt_skipped > 0 ? "skipped-and-read" : "read";
    } else {
      EXPECT_TRUE(end.code() == StatusCode::kCorruption ||
                  end.code() == StatusCode::kFailedPrecondition)
          << "case " << c << ": " << end.to_string();
      if (end.code() == StatusCode::kCorruption) {
        EXPECT_NE(end.message().find("shard-000000.tar"), std::string::npos) << end.message();
        EXPECT_NE(end.message().find("byte offset"), std::string::npos) << end.message();
      }
      key += std::string(status_code_name(end.code()));
    }
    ++outcomes[key];
  }
  std::string summary;
  for (const auto& [k, v] : outcomes) summary += fmt::format(" {}={}", k, v);
  std::printf("fuzz: %d mutants:%s\n", cases, summary.c_str());
  if (cases >= 60) {
    // The mutations must reach both the error paths and the skip paths.
    EXPECT_GT(outcomes["fail/Corruption"], 0) << summary;
    EXPECT_GT(outcomes["skip/skipped-and-read"], 0) << summary;
  }
}

}  // namespace
}  // namespace tightpipe
