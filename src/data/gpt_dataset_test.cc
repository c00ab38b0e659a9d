// Indexed datasets as --data-path (src/data/gpt_dataset.cc): --data-path words and --split
// parsing, Megatron's split rounding and blending rule, the sample order against a naive
// re-implementation, restore, replicas, the real Megatron tiny Shakespeare, and bad input.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/order.h"
#include "data/test_util.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/indexed_dataset.h"

namespace tightpipe {
namespace {

using data_test::ScratchDir;
using data_test::take_rows;
using Rows = std::vector<std::vector<int32_t>>;

const std::string kShakespeare =
    std::string(TP_SHARED_DIR) + "/data/megatron/tinyshakespeare_gpt2_text_document";

// A document: its sequences' tokens.
using Document = std::vector<std::vector<int32_t>>;

void write_dataset(const std::string& prefix, const std::vector<Document>& docs,
                   IndexedDtype dtype = IndexedDtype::kUint16) {
  auto w = IndexedDatasetWriter::create(prefix, dtype);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (const Document& doc : docs) {
    std::vector<int32_t> tokens;
    std::vector<int64_t> lengths;
    for (const auto& seq : doc) {
      tokens.insert(tokens.end(), seq.begin(), seq.end());
      lengths.push_back(static_cast<int64_t>(seq.size()));
    }
    ASSERT_TRUE((*w)->add_document(tokens, lengths).ok());
  }
  ASSERT_TRUE((*w)->finish().ok());
}

// `n` documents of 1-3 sequences of 0-12 tokens each (some empty), token ids in [base, base+50).
std::vector<Document> make_documents(int n, int32_t base, uint64_t seed) {
  Rng rng(seed);
  std::vector<Document> docs(n);
  for (Document& doc : docs) {
    const int seqs = 1 + static_cast<int>(rng.below(3));
    for (int s = 0; s < seqs; ++s) {
      std::vector<int32_t> seq(rng.below(13));
      for (int32_t& t : seq) t = base + static_cast<int32_t>(rng.below(50));
      doc.push_back(seq);
    }
  }
  return docs;
}

// The naive twin of one member's stream: per epoch, the part's documents in the seeded order as
// one plain vector, cut into (T+1)-token samples every T tokens, taken in the seeded order.
Rows naive_rows(const std::vector<Document>& docs, int64_t begin, int64_t end, int64_t T,
                uint64_t seed, int64_t member, bool shuffle, size_t n) {
  Rows rows;
  for (int64_t epoch = 0; rows.size() < n; ++epoch) {
    const std::vector<int64_t> order =
        data_internal::member_order(static_cast<size_t>(end - begin), seed,
                                    data_internal::kDocumentOrderStream, member, epoch, shuffle);
    std::vector<int32_t> stream;
    for (int64_t d : order) {
      for (const auto& seq : docs[begin + d]) stream.insert(stream.end(), seq.begin(), seq.end());
    }
    const int64_t samples = (static_cast<int64_t>(stream.size()) - 1) / T;
    const std::vector<int64_t> sample_order =
        data_internal::member_order(static_cast<size_t>(samples), seed,
                                    data_internal::kSampleOrderStream, member, epoch, shuffle);
    for (int64_t j : sample_order) {
      if (rows.size() == n) break;
      rows.emplace_back(stream.begin() + j * T, stream.begin() + j * T + T + 1);
    }
  }
  return rows;
}

DataOptions indexed_options(const std::string& path, int32_t B, int32_t T) {
  DataOptions o;
  o.path = path;
  o.micro_batch_size = B;
  o.seq_length = T;
  o.seed = 7;
  o.vocab_size = 1000;
  return o;
}

std::unique_ptr<DataLoader> open_ok(const DataOptions& o) {
  auto l = DataLoader::open(o);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  return l.ok() ? std::move(*l) : nullptr;
}

std::string open_error(const DataOptions& o) {
  auto l = DataLoader::open(o);
  EXPECT_FALSE(l.ok());
  return l.ok() ? "" : l.status().message();
}

// ---- --data-path words ----

TEST(ParseDataPath, OnePathWeightedPairsAndBySize) {
  std::vector<std::string> one{"data/a_text_document"};
  auto r = parse_data_path(one);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].weight, 1.0);
  EXPECT_EQ((*r)[0].path, "data/a_text_document");

  std::vector<std::string> pairs{"0.7", "A", "3e-1", "B"};
  r = parse_data_path(pairs);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].weight, 0.7);
  EXPECT_EQ((*r)[0].path, "A");
  EXPECT_EQ((*r)[1].weight, 0.3);
  EXPECT_EQ((*r)[1].path, "B");

  std::vector<std::string> by_size{"A", "B", "C"};
  r = parse_data_path(by_size);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->size(), 3u);
  for (const DataSource& s : *r) EXPECT_EQ(s.weight, 0.0);
  EXPECT_EQ((*r)[2].path, "C");
}

TEST(ParseDataPath, BadWordsAreOneLineNamingTheWord) {
  auto error = [](std::vector<std::string> words) {
    auto r = parse_data_path(words);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
    return r.status().message();
  };
  EXPECT_EQ(error({"x0.7", "A", "0.3", "B"}),
            "--data-path: blend weight 'x0.7' (word 1) is not a number > 0; hint: --data-path 0.7 "
            "A 0.3 B");
  EXPECT_NE(error({"0.7", "A", "0", "B"}).find("'0' (word 3)"), std::string::npos);
  EXPECT_NE(error({"0.7", "A", "-0.3", "B"}).find("'-0.3' (word 3)"), std::string::npos);
  EXPECT_NE(error({"nan", "A", "0.3", "B"}).find("'nan' (word 1)"), std::string::npos);
  EXPECT_NE(error({"0.7", "A", "inf", "B"}).find("'inf' (word 3)"), std::string::npos);
  EXPECT_NE(error({"0.7", "A", "1e999", "B"}).find("'1e999' (word 3)"), std::string::npos);
  EXPECT_NE(error({"0.7\n", "A", "x", "B"}).find("'x' (word 3)"), std::string::npos);
  EXPECT_NE(error({}).find("no words"), std::string::npos);
  EXPECT_NE(error({"0.7", "A", "0.3"}).find("3 words"), std::string::npos);
  EXPECT_NE(error({"0.7", ""}).find("word 2 is empty"), std::string::npos);
  EXPECT_NE(error({""}).find("word 1 is empty"), std::string::npos);
}

// ---- --split ----

TEST(ParseSplitWeights, NormalisesOneToThreeShares) {
  auto f = parse_split_weights("969,30,1");
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ((*f)[0], 0.969);
  EXPECT_DOUBLE_EQ((*f)[1], 0.030);
  EXPECT_DOUBLE_EQ((*f)[2], 0.001);
  f = parse_split_weights("8/1/1");
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ((*f)[1], 0.1);
  f = parse_split_weights("1");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::array<double, 3>{1, 0, 0}));
  f = parse_split_weights("90, 10");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, (std::array<double, 3>{0.9, 0.1, 0}));
}

TEST(ParseSplitWeights, BadValuesNameTheValue) {
  for (const char* bad : {"", "a,b", "0,0,0", "1,2,3,4", "-1,2", "1,,2", "nan,1", "inf", "1/x"}) {
    auto f = parse_split_weights(bad);
    ASSERT_FALSE(f.ok()) << bad;
    EXPECT_EQ(f.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(f.status().message().find(fmt::format("--split '{}'", bad)), std::string::npos)
        << f.status().message();
    EXPECT_NE(f.status().message().find("hint:"), std::string::npos);
  }
  EXPECT_EQ(parse_split_weights("1,2,3,4").status().message(),
            "--split '1,2,3,4': 4 numbers; hint: 1 to 3 numbers >= 0, not all 0, separated by ',' "
            "or '/', e.g. --split 969,30,1");
}

// Megatron's rounding, worked by hand: indices 0, prev + round(f * n), then shifted by the excess.
TEST(SplitDocumentRanges, MegatronsRounding) {
  using Ranges = std::array<std::pair<int64_t, int64_t>, 3>;
  auto ranges = [](const char* split, int64_t n) {
    return split_document_ranges(*parse_split_weights(split), n);
  };
  EXPECT_EQ(ranges("969,30,1", 1000), (Ranges{{{0, 969}, {969, 999}, {999, 1000}}}));
  // 5.6 -> 6, 0.7 -> 1, 0.7 -> 1: [0, 6, 7, 8], shifted down by 1.
  EXPECT_EQ(ranges("8,1,1", 7), (Ranges{{{0, 5}, {5, 6}, {6, 7}}}));
  // 969.969 -> 970, 30.03 -> 30, 1.001 -> 1: [0, 970, 1000, 1001], no shift.
  EXPECT_EQ(ranges("969,30,1", 1001), (Ranges{{{0, 970}, {970, 1000}, {1000, 1001}}}));
  // 2.5 -> 2, 0.5 -> 0 (half to even both), 2 -> 2: [0, 2, 2, 4], shifted up by 1.
  EXPECT_EQ(ranges("5,1,4", 5), (Ranges{{{0, 3}, {3, 3}, {3, 5}}}));
  // Python rounds half to even: 0.5 * 5 = 2.5 -> 2, 2.5 -> 2: [0, 2, 4, 4] shifted up by 1.
  EXPECT_EQ(ranges("1,1", 5), (Ranges{{{0, 3}, {3, 5}, {5, 5}}}));
  // 1/3 of 1 rounds to 0 three times: [0, 0, 0, 0] shifted up by 1.
  EXPECT_EQ(ranges("1,1,1", 1), (Ranges{{{0, 1}, {1, 1}, {1, 1}}}));
  // 0, 1.5 -> 2, 1.5 -> 2: [0, 0, 2, 4], shift by 1 would give -1: clamped.
  EXPECT_EQ(ranges("0,1,1", 3), (Ranges{{{0, 0}, {0, 1}, {1, 3}}}));
  EXPECT_EQ(ranges("969,30,1", 0), (Ranges{{{0, 0}, {0, 0}, {0, 0}}}));
}

TEST(DataOptions, ValidateChecksSplitAndBlend) {
  DataOptions o;
  o.path = "x";
  o.split_weights = "1,x";
  EXPECT_NE(o.validate().message().find("--split '1,x'"), std::string::npos);
  o.split_weights = "969,30,1";
  o.path.clear();
  o.blend = {{0.5, "A"}, {0, "B"}};
  EXPECT_NE(o.validate().message().find("blend member 1 ('B') has weight 0"), std::string::npos);
  o.blend = {{0.5, "A"}, {0.5, ""}};
  EXPECT_NE(o.validate().message().find("blend member 1 has an empty path"), std::string::npos);
  o.blend = {{0, "A"}, {0, "B"}};
  EXPECT_TRUE(o.validate().ok());
}

// ---- the sample order ----

struct Fixture {
  ScratchDir dir;
  std::vector<Document> docs = make_documents(40, 0, 3);
  std::string prefix = dir.file("a_text_document");
  Fixture() { write_dataset(prefix, docs); }
};

TEST(IndexedLoader, SingleDatasetMatchesTheNaiveStream) {
  Fixture f;
  ASSERT_TRUE(is_indexed_dataset(f.prefix));
  for (int32_t shuffle : {1, 1024}) {
    for (Split split : {Split::kTrain, Split::kVal, Split::kAll}) {
      DataOptions o = indexed_options(f.prefix, 3, 5);
      o.shuffle_buffer = shuffle;
      o.split = split;
      o.split_weights = "6,4";  // 40 documents: [0, 24) and [24, 40)
      auto loader = open_ok(o);
      ASSERT_NE(loader, nullptr);
      EXPECT_EQ(loader->sources(), std::vector<std::string>{f.prefix});
      const int64_t begin = split == Split::kVal ? 24 : 0;
      const int64_t end = split == Split::kTrain ? 24 : 40;
      // 100 batches of 3 rows: several epochs of each part.
      const Rows got = take_rows(*loader, 100);
      EXPECT_EQ(got, naive_rows(f.docs, begin, end, 5, 7, 0, shuffle > 1, got.size()))
          << "shuffle " << shuffle << " split " << split_name(split);
      EXPECT_GT(loader->stats().epochs_completed, 1);
      EXPECT_EQ(loader->stats().samples, 300);
      EXPECT_EQ(loader->stats().tokens, 100 * 3 * 5);
    }
  }
}

TEST(IndexedLoader, SeedDecidesTheOrder) {
  Fixture f;
  DataOptions o = indexed_options(f.prefix, 4, 6);
  const Rows a = take_rows(*open_ok(o), 10);
  EXPECT_EQ(take_rows(*open_ok(o), 10), a);
  o.seed = 8;
  EXPECT_NE(take_rows(*open_ok(o), 10), a);
}

// Two datasets with disjoint token ranges: a row's first token says which member it came from.
struct Blend {
  ScratchDir dir;
  std::vector<Document> a = make_documents(60, 0, 1), b = make_documents(50, 100, 2),
                        c = make_documents(30, 200, 3);
  std::string pa = dir.file("a"), pb = dir.file("b"), pc = dir.file("c");
  Blend() {
    write_dataset(pa, a);
    write_dataset(pb, b);
    write_dataset(pc, c);
  }
};

int member_of(const std::vector<int32_t>& row) { return row[0] / 100; }

TEST(IndexedLoader, BlendFollowsMegatronsGreedyRule) {
  Blend f;
  DataOptions o = indexed_options("", 1, 4);
  o.blend = {{0.7, f.pa}, {0.3, f.pb}};
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  EXPECT_EQ(loader->sources(), (std::vector<std::string>{f.pa, f.pb}));
  // By hand: i = 0 (x = 1): 0.7 vs 0.3 -> A; i = 1 (x = 1): 0.7 - 1 vs 0.3 -> B; i = 2: 1.4 - 1
  // vs 0.6 - 1 -> A; i = 3: 0.1 vs -0.1 -> A; i = 4: -0.2 vs 0.2 -> B; ...
  const Rows rows = take_rows(*loader, 10);
  std::vector<int> members;
  for (const auto& r : rows) members.push_back(member_of(r));
  EXPECT_EQ(members, (std::vector<int>{0, 1, 0, 0, 1, 0, 0, 1, 0, 0}));
  // Each member's rows are its own stream, in order.
  Rows a_rows, b_rows;
  for (const auto& r : rows) (member_of(r) == 0 ? a_rows : b_rows).push_back(r);
  const std::array<double, 3> fr = *parse_split_weights("969,30,1");
  const auto pa = split_document_ranges(fr, 60)[0], pb = split_document_ranges(fr, 50)[0];
  EXPECT_EQ(a_rows, naive_rows(f.a, pa.first, pa.second, 4, 7, 0, true, a_rows.size()));
  EXPECT_EQ(b_rows, naive_rows(f.b, pb.first, pb.second, 4, 7, 1, true, b_rows.size()));
}

TEST(IndexedLoader, BlendCountsStayWithinOneOfTheirShare) {
  Blend f;
  DataOptions o = indexed_options("", 1, 3);
  o.blend = {{2, f.pa}, {5, f.pb}, {3, f.pc}};
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  std::array<int64_t, 3> count{0, 0, 0};
  const std::array<double, 3> share{0.2, 0.5, 0.3};
  for (int64_t n = 1; n <= 1000; ++n) {
    auto b = loader->next();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    ++count[b->tokens[0] / 100];
    for (int d = 0; d < 3; ++d) {
      ASSERT_LE(std::abs(static_cast<double>(count[d]) - share[d] * n), 1.0)
          << "member " << d << " after " << n;
    }
  }
}

TEST(IndexedLoader, WeightsBySizeWithoutNumbers) {
  Blend f;
  auto a = IndexedDataset::open(f.pa);
  auto b = IndexedDataset::open(f.pb);
  ASSERT_TRUE(a.ok() && b.ok());
  const double share_a = double(a->num_tokens()) / double(a->num_tokens() + b->num_tokens());
  DataOptions o = indexed_options("", 1, 3);
  std::vector<std::string> words{f.pa, f.pb};
  o.blend = *parse_data_path(words);
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  int64_t from_a = 0;
  for (int n = 1; n <= 500; ++n) {
    auto batch = loader->next();
    ASSERT_TRUE(batch.ok());
    from_a += batch->tokens[0] < 100;
    ASSERT_LE(std::abs(double(from_a) - share_a * n), 1.0) << n;
  }
}

// The union of the replicas' rows is the one-replica stream, row i to replica i % R.
TEST(IndexedLoader, ReplicasSplitTheBlendedStream) {
  Blend f;
  DataOptions o = indexed_options("", 1, 4);
  o.blend = {{0.6, f.pa}, {0.4, f.pb}};
  const Rows all = take_rows(*open_ok(o), 30);
  o.num_replicas = 3;
  for (int32_t r = 0; r < 3; ++r) {
    o.replica = r;
    const Rows mine = take_rows(*open_ok(o), 10);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(mine[i], all[3 * i + r]) << r << " " << i;
  }
}

// Restoring at a position (mid-epoch of a member, mid-blend, a replica) gives the batches an
// uninterrupted loader gives next.
TEST(IndexedLoader, RestoreResumesAtTheNextSample) {
  Blend f;
  DataOptions o = indexed_options("", 2, 5);
  o.blend = {{0.5, f.pa}, {0.3, f.pb}, {0.2, f.pc}};
  o.num_replicas = 2;
  o.replica = 1;
  auto whole = open_ok(o);
  ASSERT_NE(whole, nullptr);
  for (int stop : {0, 1, 7, 33}) {
    auto first = open_ok(o);
    (void)take_rows(*first, stop);
    const DataPosition pos = first->position();
    EXPECT_EQ(pos.epoch, 0);
    EXPECT_EQ(pos.token_offset, 0);
    EXPECT_EQ(pos.samples_in_epoch, 2 * stop);
    EXPECT_EQ(pos.num_sources, 3);
    const Rows expected = take_rows(*first, 12);
    auto resumed = open_ok(o);
    (void)take_rows(*resumed, 3);
    auto parsed = DataPosition::from_json(pos.to_json());
    ASSERT_TRUE(parsed.ok());
    ASSERT_TRUE(resumed->restore(*parsed).ok());
    EXPECT_EQ(resumed->position(), pos);
    EXPECT_EQ(take_rows(*resumed, 12), expected) << "stop " << stop;
  }
}

TEST(IndexedLoader, RestoreRefusesAnotherLoadersPosition) {
  Fixture f;
  DataOptions o = indexed_options(f.prefix, 2, 5);
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  DataPosition pos = loader->position();
  pos.seed = 99;
  EXPECT_NE(loader->restore(pos).message().find("saved with seed = 99"), std::string::npos);
  pos = loader->position();
  pos.epoch = 2;
  pos.token_offset = 3;
  Status s = loader->restore(pos);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("epoch 2, samples 0, token_offset 3"), std::string::npos)
      << s.message();
  pos = loader->position();
  pos.samples_in_epoch = int64_t{1} << 41;  // a count no replay should walk
  EXPECT_NE(loader->restore(pos).message().find("at most 1099511627776 samples"),
            std::string::npos);
  pos = loader->position();
  pos.num_sources = 2;
  EXPECT_NE(loader->restore(pos).message().find("num_sources"), std::string::npos);
}

// ---- Megatron's own tiny Shakespeare ----

TEST(IndexedLoader, MegatronTinyShakespeareReads) {
  DataOptions o = indexed_options(kShakespeare, 16, 128);
  o.vocab_size = 50304;
  o.split = Split::kAll;
  o.shuffle_buffer = 1;
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  // One epoch of the whole dataset: 330,807 tokens, (330807 - 1) / 128 = 2584 samples.
  std::vector<int32_t> stream;
  for (int b = 0; b < 2584 / 16; ++b) {
    auto batch = loader->next();
    ASSERT_TRUE(batch.ok()) << batch.status().to_string();
    for (int32_t t : batch->tokens) ASSERT_LT(t, 50257);
    for (int32_t t : batch->targets) ASSERT_LT(t, 50257);
    if (b == 0) stream.assign(batch->tokens.begin(), batch->tokens.begin() + 128);
  }
  auto ds = IndexedDataset::open(kShakespeare);
  ASSERT_TRUE(ds.ok());
  std::vector<int32_t> first = ds->sequence(0);
  first.resize(std::min<size_t>(first.size(), 128));
  EXPECT_EQ(std::vector<int32_t>(stream.begin(), stream.begin() + first.size()), first);
  EXPECT_EQ(loader->stats().epochs_completed, 0);

  // The default split's validation part, shuffled, with the training loader's defaults.
  o.split = Split::kVal;
  o.shuffle_buffer = 1024;
  EXPECT_EQ(take_rows(*open_ok(o), 3).size(), 48u);
}

TEST(IndexedLoader, TokenAboveTheVocabularyIsOneCorruptionLine) {
  DataOptions o = indexed_options(kShakespeare, 4, 32);
  o.vocab_size = 256;
  o.shuffle_buffer = 1;
  o.split = Split::kAll;
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  auto batch = loader->next();
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().code(), StatusCode::kCorruption);
  // Document 0 ("First Citizen:...") is sequence 0; its first token (First = 5962) is the culprit.
  EXPECT_EQ(batch.status().message(),
            fmt::format("{}.bin: token 5962 in sequence 0 (document 0) is >= the model's "
                        "vocabulary 256; hint: train with the tokenizer that wrote it "
                        "(--tokenizer-type/--vocab-file/--merge-file): the model's vocabulary is "
                        "its tokenizer's, padded",
                        kShakespeare));
  // The loader stays failed.
  EXPECT_EQ(loader->next().status().message(), batch.status().message());
}

TEST(IndexedLoader, TokenOutsideTheVocabularyNamesSequenceAndDocument) {
  ScratchDir dir;
  const std::string prefix = dir.file("d");
  // Documents: 0 = {[1 2 3]}, 1 = {} (empty), 2 = {[4 5], [6 300 7]}: token 300 is sequence 2's.
  write_dataset(prefix, {{{1, 2, 3}}, {}, {{4, 5}, {6, 300, 7}}}, IndexedDtype::kInt16);
  DataOptions o = indexed_options(prefix, 1, 7);
  o.vocab_size = 256;
  o.split = Split::kAll;
  o.shuffle_buffer = 1;
  auto loader = open_ok(o);
  ASSERT_NE(loader, nullptr);
  auto batch = loader->next();
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(
      batch.status().message().find(prefix + ".bin: token 300 in sequence 2 (document 2) is >= "
                                             "the model's vocabulary 256"),
      std::string::npos)
      << batch.status().message();

  write_dataset(prefix, {{{1, 2, 3}}, {{4, -5, 6, 7, 8}}}, IndexedDtype::kInt16);
  loader = open_ok(o);
  batch = loader->next();
  ASSERT_FALSE(batch.ok());
  EXPECT_NE(batch.status().message().find("token -5 in sequence 1 (document 1) is negative"),
            std::string::npos)
      << batch.status().message();
}

// ---- bad input ----

TEST(IndexedLoader, BlendMemberThatIsNotAnIndexedDataset) {
  Fixture f;
  const std::string text = f.dir.file("corpus.txt");
  ASSERT_TRUE(write_file(text, data_test::make_text(2000, 1)).ok());
  const std::string shard = f.dir.file("s.tar");
  ASSERT_TRUE(write_file(shard, "not really a tar").ok());
  DataOptions o = indexed_options("", 2, 5);
  auto member = [&](const std::string& path) {
    o.blend = {{0.5, f.prefix}, {0.5, path}};
    return open_error(o);
  };
  EXPECT_EQ(member(text),
            fmt::format("--data-path member '{}' is a text file, not an indexed dataset prefix "
                        "('{}.idx' does not exist); hint: a blend takes prefixes P of P.bin/P.idx "
                        "(tightpipe data preprocess --input FILE --output-prefix P writes one); a "
                        "text file or shard trains alone as --data-path FILE",
                        text, text));
  EXPECT_NE(member(shard).find("is a tar shard"), std::string::npos);
  EXPECT_NE(member(f.dir.str()).find("is a directory"), std::string::npos);
  EXPECT_NE(member(f.dir.file("missing")).find("missing.idx' does not exist"), std::string::npos);
  EXPECT_EQ(member(f.prefix + ".bin"),
            fmt::format("--data-path member '{}.bin' names a file of an indexed dataset, not its "
                        "prefix; hint: pass the prefix without .bin/.idx: '{}'",
                        f.prefix, f.prefix));
  // A single --data-path PREFIX.idx too (as text it would train on the index's bytes).
  o.blend.clear();
  o.path = f.prefix + ".idx";
  EXPECT_NE(open_error(o).find("pass the prefix without .bin/.idx"), std::string::npos);
}

TEST(IndexedLoader, EmptyValidationPart) {
  Fixture f;
  DataOptions o = indexed_options(f.prefix, 2, 5);
  o.split = Split::kVal;
  o.split_weights = "100,0,0";
  auto l = DataLoader::open(o);
  ASSERT_FALSE(l.ok());
  EXPECT_EQ(l.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(l.status().message(),
            fmt::format("--data-path member '{}': its validation part of --split 100,0,0 holds 0 "
                        "of 40 documents (0 tokens), fewer than --seq-length + 1 = 6 tokens; "
                        "hint: a larger share for it in --split (e.g. --split 90,10,0), a smaller "
                        "--seq-length or a larger dataset",
                        f.prefix));
  // A part with documents but fewer than T + 1 tokens.
  o.split_weights = "39,1";
  o.seq_length = 1000;
  EXPECT_NE(open_error(o).find("holds 1 of 40 documents"), std::string::npos);
}

TEST(IndexedLoader, CorruptIndexSurfacesTheReadersError) {
  Fixture f;
  std::fstream idx(f.prefix + ".idx", std::ios::in | std::ios::out | std::ios::binary);
  idx.write("XXXX", 4);
  idx.close();
  DataOptions o = indexed_options(f.prefix, 2, 5);
  const std::string e = open_error(o);
  EXPECT_NE(e.find(f.prefix + ".idx"), std::string::npos) << e;
}

}  // namespace
}  // namespace tightpipe
