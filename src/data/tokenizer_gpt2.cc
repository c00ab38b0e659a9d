// GPT-2's byte-level BPE (Megatron-LM's GPT2BPETokenizer). Text is cut into words by GPT-2's
// pre-tokenisation pattern (PCRE2, Unicode classes, JIT); each word's bytes start as one symbol per
// byte and the adjacent pair with the lowest merge rank is merged everywhere in the word, left to
// right, until no adjacent pair has a rank. Bytes the pattern cannot match (invalid UTF-8) form
// words of their own, so any bytes encode and decode back unchanged. Each thread keeps a bounded
// cache word -> ids (words up to 1 KiB) and its own PCRE2 match data. A word of n bytes costs
// O(n log n) time and about 12n bytes of scratch at most (apply_merges_long), freed after it.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

#include "tightpipe/base.h"
#include "tightpipe/input_file.h"
#include "tokenizers.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace tightpipe {

namespace {

// GPT-2's pre-tokenisation pattern, verbatim.
constexpr std::string_view kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kEndOfText = "<|endoftext|>";

// GPT-2's byte -> code point table: printable Latin-1 bytes stand for themselves, the others
// (controls, space, 127-160, 173) take code points 256, 257, ... in byte order.
std::array<uint32_t, 256> byte_to_code_point() {
  std::array<uint32_t, 256> table{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    bool printable_latin1 = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    table[b] = printable_latin1 ? b : next++;
  }
  return table;
}

// Decodes one UTF-8 code point at s[*pos] (advancing *pos); -1 when malformed.
int64_t next_code_point(std::string_view s, size_t* pos) {
  auto c = static_cast<unsigned char>(s[*pos]);
  int extra = c < 0x80 ? 0 : (c >> 5) == 6 ? 1 : (c >> 4) == 14 ? 2 : (c >> 3) == 30 ? 3 : -1;
  if (extra < 0 || *pos + extra >= s.size()) return -1;
  uint32_t cp = extra == 0 ? c : (c & (0x3F >> extra));
  for (int k = 1; k <= extra; ++k) {
    auto cc = static_cast<unsigned char>(s[*pos + k]);
    if ((cc >> 6) != 2) return -1;
    cp = (cp << 6) | (cc & 0x3F);
  }
  *pos += extra + 1;
  return cp;
}

// A vocabulary entry's text (GPT-2's byte alphabet, as vocab.json and merges.txt spell it) as the
// bytes it stands for; nullopt when it holds a character outside the alphabet.
std::optional<std::string> alphabet_to_bytes(std::string_view text,
                                             const std::unordered_map<uint32_t, uint8_t>& inverse) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    int64_t cp = next_code_point(text, &pos);
    if (cp < 0) return std::nullopt;
    auto it = inverse.find(static_cast<uint32_t>(cp));
    if (it == inverse.end()) return std::nullopt;
    out.push_back(static_cast<char>(it->second));
  }
  return out;
}

struct PcreCodeFree {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Merge ranks keyed by the pair of symbol ids: open addressing, power-of-two slots.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank = 0;
    int32_t merged = -1;
  };
  explicit MergeTable(size_t n) {
    size_t slots = 16;
    while (slots < 2 * n + 1) slots *= 2;
    keys_.assign(slots, kEmpty);
    values_.resize(slots);
  }
  // A repeated pair keeps the later rank (a dict built from the merge list does the same).
  void put(int32_t a, int32_t b, Merge m) {
    size_t slot = find_slot(key(a, b));
    keys_[slot] = key(a, b);
    values_[slot] = m;
  }
  const Merge* get(int32_t a, int32_t b) const {
    size_t slot = find_slot(key(a, b));
    return keys_[slot] == kEmpty ? nullptr : &values_[slot];
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static uint64_t key(int32_t a, int32_t b) {
    return (uint64_t{static_cast<uint32_t>(a)} << 32) | static_cast<uint32_t>(b);
  }
  size_t find_slot(uint64_t k) const {
    size_t mask = keys_.size() - 1;
    size_t slot = (k * 0x9E3779B97F4A7C15ull) >> 20 & mask;
    while (keys_[slot] != kEmpty && keys_[slot] != k) slot = (slot + 1) & mask;
    return slot;
  }
  std::vector<uint64_t> keys_;
  std::vector<Merge> values_;
};

// The scratch of Gpt2BpeTokenizer::apply_merges_long(), kept by each thread: one list of pair
// positions (left symbols' starts) per merge rank, a min-heap of the ranks whose list is not
// empty, and the number of entries over all lists.
class LongWordState {
 public:
  // Before a word: room for `ranks` lists.
  void start(uint32_t ranks) {
    if (lists_.size() < ranks) {
      lists_.resize(ranks);
      queued_.resize(ranks, 0);
      counts_.resize(ranks, 0);
    }
  }
  // Empties every list, freeing its memory.
  void clear_lists() {
    for (uint32_t r : heap_) {
      std::vector<uint32_t>().swap(lists_[r]);
      queued_[r] = 0;
    }
    heap_.clear();
    entries_ = 0;
  }
  // count() each entry to come, then reserve_counted(), then add() them: lists without slack.
  void count(uint32_t rank) {
    if (counts_[rank]++ == 0) counted_.push_back(rank);
  }
  void reserve_counted() {
    for (uint32_t r : counted_) {
      lists_[r].reserve(counts_[r]);
      counts_[r] = 0;
    }
    counted_.clear();
  }
  void add(uint32_t rank, uint32_t pos) {
    lists_[rank].push_back(pos);
    ++entries_;
    if (queued_[rank] == 0) {
      queued_[rank] = 1;
      heap_.push_back(rank);
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
    }
  }
  bool any() const { return !heap_.empty(); }
  size_t entries() const { return entries_; }
  // Moves the lowest rank's list into *batch (emptying it there) and returns the rank.
  uint32_t take_lowest(std::vector<uint32_t>* batch) {
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const uint32_t rank = heap_.back();
    heap_.pop_back();
    queued_[rank] = 0;
    *batch = std::move(lists_[rank]);
    lists_[rank] = std::vector<uint32_t>();
    entries_ -= batch->size();
    return rank;
  }
  // After a word: frees what a long one made big.
  void finish() {
    clear_lists();
    if (heap_.capacity() > 4096) std::vector<uint32_t>().swap(heap_);
    if (counted_.capacity() > 4096) std::vector<uint32_t>().swap(counted_);
  }

 private:
  std::vector<std::vector<uint32_t>> lists_;  // by rank
  std::vector<char> queued_;                  // by rank: in heap_
  std::vector<uint32_t> counts_;              // by rank, between count() and reserve_counted()
  std::vector<uint32_t> counted_;             // the ranks count() saw
  std::vector<uint32_t> heap_;                // the ranks of the lists that are not empty
  size_t entries_ = 0;
};

std::atomic<uint64_t> g_next_tokenizer_serial{1};

// What one thread keeps between encode() calls: match data, scratch, the word cache of the
// tokenizer it last served (a different tokenizer clears it).
struct Gpt2ThreadState {
  static constexpr size_t kMaxCachedWords = 1 << 16;
  static constexpr size_t kMaxCachedIds = 1 << 21;
  // Longer words are not cached (nor is their key copied): a word of many MiB would take the
  // cache's memory, for a word that seldom comes twice.
  static constexpr size_t kMaxCachedWordBytes = 1024;
  struct Span {
    uint32_t offset;
    uint32_t size;
  };
  uint64_t owner = 0;
  pcre2_match_data* match_data = nullptr;
  std::unordered_map<std::string, Span, StringHash, std::equal_to<>> cache;
  std::vector<int32_t> cached_ids;
  std::vector<int32_t> word;
  LongWordState long_word;

  Gpt2ThreadState() { match_data = pcre2_match_data_create(1, nullptr); }
  ~Gpt2ThreadState() { pcre2_match_data_free(match_data); }
  Gpt2ThreadState(const Gpt2ThreadState&) = delete;
  Gpt2ThreadState& operator=(const Gpt2ThreadState&) = delete;
  void serve(uint64_t serial) {
    if (owner == serial) return;
    owner = serial;
    clear_cache();
  }
  void clear_cache() {
    cache.clear();
    cached_ids.clear();
  }
};

class Gpt2BpeTokenizer final : public Tokenizer {
 public:
  TokenizerType type() const override { return TokenizerType::kGpt2Bpe; }
  int32_t vocab_size() const override { return static_cast<int32_t>(token_offsets_.size() - 1); }
  int32_t eod() const override { return eod_; }

  std::vector<int32_t> encode(std::string_view text) const override {
    thread_local Gpt2ThreadState state;
    state.serve(serial_);
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 16);
    auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    while (pos < text.size()) {
      int rc = pcre2_match(code_.get(), subject, text.size(), pos, 0, state.match_data, nullptr);
      size_t start = text.size();
      size_t end = text.size();
      if (rc >= 0) {
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(state.match_data);
        start = ov[0];
        end = ov[1];
      } else if (rc != PCRE2_ERROR_NOMATCH) {
        // No error is expected (invalid UTF-8 only makes bytes unmatchable); whatever it is,
        // the byte at `pos` becomes a word of its own and the search goes on after it.
        start = end = pos + 1;
      }
      if (end <= start) end = start;  // the pattern has no empty match; never loop on one
      if (start > pos) encode_word(text.substr(pos, start - pos), state, &ids);
      if (end > start) encode_word(text.substr(start, end - start), state, &ids);
      pos = std::max(end, start);
    }
    return ids;
  }

  Result<std::string> decode(std::span<const int32_t> ids) const override {
    std::string out;
    out.reserve(ids.size() * 4);
    for (size_t k = 0; k < ids.size(); ++k) {
      int32_t id = ids[k];
      if (id < 0 || id >= vocab_size()) {
        return id_outside_vocabulary(id, k, vocab_size(), "GPT-2's");
      }
      out.append(token_bytes_, token_offsets_[id], token_offsets_[id + 1] - token_offsets_[id]);
    }
    return out;
  }

  static Result<std::unique_ptr<Tokenizer>> load(const std::string& vocab_file,
                                                 const std::string& merge_file,
                                                 size_t long_word_bytes);

 private:
  // Appends the ids of one pre-tokenised word.
  void encode_word(std::string_view word, Gpt2ThreadState& state, std::vector<int32_t>* ids) const {
    if (word.size() == 1) {
      ids->push_back(byte_ids_[static_cast<unsigned char>(word[0])]);
      return;
    }
    const bool cacheable = word.size() <= Gpt2ThreadState::kMaxCachedWordBytes;
    if (cacheable) {
      if (auto it = state.cache.find(word); it != state.cache.end()) {
        const int32_t* p = state.cached_ids.data() + it->second.offset;
        ids->insert(ids->end(), p, p + it->second.size);
        return;
      }
    }
    std::vector<int32_t>& w = state.word;
    w.clear();
    w.reserve(word.size());
    for (char c : word) w.push_back(byte_ids_[static_cast<unsigned char>(c)]);
    if (w.size() > long_word_bytes_) {
      apply_merges_long(&w, state.long_word);
    } else {
      apply_merges(&w);
    }
    ids->insert(ids->end(), w.begin(), w.end());
    if (!cacheable) {
      // A long word is rare: its scratch goes rather than stay with the thread.
      if (w.capacity() > Gpt2ThreadState::kMaxCachedWordBytes) std::vector<int32_t>().swap(w);
      return;
    }
    if (state.cache.size() >= Gpt2ThreadState::kMaxCachedWords ||
        state.cached_ids.size() + w.size() > Gpt2ThreadState::kMaxCachedIds) {
      state.clear_cache();
    }
    Gpt2ThreadState::Span span{static_cast<uint32_t>(state.cached_ids.size()),
                               static_cast<uint32_t>(w.size())};
    state.cached_ids.insert(state.cached_ids.end(), w.begin(), w.end());
    state.cache.emplace(std::string(word), span);
  }

  // BPE on one word's symbols, in place: while some adjacent pair has a rank, merge every
  // occurrence of the lowest-ranked pair, scanning left to right without overlap.
  void apply_merges(std::vector<int32_t>* word) const {
    std::vector<int32_t>& w = *word;
    while (w.size() > 1) {
      const MergeTable::Merge* best = nullptr;
      int32_t first = 0;
      int32_t second = 0;
      for (size_t i = 0; i + 1 < w.size(); ++i) {
        const MergeTable::Merge* m = merges_.get(w[i], w[i + 1]);
        if (m != nullptr && (best == nullptr || m->rank < best->rank)) {
          best = m;
          first = w[i];
          second = w[i + 1];
        }
      }
      if (best == nullptr) return;
      size_t out = 0;
      for (size_t i = 0; i < w.size();) {
        if (i + 1 < w.size() && w[i] == first && w[i + 1] == second) {
          w[out++] = best->merged;
          i += 2;
        } else {
          w[out++] = w[i++];
        }
      }
      w.resize(out);
    }
  }

  // The same merges for long words, in place, in O(n log n) time (the sorts; the rest is linear)
  // and, beyond `w`'s 4 bytes a byte, 4 bytes a listed pair: the pass's list and the lists it
  // fills, stale entries included (listed afresh when they outnumber half the symbols), about 8
  // bytes a byte at most.
  //
  // A symbol is a run of the word's bytes [p, p + length): `w[p]` is its id at its first byte
  // (>= 0), and every other byte of it holds -(p + 1), so the next symbol starts at p + length
  // and the previous one ends at p - 1, where either its id (a one-byte symbol) or -(its start
  // + 1) is. Each adjacent pair with a rank is listed by its left symbol's start in the list of
  // its rank when it forms. The lowest rank's list is then taken whole, sorted, and merged left
  // to right, skipping entries whose pair changed since (lazy invalidation): exactly one pass of
  // apply_merges() for that pair. A merge forms no pair of its own rank (the merged token is longer
  // than either part), so the pass never feeds itself; pairs it forms with a lower rank (possible
  // only with hand-made merge files) wait in their list for the next pass, as in apply_merges().
  void apply_merges_long(std::vector<int32_t>* word, LongWordState& s) const {
    std::vector<int32_t>& w = *word;
    const auto n = static_cast<uint32_t>(w.size());
    TP_CHECK(w.size() < (size_t{1} << 31), "a word of ", w.size(), " bytes (at most 2^31 - 1)");
    s.start(static_cast<uint32_t>(merge_ranks_));
    auto next = [&](uint32_t p) {
      const int32_t id = w[p];
      return p + static_cast<uint32_t>(token_offsets_[id + 1] - token_offsets_[id]);
    };
    auto prev = [&](uint32_t p) -> int64_t {
      if (p == 0) return -1;
      return w[p - 1] >= 0 ? int64_t{p} - 1 : -int64_t{w[p - 1]} - 1;
    };
    // The rank of the pair starting at symbol p, or nullptr.
    auto pair_at = [&](uint32_t p) -> const MergeTable::Merge* {
      const uint32_t q = next(p);
      return q < n ? merges_.get(w[p], w[q]) : nullptr;
    };
    auto list_all_pairs = [&] {
      s.clear_lists();
      for (uint32_t p = 0; p < n; p = next(p)) {
        if (const MergeTable::Merge* m = pair_at(p)) s.count(m->rank);
      }
      s.reserve_counted();
      for (uint32_t p = 0; p < n; p = next(p)) {
        if (const MergeTable::Merge* m = pair_at(p)) s.add(m->rank, p);
      }
    };
    list_all_pairs();
    uint64_t symbols = n;
    std::vector<uint32_t> batch;
    while (s.any()) {
      // Stale entries more than half the pairs: list the pairs afresh (amortised O(1) a merge).
      if (s.entries() > symbols + symbols / 2 + 4096) {
        list_all_pairs();
        if (!s.any()) break;
      }
      const uint32_t rank = s.take_lowest(&batch);
      if (!std::is_sorted(batch.begin(), batch.end())) std::sort(batch.begin(), batch.end());
      // The last merged symbol, whose pair with its right neighbour is listed only once that
      // neighbour is final: when it merges too, its own left pair is that pair.
      int64_t pending = -1;
      for (const uint32_t p : batch) {
        if (w[p] < 0) continue;  // no longer a symbol's start
        const MergeTable::Merge* m = pair_at(p);
        if (m == nullptr || m->rank != rank) continue;
        const uint32_t q = next(p);
        const uint32_t end = next(q);
        if (pending >= 0 && next(static_cast<uint32_t>(pending)) != p) {
          if (const MergeTable::Merge* pm = pair_at(static_cast<uint32_t>(pending))) {
            s.add(pm->rank, static_cast<uint32_t>(pending));
          }
        }
        w[p] = m->merged;
        w[q] = -static_cast<int32_t>(p) - 1;
        w[end - 1] = -static_cast<int32_t>(p) - 1;
        --symbols;
        if (const int64_t l = prev(p); l >= 0) {
          if (const MergeTable::Merge* lm = pair_at(static_cast<uint32_t>(l))) {
            s.add(lm->rank, static_cast<uint32_t>(l));
          }
        }
        pending = p;
      }
      if (pending >= 0) {
        if (const MergeTable::Merge* pm = pair_at(static_cast<uint32_t>(pending))) {
          s.add(pm->rank, static_cast<uint32_t>(pending));
        }
      }
    }
    s.finish();
    uint32_t out = 0;
    for (uint32_t p = 0; p < n;) {
      const uint32_t q = next(p);
      w[out++] = w[p];
      p = q;
    }
    w.resize(out);
  }

  Gpt2BpeTokenizer(size_t merge_count, size_t long_word_bytes)
      : long_word_bytes_(long_word_bytes), merges_(merge_count) {}

  size_t long_word_bytes_;  // words longer than this take apply_merges_long()
  size_t merge_ranks_ = 0;  // merges in merges.txt (ranks 0 .. merge_ranks_ - 1)

  uint64_t serial_ = g_next_tokenizer_serial.fetch_add(1);
  std::unique_ptr<pcre2_code, PcreCodeFree> code_;
  std::array<int32_t, 256> byte_ids_{};  // the id of each single byte
  std::string token_bytes_;              // every token's bytes, by id
  std::vector<size_t> token_offsets_;    // id -> [offsets[id], offsets[id + 1]) in token_bytes_
  MergeTable merges_;
  int32_t eod_ = -1;
};

Result<std::unique_ptr<Tokenizer>> Gpt2BpeTokenizer::load(const std::string& vocab_file,
                                                          const std::string& merge_file,
                                                          size_t long_word_bytes) {
  const std::array<uint32_t, 256> to_code_point = byte_to_code_point();
  std::unordered_map<uint32_t, uint8_t> to_byte;
  for (int b = 0; b < 256; ++b) to_byte[to_code_point[b]] = static_cast<uint8_t>(b);

  // vocab.json: {"token": id, ...}, ids 0..n-1 each once.
  auto vocab_text = read_input_file("--vocab-file", vocab_file, input_kind::kTokenizer);
  if (!vocab_text.ok()) return vocab_text.status();
  nlohmann::json vocab = nlohmann::json::parse(*vocab_text, nullptr, /*allow_exceptions=*/false);
  if (vocab.is_discarded() || !vocab.is_object() || vocab.empty()) {
    return Status::invalid_argument(fmt::format(
        "--vocab-file {}: not a JSON object of token -> id (starts with '{}'); hint: GPT-2's "
        "vocab.json",
        printable(vocab_file, 200), printable(std::string_view(*vocab_text).substr(0, 20))));
  }
  const size_t n = vocab.size();
  std::vector<std::string> tokens(n);
  std::vector<bool> seen(n, false);
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> id_of;
  id_of.reserve(n);
  for (const auto& [text, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
        value.get<int64_t>() >= static_cast<int64_t>(n) || seen[value.get<int64_t>()]) {
      return Status::invalid_argument(fmt::format(
          "--vocab-file {}: token '{}' has id {}, expected a distinct integer in [0, {}); hint: "
          "the ids of vocab.json number its tokens 0, 1, ...",
          printable(vocab_file, 200), printable(text), printable(value.dump()), n));
    }
    auto bytes = alphabet_to_bytes(text, to_byte);
    if (!bytes) {
      return Status::invalid_argument(fmt::format(
          "--vocab-file {}: token '{}' has a character outside GPT-2's byte alphabet; hint: a "
          "byte-level BPE vocabulary spells every byte as one of 256 characters",
          printable(vocab_file, 200), printable(text)));
    }
    int64_t id = value.get<int64_t>();
    seen[id] = true;
    tokens[id] = *bytes;
    id_of.emplace(std::move(*bytes), static_cast<int32_t>(id));
  }

  // merges.txt: "#version..." then one "a b" per line, rank = line order.
  auto merge_text = read_input_file("--merge-file", merge_file, input_kind::kTokenizer);
  if (!merge_text.ok()) return merge_text.status();
  std::vector<std::string> lines = split(*merge_text, '\n');
  std::unique_ptr<Gpt2BpeTokenizer> t(new Gpt2BpeTokenizer(lines.size(), long_word_bytes));
  uint32_t rank = 0;
  for (size_t k = 0; k < lines.size(); ++k) {
    std::string_view line = trim(lines[k]);
    if (line.empty() || (k == 0 && line.starts_with("#"))) continue;
    size_t space = line.find_first_of(" \t");
    std::string_view a = line.substr(0, space);
    std::string_view b = space == std::string_view::npos ? "" : trim(line.substr(space));
    if (a.empty() || b.empty() || b.find_first_of(" \t") != std::string_view::npos) {
      return Status::invalid_argument(fmt::format(
          "--merge-file {} line {}: '{}' is not two symbols; hint: merges.txt holds one merge "
          "per line, 'left right'",
          printable(merge_file, 200), k + 1, printable(line)));
    }
    auto a_bytes = alphabet_to_bytes(a, to_byte);
    auto b_bytes = alphabet_to_bytes(b, to_byte);
    auto a_id = a_bytes ? id_of.find(*a_bytes) : id_of.end();
    auto b_id = b_bytes ? id_of.find(*b_bytes) : id_of.end();
    auto merged = (a_bytes && b_bytes) ? id_of.find(*a_bytes + *b_bytes) : id_of.end();
    if (a_id == id_of.end() || b_id == id_of.end() || merged == id_of.end()) {
      std::string_view missing = a_id == id_of.end()   ? a
                                 : b_id == id_of.end() ? b
                                                       : std::string_view("their concatenation");
      return Status::invalid_argument(fmt::format(
          "--merge-file {} line {}: merge '{}': '{}' is not in --vocab-file {}; hint: the "
          "vocab/merges pair disagrees, pass the vocab.json and merges.txt made together",
          printable(merge_file, 200), k + 1, printable(line), printable(missing),
          printable(vocab_file, 200)));
    }
    t->merges_.put(a_id->second, b_id->second, {rank++, merged->second});
  }
  t->merge_ranks_ = rank;

  for (int b = 0; b < 256; ++b) {
    auto it = id_of.find(std::string(1, static_cast<char>(b)));
    if (it == id_of.end()) {
      return Status::invalid_argument(fmt::format(
          "--vocab-file {}: no token for byte 0x{:02x}; hint: a byte-level BPE vocabulary holds "
          "all 256 bytes",
          printable(vocab_file, 200), b));
    }
    t->byte_ids_[b] = it->second;
  }
  auto eod = id_of.find(kEndOfText);
  if (eod == id_of.end()) {
    return Status::invalid_argument(
        fmt::format("--vocab-file {}: no token {}; hint: GPT-2's end-of-document token",
                    printable(vocab_file, 200), kEndOfText));
  }
  t->eod_ = eod->second;
  t->token_offsets_.reserve(n + 1);
  t->token_offsets_.push_back(0);
  for (const std::string& tok : tokens) {
    t->token_bytes_ += tok;
    t->token_offsets_.push_back(t->token_bytes_.size());
  }

  int error = 0;
  PCRE2_SIZE error_offset = 0;
  t->code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern.data()), kPattern.size(),
                               PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                               &error_offset, nullptr));
  if (t->code_ == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    return Status::internal(fmt::format("GPT-2's pattern does not compile with this PCRE2: {}",
                                        reinterpret_cast<const char*>(message.data())));
  }
  // Without JIT (a platform without it) pcre2_match interprets the same pattern.
  (void)pcre2_jit_compile(t->code_.get(), PCRE2_JIT_COMPLETE);
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> make_gpt2_bpe_tokenizer(const std::string& vocab_file,
                                                           const std::string& merge_file,
                                                           size_t long_word_bytes) {
  return Gpt2BpeTokenizer::load(vocab_file, merge_file, long_word_bytes);
}

}  // namespace tightpipe
