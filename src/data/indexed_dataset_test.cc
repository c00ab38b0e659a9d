// Megatron's indexed dataset (indexed_dataset.h) and `data preprocess` (preprocess.h): Megatron's
// own tiny Shakespeare files read and written back byte for byte, preprocess round trips and its
// independence of the worker count, and every damaged .idx/.bin refused with one line naming the
// file.
#include "tightpipe/indexed_dataset.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "data/test_util.h"
#include "tightpipe/base.h"
#include "tightpipe/preprocess.h"
#include "tightpipe/tokenizer.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;
using data_test::ScratchDir;

const std::string kMegatronPrefix =
    std::string(TP_SHARED_DIR) + "/data/megatron/tinyshakespeare_gpt2_text_document";
const std::string kShakespeare = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
const std::string kGpt2Dir = std::string(TP_SHARED_DIR) + "/data/gpt2";

std::string read_bytes(const std::string& path) {
  auto r = read_file(path);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? *r : std::string();
}

// The paragraph rule on a whole text (the reader splits block by block).
std::vector<std::string> paragraphs(const std::string& text) {
  std::vector<std::string> out;
  for (std::string_view p : split_paragraphs(text)) out.emplace_back(p);
  return out;
}

// Every document's sequences concatenated, through the reader.
std::vector<std::vector<int32_t>> read_documents(const IndexedDataset& ds) {
  std::vector<std::vector<int32_t>> docs;
  for (int64_t d = 0; d < ds.num_documents(); ++d) {
    std::vector<int32_t> doc;
    const DocumentSequences seqs = ds.document(d);
    for (int64_t s = seqs.first; s < seqs.end; ++s) {
      const std::vector<int32_t> t = ds.sequence(s);
      doc.insert(doc.end(), t.begin(), t.end());
    }
    docs.push_back(std::move(doc));
  }
  return docs;
}

std::vector<std::string> decode_documents(const IndexedDataset& ds, const Tokenizer& tok) {
  std::vector<std::string> out;
  for (const auto& doc : read_documents(ds)) {
    auto text = tok.decode(doc);
    EXPECT_TRUE(text.ok()) << text.status().to_string();
    out.push_back(text.ok() ? *text : std::string());
  }
  return out;
}

std::unique_ptr<Tokenizer> byte_tokenizer() {
  auto t = make_tokenizer(TokenizerOptions{});
  EXPECT_TRUE(t.ok());
  return std::move(t).value();
}

TEST(IndexedDataset, ReadsMegatronsTinyShakespeare) {
  auto ds = IndexedDataset::open(kMegatronPrefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->dtype(), IndexedDtype::kUint16);
  EXPECT_EQ(ds->num_documents(), 7222);
  EXPECT_EQ(ds->num_sequences(), 7222);
  EXPECT_EQ(ds->num_tokens(), 330807);
  const std::vector<int32_t> first = ds->sequence(0);
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first.front(), 5962);  // GPT-2's "First"
  EXPECT_EQ(first.back(), 50256);  // <|endoftext|>, --append-eod
  const std::span<const uint16_t> view = ds->sequence_view<uint16_t>(0);
  ASSERT_EQ(view.size(), first.size());
  EXPECT_EQ(view[1], first[1]);
  EXPECT_EQ(ds->document(7221).first, 7221);
  EXPECT_EQ(ds->document(7221).end, 7222);
  std::vector<int32_t> middle(3);
  ds->read_tokens(0, 1, middle);
  EXPECT_EQ(middle, std::vector<int32_t>(first.begin() + 1, first.begin() + 4));
}

TEST(IndexedDataset, WriterReproducesMegatronsFilesByteForByte) {
  ScratchDir dir;
  auto ds = IndexedDataset::open(kMegatronPrefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  const std::string out = dir.file("copy");
  auto w = IndexedDatasetWriter::create(out, ds->dtype());
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  for (int64_t d = 0; d < ds->num_documents(); ++d) {
    std::vector<int32_t> tokens;
    std::vector<int64_t> lengths;
    for (int64_t s = ds->document(d).first; s < ds->document(d).end; ++s) {
      const std::vector<int32_t> t = ds->sequence(s);
      tokens.insert(tokens.end(), t.begin(), t.end());
      lengths.push_back(static_cast<int64_t>(t.size()));
    }
    ASSERT_TRUE((*w)->add_document(tokens, lengths).ok());
  }
  ASSERT_TRUE((*w)->finish().ok());
  EXPECT_TRUE(read_bytes(out + ".bin") == read_bytes(kMegatronPrefix + ".bin"));
  EXPECT_TRUE(read_bytes(out + ".idx") == read_bytes(kMegatronPrefix + ".idx"));
  EXPECT_FALSE(fs::exists(out + ".bin.tmp"));
  EXPECT_FALSE(fs::exists(out + ".idx.tmp"));
}

TEST(IndexedDataset, MegatronsDtypeChoice) {
  EXPECT_EQ(indexed_dtype_for_vocab(256), IndexedDtype::kUint16);
  EXPECT_EQ(indexed_dtype_for_vocab(50257), IndexedDtype::kUint16);
  EXPECT_EQ(indexed_dtype_for_vocab(65499), IndexedDtype::kUint16);
  EXPECT_EQ(indexed_dtype_for_vocab(65500), IndexedDtype::kInt32);
  EXPECT_EQ(indexed_dtype_size(IndexedDtype::kUint16), 2);
  EXPECT_EQ(indexed_dtype_name(IndexedDtype::kFloat64), "float64");
}

// Several sequences per document, an empty document, an empty sequence (its read copies nothing:
// once a memcpy to null under UBSan, fuzz corpus zero-length-int32-sequence), int32 ids beyond
// uint16.
TEST(IndexedDataset, WriterRoundTripsDocumentsOfSeveralSequences) {
  ScratchDir dir;
  const std::string prefix = dir.file("int32");
  {
    auto w = IndexedDatasetWriter::create(prefix, IndexedDtype::kInt32);
    ASSERT_TRUE(w.ok());
    const std::vector<int32_t> a = {1, 2, 3, 100000, -5};
    const std::vector<int64_t> a_len = {2, 3};
    ASSERT_TRUE((*w)->add_document(a, a_len).ok());
    ASSERT_TRUE((*w)->add_document(std::span<const int32_t>()).ok());
    const std::vector<int32_t> c = {7};
    const std::vector<int64_t> c_len = {1, 0};
    ASSERT_TRUE((*w)->add_document(c, c_len).ok());
    EXPECT_EQ((*w)->num_documents(), 3);
    EXPECT_EQ((*w)->num_sequences(), 4);
    ASSERT_TRUE((*w)->finish().ok());
  }
  auto ds = IndexedDataset::open(prefix);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  EXPECT_EQ(ds->dtype(), IndexedDtype::kInt32);
  EXPECT_EQ(ds->num_documents(), 3);
  EXPECT_EQ(ds->num_sequences(), 4);
  EXPECT_EQ(ds->num_tokens(), 6);
  EXPECT_EQ(ds->document(0).first, 0);
  EXPECT_EQ(ds->document(0).end, 2);
  EXPECT_EQ(ds->document(1).first, ds->document(1).end);  // empty
  EXPECT_EQ(ds->sequence(1), (std::vector<int32_t>{3, 100000, -5}));
  EXPECT_EQ(ds->sequence_pointer(2), 5 * 4);
  EXPECT_EQ(ds->sequence(2), std::vector<int32_t>{7});
  EXPECT_TRUE(ds->sequence(3).empty());
  EXPECT_EQ(ds->document(2).end, 4);
}

TEST(IndexedDataset, WriterRefusesIdsTheDtypeCannotHold) {
  ScratchDir dir;
  auto w = IndexedDatasetWriter::create(dir.file("u16"), IndexedDtype::kUint16);
  ASSERT_TRUE(w.ok());
  const std::vector<int32_t> bad = {1, 70000};
  Status s = (*w)->add_document(bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token 1: id 70000 does not fit uint16"), std::string::npos)
      << s.message();
  const std::vector<int64_t> wrong_len = {1};
  EXPECT_EQ((*w)->add_document(bad, wrong_len).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(IndexedDatasetWriter::create(dir.file("f"), IndexedDtype::kFloat32).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(IndexedDataset, UnfinishedWriterLeavesNoFile) {
  ScratchDir dir;
  {
    auto w = IndexedDatasetWriter::create(dir.file("x"), IndexedDtype::kUint16);
    ASSERT_TRUE(w.ok());
    const std::vector<int32_t> t = {1, 2};
    ASSERT_TRUE((*w)->add_document(t).ok());
  }
  EXPECT_TRUE(fs::is_empty(dir.str()));
}

TEST(IndexedDataset, WriterNamesAnUnwritablePrefix) {
  ScratchDir dir;
  auto w = IndexedDatasetWriter::create(dir.file("no/such/dir/x"), IndexedDtype::kUint16);
  EXPECT_EQ(w.status().code(), StatusCode::kIOError);
  EXPECT_NE(w.status().message().find("no/such/dir/x.bin.tmp"), std::string::npos)
      << w.status().message();
}

// ---------------------------------------------------------------------------------------------
// Damaged files: each one line (no newline) naming the file, with a hint.

class DamagedIndexedDataset : public ::testing::Test {
 protected:
  void SetUp() override {
    prefix_ = dir_.file("ds");
    auto w = IndexedDatasetWriter::create(prefix_, IndexedDtype::kUint16);
    ASSERT_TRUE(w.ok());
    const std::vector<int32_t> a = {10, 11, 12, 13, 14}, b = {20, 21, 22};
    const std::vector<int64_t> a_len = {2, 3};
    ASSERT_TRUE((*w)->add_document(a, a_len).ok());
    ASSERT_TRUE((*w)->add_document(b).ok());
    ASSERT_TRUE((*w)->finish().ok());
    idx_ = read_bytes(prefix_ + ".idx");
    bin_ = read_bytes(prefix_ + ".bin");
    ASSERT_EQ(idx_.size(), 34u + 12 * 3 + 8 * 3);  // 3 sequences, 2 documents
    ASSERT_TRUE(IndexedDataset::open(prefix_).ok());
  }
  template <typename T>
  void put(std::string& bytes, size_t offset, T v) {
    ASSERT_LE(offset + sizeof v, bytes.size());
    std::memcpy(bytes.data() + offset, &v, sizeof v);
  }
  // Writes the files, opens them and checks the error: its code, the file it must name, one line,
  // a hint and `expected` in the message.
  void expect_error(const std::string& idx, const std::string& bin, StatusCode code,
                    const std::string& file_suffix, const std::string& expected) {
    ASSERT_TRUE(write_file(prefix_ + ".idx", idx).ok());
    ASSERT_TRUE(write_file(prefix_ + ".bin", bin).ok());
    auto ds = IndexedDataset::open(prefix_);
    ASSERT_FALSE(ds.ok()) << expected;
    const std::string& m = ds.status().message();
    EXPECT_EQ(ds.status().code(), code) << m;
    EXPECT_NE(m.find(prefix_ + file_suffix), std::string::npos) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("hint:"), std::string::npos) << m;
    EXPECT_NE(m.find(expected), std::string::npos) << m;
  }
  static constexpr size_t kLengths = 34, kPointers = 34 + 12, kDocs = 34 + 12 + 24;

  ScratchDir dir_;
  std::string prefix_, idx_, bin_;
};

TEST_F(DamagedIndexedDataset, BadMagic) {
  std::string idx = idx_;
  idx[3] = 'X';
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "magic 'MMIXIDX\\x00\\x00'");
  expect_error("PK\x03\x04", bin_, StatusCode::kCorruption, ".idx", "magic 'PK\\x03\\x04'");
}

TEST_F(DamagedIndexedDataset, ShorterThanTheHeader) {
  expect_error("", bin_, StatusCode::kCorruption, ".idx", "0 bytes, shorter than the 34-byte");
  expect_error(idx_.substr(0, 20), bin_, StatusCode::kCorruption, ".idx", "20 bytes");
}

TEST_F(DamagedIndexedDataset, BadVersion) {
  std::string idx = idx_;
  put<uint64_t>(idx, 9, 2);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "version 2, expected 1");
}

TEST_F(DamagedIndexedDataset, BadDtypeCode) {
  std::string idx = idx_;
  idx[17] = 0;
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "dtype code 0, expected one of");
  idx[17] = 9;
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "dtype code 9");
  idx[17] = 6;
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "dtype code 6 (float64)");
  idx[17] = 5;
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "dtype code 5 (int64)");
}

TEST_F(DamagedIndexedDataset, CountsThatOverrunTheFile) {
  std::string idx = idx_;
  put<uint64_t>(idx, 18, 4);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "4 sequences and 3 document indices");
  put<uint64_t>(idx, 18, ~uint64_t{0});
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "18446744073709551615 sequences");
  idx = idx_;
  put<uint64_t>(idx, 26, uint64_t{1} << 61);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "overrun");
  expect_error(idx_.substr(0, idx_.size() - 1), bin_, StatusCode::kCorruption, ".idx", "overrun");
}

TEST_F(DamagedIndexedDataset, BytesAfterTheDocumentIndices) {
  expect_error(idx_ + "xy", bin_, StatusCode::kCorruption, ".idx", "2 bytes after the document");
  expect_error(idx_ + "xyz", bin_, StatusCode::kCorruption, ".idx", "multimodal");
  std::string idx = idx_;
  put<uint64_t>(idx, 26, 2);  // one document index fewer: 8 bytes left over
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "8 bytes after");
}

TEST_F(DamagedIndexedDataset, NoDocumentIndex) {
  std::string idx = idx_.substr(0, kDocs);
  put<uint64_t>(idx, 26, 0);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "0 document indices");
}

TEST_F(DamagedIndexedDataset, NegativeLength) {
  std::string idx = idx_;
  put<int32_t>(idx, kLengths + 4, -1);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "sequence 1: length -1 is negative");
}

TEST_F(DamagedIndexedDataset, PointerNotAlignedOrNegative) {
  std::string idx = idx_;
  put<int64_t>(idx, kPointers + 8, 3);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "byte pointer 3 is not a multiple");
  put<int64_t>(idx, kPointers + 8, -4);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "byte pointer -4 is negative");
}

TEST_F(DamagedIndexedDataset, SequencesBeyondTheBin) {
  expect_error(idx_, bin_.substr(0, bin_.size() - 2), StatusCode::kCorruption, ".bin",
               "14 bytes, but sequence 2");
  expect_error(idx_, "", StatusCode::kCorruption, ".bin", "0 bytes, but sequence 0");
  std::string idx = idx_;
  put<int64_t>(idx, kPointers + 16, int64_t{1} << 62);
  expect_error(idx, bin_, StatusCode::kCorruption, ".bin", "at byte 4611686018427387904");
  idx = idx_;
  put<int32_t>(idx, kLengths + 8, 0x7fffffff);
  expect_error(idx, bin_, StatusCode::kCorruption, ".bin", "2147483647 tokens");
}

TEST_F(DamagedIndexedDataset, DocumentIndicesOutOfOrder) {
  std::string idx = idx_;
  put<int64_t>(idx, kDocs, 1);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "document index 0 is 1, expected 0");
  idx = idx_;
  put<int64_t>(idx, kDocs + 8, 4);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "document index 1 is 4");
  put<int64_t>(idx, kDocs + 8, 3);
  put<int64_t>(idx, kDocs + 16, 2);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "document index 2 is 2");
  idx = idx_;
  put<int64_t>(idx, kDocs + 16, 2);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "last document index is 2");
  put<int64_t>(idx, kDocs + 8, -1);
  expect_error(idx, bin_, StatusCode::kCorruption, ".idx", "document index 1 is -1");
}

TEST_F(DamagedIndexedDataset, MissingFiles) {
  fs::remove(prefix_ + ".bin");
  auto ds = IndexedDataset::open(prefix_);
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find(prefix_ + ".bin' does not exist"), std::string::npos)
      << ds.status().message();
  ds = IndexedDataset::open(dir_.file("nothing"));
  EXPECT_EQ(ds.status().code(), StatusCode::kNotFound);
  EXPECT_NE(ds.status().message().find("nothing.idx"), std::string::npos);
  fs::create_directory(dir_.file("d.idx"));
  ds = IndexedDataset::open(dir_.file("d"));
  EXPECT_EQ(ds.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(ds.status().message().find("d.idx' is a directory"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// preprocess

PreprocessOptions byte_options(const std::string& input, const std::string& prefix,
                               int32_t workers) {
  PreprocessOptions o;
  o.input = input;
  o.output_prefix = prefix;
  o.workers = workers;
  return o;
}

// Paragraphs of every shape: runs of three and four newlines, a trailing blank line (an
// empty last piece), UTF-8, a paragraph of spaces; several 64 KiB blocks so the workers share
// them, and runs of newlines across the block cuts.
std::string paragraph_text() {
  std::string text = "First paragraph,\ntwo lines.\n\n\n\nAfter four newlines.\n\n\nAfter three";
  for (int i = 0; i < 700; ++i) {
    text += fmt::format("\n\npara {} \xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80 ", i);
    text += std::string(static_cast<size_t>(i % 97) * 3, static_cast<char>('a' + i % 26));
    if (i % 5 == 0) text += "\n\tone newline inside";
    if (i % 7 == 0) text += "\n";  // three newlines before the next paragraph
  }
  text += "\n\n   \n\nlast\n\n";
  return text;
}

TEST(Preprocess, ByteTokenizerRoundTripsParagraphsWithAnyWorkerCount) {
  ScratchDir dir;
  const std::string text = paragraph_text();
  ASSERT_TRUE(write_file(dir.file("in.txt"), text).ok());
  const std::vector<std::string> expected = paragraphs(text);
  ASSERT_EQ(expected.size(), 4u + 700 + 3);
  std::string bin1, idx1;
  for (int32_t workers : {1, 3}) {
    const std::string prefix = dir.file(fmt::format("w{}", workers));
    std::vector<PreprocessProgress> seen;
    PreprocessOptions o = byte_options(dir.file("in.txt"), prefix, workers);
    o.log_interval = 100;
    auto s = preprocess(o, [&](const PreprocessProgress& p) { seen.push_back(p); });
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->documents, static_cast<int64_t>(expected.size()));
    EXPECT_EQ(expected[1], "");  // four newlines: an empty document
    EXPECT_EQ(s->bytes, static_cast<int64_t>(text.size()));
    ASSERT_EQ(s->prefixes, std::vector<std::string>{prefix + "_text_document"});
    ASSERT_FALSE(seen.empty());
    EXPECT_GE(seen.front().documents, 100);
    auto ds = IndexedDataset::open(s->prefixes[0]);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    EXPECT_EQ(ds->dtype(), IndexedDtype::kUint16);
    EXPECT_EQ(decode_documents(*ds, *byte_tokenizer()), expected);
    if (workers == 1) {
      bin1 = read_bytes(s->prefixes[0] + ".bin");
      idx1 = read_bytes(s->prefixes[0] + ".idx");
    } else {
      EXPECT_TRUE(read_bytes(s->prefixes[0] + ".bin") == bin1);
      EXPECT_TRUE(read_bytes(s->prefixes[0] + ".idx") == idx1);
    }
  }
}

// Block cuts never change the pieces: short words between runs of 1 to 5 newlines (so most
// 64 KiB cuts fall inside a run, where cutting at an odd offset would move a newline from one
// piece to the next), split block by block, give the pieces of the whole text.
TEST(Preprocess, BlockCutsKeepTheWholeFilesParagraphs) {
  ScratchDir dir;
  Rng rng(16);
  std::string text;
  while (text.size() < 600'000) {
    text.append(1 + rng.below(3), static_cast<char>('a' + rng.below(26)));
    text.append(1 + rng.below(5), '\n');
  }
  ASSERT_TRUE(write_file(dir.file("in.txt"), text).ok());
  for (int32_t workers : {1, 2}) {
    auto s = preprocess(
        byte_options(dir.file("in.txt"), dir.file(fmt::format("w{}", workers)), workers));
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    auto ds = IndexedDataset::open(s->prefixes[0]);
    ASSERT_TRUE(ds.ok()) << ds.status().to_string();
    EXPECT_TRUE(decode_documents(*ds, *byte_tokenizer()) == paragraphs(text));
  }
}

// The paragraph rule on the real corpus: Megatron's 7,222 documents, the first without its
// paragraph's newline.
TEST(Preprocess, TinyShakespeareParagraphsAreMegatronsDocuments) {
  ScratchDir dir;
  auto s = preprocess(byte_options(kShakespeare, dir.file("ts"), 2));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->documents, 7222);
  auto ds = IndexedDataset::open(s->prefixes[0]);
  ASSERT_TRUE(ds.ok()) << ds.status().to_string();
  ASSERT_EQ(ds->num_documents(), 7222);
  const std::vector<std::string> docs = decode_documents(*ds, *byte_tokenizer());
  EXPECT_EQ(docs.front(), "First Citizen:\nBefore we proceed any further, hear me speak.");
  EXPECT_EQ(docs, paragraphs(read_bytes(kShakespeare)));
}

// Issue 16's acceptance: GPT-2 BPE with --append-eod gives Megatron's files byte for byte.
TEST(Preprocess, Gpt2MatchesMegatronByteForByte) {
  TokenizerOptions t;
  t.type = TokenizerType::kGpt2Bpe;
  t.vocab_file = kGpt2Dir + "/vocab.json";
  t.merge_file = kGpt2Dir + "/merges.txt";
  auto tok = make_tokenizer(t);
  if (!tok.ok() && tok.status().message().find("not built yet") != std::string::npos) {
    GTEST_SKIP() << tok.status().message();
  }
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  ScratchDir dir;
  for (int32_t workers : {1, 3}) {
    PreprocessOptions o =
        byte_options(kShakespeare, dir.file(fmt::format("w{}", workers)), workers);
    o.tokenizer = t;
    o.append_eod = true;
    auto s = preprocess(o);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    EXPECT_EQ(s->tokens, 330807);
    EXPECT_TRUE(read_bytes(s->prefixes[0] + ".bin") == read_bytes(kMegatronPrefix + ".bin"))
        << workers << " workers";
    EXPECT_TRUE(read_bytes(s->prefixes[0] + ".idx") == read_bytes(kMegatronPrefix + ".idx"))
        << workers << " workers";
  }
}

TEST(Preprocess, JsonLinesOneDatasetPerKeyAndSentenceLists) {
  ScratchDir dir;
  const std::string jsonl =
      "{\"text\": \"ab\", \"title\": \"T1\"}\n"
      "\n"
      "{\"title\": \"T2\", \"text\": [\"cd\", \"\", \"efg\"]}\r\n"
      "{\"text\": \"\", \"title\": \"\\u00e9\"}";
  ASSERT_TRUE(write_file(dir.file("in.jsonl"), jsonl).ok());
  PreprocessOptions o = byte_options(dir.file("in.jsonl"), dir.file("out"), 2);
  o.json_keys = {"text", "title"};
  auto s = preprocess(o);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->prefixes, (std::vector<std::string>{dir.file("out_text_document"),
                                                   dir.file("out_title_document")}));
  EXPECT_EQ(s->documents, 3);
  auto text = IndexedDataset::open(s->prefixes[0]);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  ASSERT_EQ(text->num_documents(), 3);
  // Document 1 is two sequences (the empty sentence gives none), document 2 is empty.
  EXPECT_EQ(text->num_sequences(), 3);
  EXPECT_EQ(text->document(1).first, 1);
  EXPECT_EQ(text->document(1).end, 3);
  EXPECT_EQ(text->sequence(2), (std::vector<int32_t>{'e', 'f', 'g'}));
  EXPECT_EQ(text->document(2).first, text->document(2).end);
  auto title = IndexedDataset::open(s->prefixes[1]);
  ASSERT_TRUE(title.ok());
  EXPECT_EQ(decode_documents(*title, *byte_tokenizer()),
            (std::vector<std::string>{"T1", "T2", "\xc3\xa9"}));
}

// Bad JSON lines: the error names the input and the line (blank lines count), no output is left.
TEST(Preprocess, BadJsonLinesNameTheLine) {
  struct Case {
    std::string third_line;
    StatusCode code;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"x\"", StatusCode::kCorruption,
       "line 3, column 13: not JSON: syntax error while parsing object - unexpected end of input"},
      {"[1, 2]", StatusCode::kInvalidArgument, "line 3: a JSON array, expected an object"},
      {"{\"body\": \"x\"}", StatusCode::kInvalidArgument, "line 3: no key 'text' (it has: body)"},
      {"{\"text\": 5}", StatusCode::kInvalidArgument, "line 3: key 'text' is a JSON number"},
      {"{\"text\": [\"a\", null]}", StatusCode::kInvalidArgument, "holding a JSON null"},
      {"{\"text\": \"\xff\"}", StatusCode::kCorruption, "line 3, column 11: not JSON"},
  };
  for (const Case& c : cases) {
    ScratchDir dir;
    std::string jsonl = "{\"text\": \"fine\"}\n\n" + c.third_line + "\n{\"text\": \"more\"}\n";
    for (int i = 0; i < 600; ++i) jsonl += "{\"text\": \"filler\"}\n";  // blocks after the bad one
    ASSERT_TRUE(write_file(dir.file("in.jsonl"), jsonl).ok());
    auto s = preprocess(byte_options(dir.file("in.jsonl"), dir.file("out"), 3));
    ASSERT_FALSE(s.ok()) << c.third_line;
    EXPECT_EQ(s.status().code(), c.code) << s.status().message();
    EXPECT_NE(s.status().message().find(dir.file("in.jsonl")), std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find(c.expected), std::string::npos) << s.status().message();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos) << s.status().message();
    EXPECT_FALSE(fs::exists(dir.file("out_text_document.bin")));
    EXPECT_FALSE(fs::exists(dir.file("out_text_document.bin.tmp")));
  }
}

TEST(Preprocess, BadOptionsAndFiles) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("in.txt"), "a\n\nb").ok());
  auto missing = preprocess(byte_options(dir.file("none.txt"), dir.file("out"), 1));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--input '" + dir.file("none.txt")), std::string::npos)
      << missing.status().message();

  auto unwritable = preprocess(byte_options(dir.file("in.txt"), dir.file("no/dir/out"), 1));
  EXPECT_EQ(unwritable.status().code(), StatusCode::kIOError);
  EXPECT_NE(unwritable.status().message().find("--output-prefix: cannot create '" +
                                               dir.file("no/dir/out_text_document.bin.tmp")),
            std::string::npos)
      << unwritable.status().message();

  PreprocessOptions eod = byte_options(dir.file("in.txt"), dir.file("out"), 1);
  eod.append_eod = true;
  EXPECT_NE(preprocess(eod).status().message().find("--append-eod: --tokenizer-type ByteTokenizer"),
            std::string::npos);

  PreprocessOptions o = byte_options(dir.file("in.txt"), dir.file("out"), 0);
  EXPECT_NE(o.validate().message().find("--workers 0"), std::string::npos);
  o.workers = 1;
  o.json_keys = {"body"};
  EXPECT_NE(o.validate().message().find("--json-keys body: --input"), std::string::npos);
  o.input = dir.file("in.jsonl");
  o.json_keys = {"a", "a"};
  EXPECT_NE(o.validate().message().find("'a' twice"), std::string::npos);
  o.json_keys = {"text"};
  o.tokenizer.type = TokenizerType::kGpt2Bpe;
  EXPECT_NE(o.validate().message().find("--vocab-file"), std::string::npos);
}

}  // namespace
}  // namespace tightpipe
