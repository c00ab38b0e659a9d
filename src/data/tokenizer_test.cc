// Tokenizers: GPT-2 BPE against Megatron-LM's own tokenization of tiny Shakespeare (token for
// token), round trips, known encodings, bad files; SentencePiece on a model trained here.
#include "tightpipe/tokenizer.h"

#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

#include "data/test_util.h"
#include "data/tokenizers.h"
#include "tightpipe/base.h"
#include "tightpipe/preprocess.h"

namespace tightpipe {
namespace {

using data_test::ScratchDir;

const std::string kData = std::string(TP_SHARED_DIR) + "/data";

const Tokenizer& gpt2() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    TokenizerOptions options;
    options.type = TokenizerType::kGpt2Bpe;
    options.vocab_file = kData + "/gpt2/vocab.json";
    options.merge_file = kData + "/gpt2/merges.txt";
    auto t = make_tokenizer(options);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return t.ok() ? std::move(*t) : nullptr;
  }();
  return *tokenizer;
}

std::string corpus() {
  auto text = read_file(kData + "/tinyshakespeare.txt");
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return text.ok() ? *text : std::string();
}

// Megatron's documents of tiny Shakespeare: the .idx read with a few lines (format in
// ../shared/data/megatron/README.md), the tokens of each document.
std::vector<std::vector<int32_t>> megatron_documents() {
  const std::string prefix = kData + "/megatron/tinyshakespeare_gpt2_text_document";
  auto idx = read_file(prefix + ".idx");
  auto bin = read_file(prefix + ".bin");
  EXPECT_TRUE(idx.ok() && bin.ok());
  if (!idx.ok() || !bin.ok()) return {};
  const std::string& x = *idx;
  EXPECT_EQ(x.substr(0, 9), std::string("MMIDIDX\0\0", 9));
  EXPECT_EQ(x[17], 8);  // uint16
  uint64_t sequences = 0;
  uint64_t documents = 0;
  std::memcpy(&sequences, x.data() + 18, 8);
  std::memcpy(&documents, x.data() + 26, 8);
  EXPECT_EQ(x.size(), 34 + sequences * 12 + documents * 8);
  EXPECT_EQ(documents, sequences + 1);  // one sequence per document
  std::vector<std::vector<int32_t>> out;
  for (uint64_t s = 0; s < sequences; ++s) {
    int32_t length = 0;
    int64_t pointer = 0;
    std::memcpy(&length, x.data() + 34 + 4 * s, 4);
    std::memcpy(&pointer, x.data() + 34 + 4 * sequences + 8 * s, 8);
    std::vector<int32_t> ids(length);
    for (int32_t k = 0; k < length; ++k) {
      uint16_t v = 0;
      std::memcpy(&v, bin->data() + pointer + 2 * k, 2);
      ids[k] = v;
    }
    out.push_back(std::move(ids));
  }
  return out;
}

TEST(Gpt2Bpe, MatchesMegatronTokenForToken) {
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.vocab_size(), 50257);
  EXPECT_EQ(t.eod(), 50256);
  std::string text = corpus();
  std::vector<std::vector<int32_t>> expected = megatron_documents();
  std::vector<std::string_view> docs = split_paragraphs(text);
  ASSERT_EQ(docs.size(), 7222u);
  ASSERT_EQ(expected.size(), docs.size());
  EXPECT_EQ(docs[0], "First Citizen:\nBefore we proceed any further, hear me speak.");
  size_t tokens = 0;
  size_t mismatches = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> ids = t.encode(docs[d]);
    ids.push_back(t.eod());
    tokens += ids.size();
    if (ids != expected[d] && ++mismatches <= 3) {
      ADD_FAILURE() << "document " << d << " '" << printable(docs[d])
                    << "' differs from Megatron's";
    }
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(tokens, 330807u);
}

// The heap merge of long words (every word of 2+ bytes here) against the passes (words of up to
// 48 bytes by default, and every word below via a huge threshold): Megatron's tokens, and random
// long words where the two must agree.
TEST(Gpt2Bpe, LongWordMergeIsTheSame) {
  const std::string vocab = kData + "/gpt2/vocab.json";
  const std::string merges = kData + "/gpt2/merges.txt";
  auto heap = make_gpt2_bpe_tokenizer(vocab, merges, /*long_word_bytes=*/1);
  auto passes = make_gpt2_bpe_tokenizer(vocab, merges, /*long_word_bytes=*/SIZE_MAX);
  ASSERT_TRUE(heap.ok() && passes.ok());
  std::string text = corpus();
  std::vector<std::vector<int32_t>> expected = megatron_documents();
  std::vector<std::string_view> docs = split_paragraphs(text);
  ASSERT_EQ(expected.size(), docs.size());
  for (size_t d = 0; d < docs.size(); ++d) {
    std::vector<int32_t> ids = (*heap)->encode(docs[d]);
    ids.push_back(50256);
    ASSERT_EQ(ids, expected[d]) << "document " << d;
  }
  Rng rng(16);
  for (int k = 0; k < 300; ++k) {
    std::string word(1 + rng.below(400), ' ');
    const int alphabet = 1 + static_cast<int>(rng.below(26));
    for (char& c : word) c = static_cast<char>('a' + rng.below(alphabet));
    if (k % 3 == 0) word = " " + word;
    ASSERT_EQ((*heap)->encode(word), (*passes)->encode(word)) << word;
  }
}

// The merge of long words against the passes (the reference's loop, the oracle) on words that
// stress it: small alphabets (long runs, ties between equal pairs), multi-byte letters, and
// words from the corpus glued together.
TEST(Gpt2Bpe, LongWordMergeMatchesThePassesOnHardWords) {
  const std::string vocab = kData + "/gpt2/vocab.json";
  const std::string merges = kData + "/gpt2/merges.txt";
  auto fast = make_gpt2_bpe_tokenizer(vocab, merges, /*long_word_bytes=*/1);
  auto passes = make_gpt2_bpe_tokenizer(vocab, merges, /*long_word_bytes=*/SIZE_MAX);
  ASSERT_TRUE(fast.ok() && passes.ok());
  const std::vector<std::string> letters = {
      "a", "b", "x", "e", "r", "\xc3\xa9", "\xe6\xbc\xa2", "\xd0\xb6", "t", "h", "s"};
  Rng rng(27);
  for (int k = 0; k < 400; ++k) {
    const size_t alphabet = 1 + rng.below(k % 2 == 0 ? 2 : 4);
    const size_t offset = rng.below(letters.size() - alphabet + 1);
    std::string word = k % 5 == 0 ? " " : "";
    const size_t length = 2 + rng.below(k % 10 == 0 ? 5000 : 300);
    while (word.size() < length) word += letters[offset + rng.below(alphabet)];
    ASSERT_EQ((*fast)->encode(word), (*passes)->encode(word)) << word;
  }
  // Runs of one letter of every length up to 600 (the parity of a run decides its merges).
  for (size_t n = 2; n <= 600; ++n) {
    const std::string word(n, 'x');
    ASSERT_EQ((*fast)->encode(word), (*passes)->encode(word)) << n;
  }
  // The corpus's letters with everything else taken out: one word of 800 KiB, and pieces of it.
  std::string glued;
  for (char c : corpus()) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) glued.push_back(c);
  }
  ASSERT_GT(glued.size(), size_t{700000});
  for (size_t length : {size_t{64}, size_t{1000}, size_t{30000}}) {
    const std::string word = glued.substr(length, length);
    ASSERT_EQ((*fast)->encode(word), (*passes)->encode(word)) << length;
  }
  EXPECT_EQ(*(*fast)->decode((*fast)->encode(glued)), glued);
}

// Words of many MiB (the preprocess of one such document ran out of memory): the same ids as the
// passes, which take a few passes over a periodic word, and by construction for a run of 'x'
// (GPT-2 merges x x, then xx xx, then xxxx xxxx).
TEST(Gpt2Bpe, HugeWordsMatchThePasses) {
  const std::string vocab = kData + "/gpt2/vocab.json";
  const std::string merges = kData + "/gpt2/merges.txt";
  auto passes = make_gpt2_bpe_tokenizer(vocab, merges, /*long_word_bytes=*/SIZE_MAX);
  ASSERT_TRUE(passes.ok());
  const std::string xs(4 << 20, 'x');
  const std::vector<int32_t> ids = gpt2().encode(xs);
  const std::vector<int32_t> eight = gpt2().encode("xxxxxxxx");
  ASSERT_EQ(eight.size(), 1u);
  EXPECT_EQ(ids, std::vector<int32_t>(xs.size() / 8, eight[0]));
  EXPECT_EQ(ids, (*passes)->encode(xs));
  EXPECT_EQ(gpt2().encode(xs + "xxx").size(), ids.size() + 1);  // "xxx" is a token

  std::string pattern;
  while (pattern.size() < (1 << 19))
    pattern +=
        "\xc3\xa9t\xe6\xbc\xa2"
        "e\xc3\xa9";
  const std::vector<int32_t> pattern_ids = gpt2().encode(pattern);
  EXPECT_EQ(pattern_ids, (*passes)->encode(pattern));
  EXPECT_EQ(*gpt2().decode(pattern_ids), pattern);
  // The cache keeps short words only: the huge word again gives the same ids.
  EXPECT_EQ(gpt2().encode(xs), ids);
}

TEST(Gpt2Bpe, LongWordRoundTrips) {
  // One 256 KiB word without spaces goes through the heap merge (quadratic passes would take
  // minutes; bench/data/tokenize_bench measures the speed) and decodes back.
  Rng rng(7);
  std::string word(1 << 18, ' ');
  for (char& c : word) c = static_cast<char>('a' + rng.below(26));
  const std::vector<int32_t> ids = gpt2().encode(word);
  EXPECT_LT(ids.size(), word.size());
  EXPECT_EQ(*gpt2().decode(ids), word);
}

TEST(Gpt2Bpe, RoundTripsTheWholeCorpus) {
  const Tokenizer& t = gpt2();
  std::string text = corpus();
  auto back = t.decode(t.encode(text));
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(*back == text);
}

TEST(Gpt2Bpe, RoundTripsUnicodeAndInvalidBytes) {
  const Tokenizer& t = gpt2();
  const std::vector<std::string> texts = {
      "日本語のテキスト、中文文本。한국어 텍스트",
      "café naïve façade Ångström Œuvre ß İstanbul",
      "emoji 😀👍🏽 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵",
      "combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0345\u0307",
      "runs:    four spaces\t\ttabs \t mixed\n\n\n  \r\n\r\nCRLF\r\n",
      "   leading and trailing   ",
      std::string("invalid \xff\xfe bytes \xc3 cut \xe2\x82 and \x80 lone ") +
          std::string(1, '\0') + "nul",
      std::string("\xf0\x9f\x98"),  // a truncated 4-byte sequence at the end
      std::string(5000, ' ') + "x" + std::string(3000, '\t'),
      "<|endoftext|> inside the text",
      "numbers 123 4567 ٣٤٥ ½ ²",
  };
  for (const std::string& s : texts) {
    std::vector<int32_t> ids = t.encode(s);
    auto back = t.decode(ids);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(*back, s) << printable(s);
  }
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  EXPECT_EQ(*t.decode(t.encode(all_bytes)), all_bytes);
}

TEST(Tokenizer, SplitParagraphs) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split_paragraphs("a\nb\n\nc\n"), (V{"a\nb", "c\n"}));
  EXPECT_EQ(split_paragraphs("a\n\n\nb"), (V{"a", "\nb"}));
  EXPECT_EQ(split_paragraphs("a\n\n\n\nb"), (V{"a", "", "b"}));
  EXPECT_EQ(split_paragraphs(""), (V{""}));
}

// Random bytes, mostly pieces of valid and broken UTF-8, spaces and letters: each round-trips.
TEST(Gpt2Bpe, RandomBytesRoundTrip) {
  const Tokenizer& t = gpt2();
  const std::vector<std::string> pieces = {" ",
                                           "  ",
                                           "\t",
                                           "\n",
                                           "\r\n",
                                           "a",
                                           "Z",
                                           "'s",
                                           "'",
                                           "7",
                                           "\xc3\xa9",
                                           "\xe6\x97\xa5",
                                           "\xf0\x9f\x98\x80",
                                           "\xcc\x81",
                                           "\xe2\x80\xaf",
                                           "\xc2\xa0",
                                           "\xc3",
                                           "\x80",
                                           "\xff",
                                           "\xed\xa0\x80",
                                           std::string(1, '\0')};
  Rng rng(42);
  for (int k = 0; k < 2000; ++k) {
    std::string s;
    const size_t n = rng.below(40);
    for (size_t i = 0; i < n; ++i) {
      if (rng.below(4) == 0) {
        s.push_back(static_cast<char>(rng.below(256)));
      } else {
        s += pieces[rng.below(pieces.size())];
      }
    }
    auto back = t.decode(t.encode(s));
    ASSERT_TRUE(back.ok());
    ASSERT_EQ(*back, s) << printable(s);
  }
}

TEST(Gpt2Bpe, KnownEncodings) {
  const Tokenizer& t = gpt2();
  EXPECT_EQ(t.encode("Hello world"), (std::vector<int32_t>{15496, 995}));
  EXPECT_EQ(t.encode(" the"), (std::vector<int32_t>{262}));
  EXPECT_EQ(t.encode("the"), (std::vector<int32_t>{1169}));
  // Contractions split off: "don" + "'t", "He" + "'ll".
  EXPECT_EQ(t.encode("don't"), (std::vector<int32_t>{9099, 470}));
  EXPECT_EQ(t.encode("He'll"), (std::vector<int32_t>{1544, 1183}));
  EXPECT_EQ(t.encode(""), std::vector<int32_t>{});
  // Megatron's GPT-2 tokenizer has no special tokens on encode: the text of <|endoftext|> is
  // ordinary text, not id 50256.
  std::vector<int32_t> eot = t.encode("<|endoftext|>");
  EXPECT_GT(eot.size(), 1u);
  EXPECT_EQ(*t.decode(std::vector<int32_t>{50256}), "<|endoftext|>");
}

TEST(Gpt2Bpe, ThreadsEncodeTheSame) {
  const Tokenizer& t = gpt2();
  std::string text = corpus().substr(0, 200000);
  std::vector<int32_t> expected = t.encode(text);
  std::vector<std::vector<int32_t>> got(2);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) threads.emplace_back([&, k] { got[k] = t.encode(text); });
  for (auto& th : threads) th.join();
  EXPECT_EQ(got[0], expected);
  EXPECT_EQ(got[1], expected);
}

TEST(Gpt2Bpe, DecodeRejectsIdsOutsideTheVocabulary) {
  const Tokenizer& t = gpt2();
  auto r = t.decode(std::vector<int32_t>{15496, 50257});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("token id 50257 at position 1"), std::string::npos)
      << r.status().message();
  EXPECT_FALSE(t.decode(std::vector<int32_t>{-1}).ok());
  auto byte_tokenizer = make_tokenizer(TokenizerOptions{});
  ASSERT_TRUE(byte_tokenizer.ok());
  auto b = (*byte_tokenizer)->decode(std::vector<int32_t>{65, 256});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("token id 256 at position 1: outside the byte tokenizer's"),
            std::string::npos)
      << b.status().message();
}

Result<std::unique_ptr<Tokenizer>> gpt2_from(const std::string& vocab, const std::string& merges) {
  TokenizerOptions options;
  options.type = TokenizerType::kGpt2Bpe;
  options.vocab_file = vocab;
  options.merge_file = merges;
  return make_tokenizer(options);
}

// A tiny valid byte-level vocabulary: the 256 bytes (in GPT-2's alphabet), "Ġt", "<|endoftext|>".
std::string tiny_vocab_json(bool with_merged) {
  std::string out = "{";
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool same = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    uint32_t cp = same ? b : next++;
    std::string utf8;
    if (cp < 0x80) {
      utf8 = std::string(1, static_cast<char>(cp));
      if (cp == '"' || cp == '\\') utf8 = "\\" + utf8;
    } else {
      utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    out += "\"" + utf8 + "\": " + std::to_string(b) + ", ";
  }
  int id = 256;
  if (with_merged) out += "\"\xc4\xa0t\": " + std::to_string(id++) + ", ";
  out += "\"<|endoftext|>\": " + std::to_string(id) + "}";
  return out;
}

// A checkpoint's tokenizer.json: the options come back (files as absolute paths), and a damaged
// file is one line naming it.
TEST(Tokenizer, OptionsJsonRoundTrip) {
  TokenizerOptions o;
  o.type = TokenizerType::kGpt2Bpe;
  o.vocab_file = kData + "/gpt2/vocab.json";
  o.merge_file = kData + "/gpt2/merges.txt";
  auto back = TokenizerOptions::from_json(o.to_json(), "ck/tokenizer.json");
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->type, TokenizerType::kGpt2Bpe);
  EXPECT_TRUE(back->vocab_file.starts_with("/")) << back->vocab_file;
  EXPECT_TRUE(back->vocab_file.ends_with("gpt2/vocab.json")) << back->vocab_file;
  EXPECT_TRUE(back->merge_file.ends_with("gpt2/merges.txt")) << back->merge_file;
  EXPECT_TRUE(back->tokenizer_model.empty());
  auto byte = TokenizerOptions::from_json(TokenizerOptions{}.to_json(), "t.json");
  ASSERT_TRUE(byte.ok());
  EXPECT_EQ(byte->type, TokenizerType::kByte);

  for (const char* bad : {"", "[1]", R"({"tokenizer_type": 3})", R"({"tokenizer_type": "Nope"})",
                          R"({"tokenizer_type": "GPT2BPETokenizer"})"}) {
    auto r = TokenizerOptions::from_json(bad, "ck/tokenizer.json");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << bad;
    EXPECT_NE(r.status().message().find("ck/tokenizer.json"), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("hint:"), std::string::npos) << r.status().message();
  }
}

TEST(Gpt2Bpe, BadFiles) {
  ScratchDir dir;
  const std::string merges = kData + "/gpt2/merges.txt";
  const std::string vocab = kData + "/gpt2/vocab.json";
  auto expect_error = [](const Result<std::unique_ptr<Tokenizer>>& r,
                         std::vector<std::string> parts) {
    ASSERT_FALSE(r.ok());
    for (const std::string& p : parts) {
      EXPECT_NE(r.status().message().find(p), std::string::npos)
          << "'" << p << "' not in: " << r.status().message();
    }
    EXPECT_NE(r.status().message().find("hint:"), std::string::npos) << r.status().message();
  };
  expect_error(gpt2_from(dir.file("absent.json"), merges), {"--vocab-file", "absent.json"});
  expect_error(gpt2_from(vocab, dir.file("absent.txt")), {"--merge-file", "absent.txt"});

  ASSERT_TRUE(write_file(dir.file("not_json.json"), "#version: 0.2\nĠ t\n").ok());
  expect_error(gpt2_from(dir.file("not_json.json"), merges), {"not_json.json", "not a JSON"});
  ASSERT_TRUE(write_file(dir.file("bad_id.json"), R"({"a": 0, "b": "one"})").ok());
  expect_error(gpt2_from(dir.file("bad_id.json"), merges), {"bad_id.json", "'b'", "\"one\""});

  // A valid tiny pair loads and encodes with its one merge.
  ASSERT_TRUE(write_file(dir.file("tiny.json"), tiny_vocab_json(true)).ok());
  ASSERT_TRUE(write_file(dir.file("tiny.txt"), "#version: 0.2\n\xc4\xa0 t\n").ok());
  auto tiny = gpt2_from(dir.file("tiny.json"), dir.file("tiny.txt"));
  ASSERT_TRUE(tiny.ok()) << tiny.status().to_string();
  EXPECT_EQ((*tiny)->encode(" tt"), (std::vector<int32_t>{256, 't'}));
  EXPECT_EQ((*tiny)->eod(), 257);

  // The merged token missing from the vocabulary: the pair disagrees.
  ASSERT_TRUE(write_file(dir.file("no_merged.json"), tiny_vocab_json(false)).ok());
  expect_error(gpt2_from(dir.file("no_merged.json"), dir.file("tiny.txt")),
               {"tiny.txt line 2", "disagrees"});
  // GPT-2's own merges against the tiny vocabulary: a part is missing.
  expect_error(gpt2_from(dir.file("tiny.json"), merges), {"merges.txt line", "disagrees"});
  ASSERT_TRUE(write_file(dir.file("three.txt"), "#version: 0.2\na b c\n").ok());
  expect_error(gpt2_from(dir.file("tiny.json"), dir.file("three.txt")),
               {"three.txt line 2", "not two symbols"});
}

TEST(SentencePiece, TrainedModelRoundTrips) {
  ScratchDir dir;
  std::string text = corpus();
  ASSERT_TRUE(write_file(dir.file("corpus.txt"), text).ok());
  auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir.file("corpus.txt") + " --model_prefix=" + dir.file("m") +
      " --vocab_size=500 --model_type=bpe --character_coverage=1.0"
      " --normalization_rule_name=identity --remove_extra_whitespaces=false"
      " --minloglevel=2 --num_threads=2");
  ASSERT_TRUE(status.ok()) << status.ToString();

  TokenizerOptions options;
  options.type = TokenizerType::kSentencePiece;
  options.tokenizer_model = dir.file("m.model");
  auto t = make_tokenizer(options);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->type(), TokenizerType::kSentencePiece);
  EXPECT_EQ((*t)->vocab_size(), 500);
  EXPECT_EQ((*t)->eod(), 2);  // the trainer's default eos id

  // The model is trained on lines: each line round-trips (newlines are not in its vocabulary).
  size_t lines = 0;
  for (const std::string& line : split(text, '\n')) {
    if (line.empty()) continue;
    std::vector<int32_t> ids = (*t)->encode(line);
    auto back = (*t)->decode(ids);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    ASSERT_EQ(*back, line);
    ++lines;
  }
  EXPECT_GT(lines, 30000u);
  auto bad = (*t)->decode(std::vector<int32_t>{5, 500});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("token id 500 at position 1"), std::string::npos);
}

// libsentencepiece encodes a text whole at 100+ bytes a byte: preprocess refuses a text over
// max_text_bytes() naming its line, before encoding it (it took minutes and gigabytes).
TEST(SentencePiece, PreprocessRefusesAnOverlongText) {
  ScratchDir dir;
  ASSERT_TRUE(write_file(dir.file("corpus.txt"), corpus().substr(0, 200000)).ok());
  auto status = sentencepiece::SentencePieceTrainer::Train(
      "--input=" + dir.file("corpus.txt") + " --model_prefix=" + dir.file("m") +
      " --vocab_size=200 --model_type=unigram --minloglevel=2 --num_threads=2");
  ASSERT_TRUE(status.ok()) << status.ToString();
  PreprocessOptions o;
  o.tokenizer.type = TokenizerType::kSentencePiece;
  o.tokenizer.tokenizer_model = dir.file("m.model");
  auto t = make_tokenizer(o.tokenizer);
  ASSERT_TRUE(t.ok());
  const size_t limit = (*t)->max_text_bytes();
  EXPECT_LE(limit, size_t{64} << 20);
  o.input = dir.file("in.jsonl");
  o.output_prefix = dir.file("out");
  ASSERT_TRUE(write_file(o.input, "{\"text\": \"short\"}\n{\"text\": \"" +
                                      std::string(limit + 1, 'a') + "\"}\n")
                  .ok());
  auto r = preprocess(o, nullptr);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  for (const std::string& needle :
       {std::string("in.jsonl' line 2"), std::string("SentencePieceTokenizer"),
        std::string("hint: split the document")}) {
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out_text_document.bin.tmp")));
}

TEST(SentencePiece, MissingOrBadModel) {
  ScratchDir dir;
  TokenizerOptions options;
  options.type = TokenizerType::kSentencePiece;
  options.tokenizer_model = dir.file("absent.model");
  auto missing = make_tokenizer(options);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("--tokenizer-model"), std::string::npos);
  EXPECT_NE(missing.status().message().find("absent.model"), std::string::npos);

  ASSERT_TRUE(write_file(dir.file("bad.model"), "this is not a protobuf \xff\xff\xff").ok());
  options.tokenizer_model = dir.file("bad.model");
  auto bad = make_tokenizer(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.model"), std::string::npos);
  EXPECT_NE(bad.status().message().find("hint:"), std::string::npos);
}

}  // namespace
}  // namespace tightpipe
