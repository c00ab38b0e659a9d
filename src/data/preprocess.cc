// preprocess() (preprocess.h): input records -> blocks -> worker threads (tokenize) -> writers in
// input order.
#include "tightpipe/preprocess.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <new>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/json_int.h"

namespace tightpipe {

namespace {

// A block is about this many input bytes: small enough that a 1 MB corpus spreads over several
// workers, large enough that handing blocks over costs nothing next to tokenizing them.
constexpr size_t kBlockBytes = 64 << 10;
constexpr size_t kReadChunk = 1 << 20;
// The longest record (a JSON line or a paragraph): token positions and Megatron's sequence
// lengths are 32-bit.
constexpr size_t kMaxRecordBytes = (size_t{1} << 31) - 1;

struct EncodedDocument {
  std::vector<int32_t> tokens;
  std::vector<int64_t> lengths;  // its non-empty sequences
};

struct Block {
  std::string text;                       // the input bytes of its records
  std::vector<std::string_view> records;  // into text: JSON lines or paragraphs
  std::vector<int64_t> lines;             // JSON input: each record's 1-based line number
  int64_t first_document = 0;             // the 0-based document number of records[0]
  int64_t bytes = 0;                      // input bytes the block covers (separators included)
  std::vector<std::vector<EncodedDocument>> encoded;  // [key][record]
  Status status;
  bool done = false;
};

// Cuts the input into blocks of whole records, kReadChunk read at a time. JSON lines: a block ends
// after a newline; blank lines are skipped (and counted). Plain text: the records are
// split_paragraphs() of the whole file; a block ends at a "\n\n" that starts a run of newlines,
// which the left-to-right split also cuts at, so splitting each block gives the same pieces.
class RecordReader {
 public:
  static Result<RecordReader> open(const std::string& path, bool json_lines) {
    TP_ASSIGN_OR_RETURN(InputFile in, open_input_file("--input", path, input_kind::kData));
    std::FILE* f = ::fdopen(in.fd(), "rb");  // the checked descriptor, not the path again
    if (f != nullptr) in.release();
    if (f == nullptr) {
      const int err = errno;
      return Status::io_error(fmt::format("--input '{}' cannot be opened: {}", printable(path, 200),
                                          std::strerror(err)));
    }
    return RecordReader(path, f, json_lines);
  }
  RecordReader(RecordReader&& o) noexcept
      : path_(std::move(o.path_)),
        file_(std::exchange(o.file_, nullptr)),
        json_lines_(o.json_lines_),
        buf_(std::move(o.buf_)),
        eof_(o.eof_),
        done_(o.done_),
        line_(o.line_) {}
  RecordReader(const RecordReader&) = delete;
  RecordReader& operator=(const RecordReader&) = delete;
  ~RecordReader() {
    if (file_ != nullptr) std::fclose(file_);
  }

  // The next block, or nullptr after the last one.
  Result<std::unique_ptr<Block>> next_block() {
    if (done_) return std::unique_ptr<Block>();
    // Read until a cut at or after kBlockBytes, or the end of the input.
    size_t from = kBlockBytes;
    size_t cut = std::string::npos;
    while ((cut = find_cut(from)) == std::string::npos && !eof_) {
      if (buf_.size() > from) from = buf_.size() - (json_lines_ ? 0 : 2);
      if (buf_.size() > kMaxRecordBytes + kBlockBytes) return record_too_long();
      TP_RETURN_IF_ERROR(refill());
    }
    auto block = std::make_unique<Block>();
    block->first_document = documents_;
    const size_t separator = json_lines_ ? 1 : 2;
    if (cut == std::string::npos) {  // the rest of the input
      if (buf_.size() > kMaxRecordBytes + kBlockBytes) return record_too_long();
      block->text = std::move(buf_);
      buf_.clear();
      block->bytes = static_cast<int64_t>(block->text.size());
      done_ = true;
    } else if (cut > kBlockBytes) {
      // A block of one long record: its bytes move rather than being copied.
      std::string rest = buf_.substr(cut + separator);
      block->text = std::move(buf_);
      block->text.resize(cut);
      buf_ = std::move(rest);
      block->bytes = static_cast<int64_t>(cut + separator);
    } else {
      block->text = buf_.substr(0, cut);
      block->bytes = static_cast<int64_t>(cut + separator);
      buf_.erase(0, cut + separator);
    }
    if (json_lines_) {
      // The lines of the block, blank ones skipped; a block cut right after a newline ends in an
      // empty (blank) line.
      const std::string_view text = block->text;
      for (size_t start = 0; !text.empty() && start <= text.size();) {
        size_t eol = text.find('\n', start);
        if (eol == std::string_view::npos) eol = text.size();
        const std::string_view line = text.substr(start, eol - start);
        ++line_;
        if (!trim(line).empty()) {
          block->records.push_back(line);
          block->lines.push_back(line_);
        }
        start = eol + 1;
      }
    } else {
      block->records = split_paragraphs(block->text);
    }
    documents_ += static_cast<int64_t>(block->records.size());
    return block;
  }

 private:
  RecordReader(std::string path, std::FILE* f, bool json_lines)
      : path_(std::move(path)), file_(f), json_lines_(json_lines) {}

  // Where the block starting at buf_[0] may end (the separator's offset), searching from `from`;
  // npos when buf_ holds none yet.
  size_t find_cut(size_t from) const {
    if (json_lines_) return from < buf_.size() ? buf_.find('\n', from) : std::string::npos;
    for (size_t at = from; at < buf_.size(); ++at) {
      at = buf_.find("\n\n", at);
      if (at == std::string::npos) return at;
      if (at > 0 && buf_[at - 1] != '\n') return at;  // the start of a run of newlines
    }
    return std::string::npos;
  }

  // A record over kMaxRecordBytes: the error names its line (JSON) or document number (text).
  Status record_too_long() const {
    const size_t record_start = json_lines_ ? buf_.rfind('\n', kBlockBytes) : std::string::npos;
    if (json_lines_) {
      const int64_t line =
          line_ + 1 + std::count(buf_.begin(), buf_.begin() + (record_start + 1), '\n');
      return Status::invalid_argument(fmt::format(
          "--input '{}' line {}: a line of more than {} (one JSON document); hint: split the "
          "document into several lines or sentences",
          printable(path_, 200), line, human_bytes(static_cast<double>(kMaxRecordBytes))));
    }
    const int64_t document =
        documents_ + static_cast<int64_t>(split_paragraphs(buf_.substr(0, kBlockBytes)).size()) - 1;
    return Status::invalid_argument(fmt::format(
        "--input '{}' document {}: a paragraph of more than {} (documents are separated by a "
        "blank line); hint: split the text with blank lines",
        printable(path_, 200), document, human_bytes(static_cast<double>(kMaxRecordBytes))));
  }

  Status refill() {
    const size_t old = buf_.size();
    if (old + kReadChunk > buf_.capacity()) {
      // Grow by a quarter, not the string's doubling: a long record costs about its size.
      std::string bigger;
      bigger.reserve(old + old / 4 + kReadChunk);
      bigger.append(buf_);
      buf_ = std::move(bigger);
    }
    buf_.resize(old + kReadChunk);
    const size_t got = std::fread(buf_.data() + old, 1, kReadChunk, file_);
    buf_.resize(old + got);
    if (got < kReadChunk) {
      if (std::ferror(file_)) {
        const int err = errno;
        return Status::io_error(
            fmt::format("--input '{}': read error: {}", printable(path_, 200), std::strerror(err)));
      }
      eof_ = true;
    }
    return OkStatus();
  }

  std::string path_;
  std::FILE* file_ = nullptr;
  bool json_lines_ = false;
  std::string buf_;  // the input from the next block's first byte
  bool eof_ = false;
  bool done_ = false;
  int64_t line_ = 0;
  int64_t documents_ = 0;  // records handed out in blocks
};

// Removes the datasets' .tmp files when SIGINT, SIGTERM or SIGHUP ends the process mid-way (on
// every other way out, an error or an exception, the writers' destructors remove them), then dies
// of the signal as it would have. Only for signals left at their default action, and only for the
// first preprocess() of the process at a time (others run without it).
class TempFilesOnSignal {
 public:
  explicit TempFilesOnSignal(const std::vector<std::string>& paths) {
    std::lock_guard<std::mutex> lock(mutex());
    if (active_) return;
    size_t count = 0;
    for (const std::string& path : paths) {
      if (path.size() >= kMaxPath || count == kMaxFiles) continue;
      std::memcpy(paths_[count], path.c_str(), path.size() + 1);
      ++count;
    }
    count_ = count;
    for (size_t k = 0; k < kSignals.size(); ++k) {
      struct sigaction now {};
      installed_[k] =
          sigaction(kSignals[k], nullptr, &old_[k]) == 0 && old_[k].sa_handler == SIG_DFL;
      if (!installed_[k]) continue;
      now.sa_handler = &TempFilesOnSignal::on_signal;
      sigemptyset(&now.sa_mask);
      installed_[k] = sigaction(kSignals[k], &now, nullptr) == 0;
    }
    active_ = owner_ = true;
  }
  ~TempFilesOnSignal() {
    if (!owner_) return;
    std::lock_guard<std::mutex> lock(mutex());
    for (size_t k = 0; k < kSignals.size(); ++k) {
      if (installed_[k]) sigaction(kSignals[k], &old_[k], nullptr);
    }
    active_ = false;
  }
  TempFilesOnSignal(const TempFilesOnSignal&) = delete;
  TempFilesOnSignal& operator=(const TempFilesOnSignal&) = delete;

 private:
  static constexpr size_t kMaxFiles = 64;
  static constexpr size_t kMaxPath = 4096;
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGHUP};

  // Async-signal-safe: unlink, signal, raise.
  static void on_signal(int sig) {
    for (size_t k = 0; k < count_; ++k) ::unlink(paths_[k]);
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }

  static inline bool active_ = false;
  static inline char paths_[kMaxFiles][kMaxPath] = {};
  static inline volatile size_t count_ = 0;
  static inline std::array<struct sigaction, 3> old_{};
  static inline std::array<bool, 3> installed_{};
  bool owner_ = false;
};

// Tokenizes one block (Megatron's Encoder.encode for each record and key).
class Encoder {
 public:
  Encoder(const PreprocessOptions& o, const Tokenizer& tokenizer)
      : o_(o), tokenizer_(tokenizer), json_(is_json_lines_path(o.input)) {}

  // Never throws: running out of memory on a record is its error (a worker thread must not end
  // the process, which would leave the .tmp files behind).
  void encode(Block& b) const {
    b.encoded.assign(o_.json_keys.size(), std::vector<EncodedDocument>(b.records.size()));
    for (size_t r = 0; r < b.records.size(); ++r) {
      try {
        b.status = encode_record(b, r);
      } catch (const std::bad_alloc&) {
        b.encoded.clear();
        b.status = Status::io_error(fmt::format(
            "{}: out of memory tokenizing its {}; hint: split the document (one per JSON line, or "
            "paragraphs separated by a blank line), or use a machine with more memory",
            where(b, r), human_bytes(static_cast<double>(b.records[r].size()))));
      }
      if (!b.status.ok()) return;
    }
  }

 private:
  // The record's name in errors: its line (JSON lines) or its document number (plain text).
  std::string where(const Block& b, size_t r) const {
    if (json_) return fmt::format("--input '{}' line {}", printable(o_.input, 200), b.lines[r]);
    return fmt::format("--input '{}' document {}", printable(o_.input, 200),
                       b.first_document + static_cast<int64_t>(r));
  }

  Status encode_record(Block& b, size_t r) const {
    if (!json_) {
      TP_RETURN_IF_ERROR(add_sentence(b.records[r], b.encoded[0][r], b, r));
      finish_document(b.encoded[0][r]);
      return OkStatus();
    }
    return encode_json(b.records[r], b, r);
  }

  Status encode_json(std::string_view line, Block& b, size_t r) const {
    auto where = [&] { return this->where(b, r); };
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      // what(): "[json.exception.parse_error.101] parse error at line 1, column 11: <why>"; the
      // line is always 1 here: keep "column 11" and the reason.
      const std::string_view what = e.what();
      const size_t column = what.find("column ");
      const size_t colon = what.find(": ", column);
      if (column == std::string_view::npos || colon == std::string_view::npos) {
        return Status::corruption(fmt::format("{}: not JSON: {}; line: {}", where(),
                                              printable(what, 160), printable(line)));
      }
      return Status::corruption(
          fmt::format("{}, {}: not JSON: {}; line: {}; hint: one JSON object per line, e.g. "
                      "{{\"text\": \"...\"}}",
                      where(), what.substr(column, colon - column),
                      printable(what.substr(colon + 2), 160), printable(line)));
    } catch (const nlohmann::json::exception& e) {
      return Status::corruption(fmt::format(
          "{}: not JSON: {}; line: {}; hint: one JSON object per line, e.g. {{\"text\": \"...\"}}",
          where(), json_error_text(e), printable(line)));
    }
    if (!j.is_object()) {
      return Status::invalid_argument(fmt::format(
          "{}: a JSON {}, expected an object; line: {}; hint: one JSON object per line, e.g. "
          "{{\"text\": \"...\"}}",
          where(), j.type_name(), printable(line)));
    }
    for (size_t k = 0; k < o_.json_keys.size(); ++k) {
      const std::string& key = o_.json_keys[k];
      auto it = j.find(key);
      if (it == j.end()) {
        std::vector<std::string> keys;
        for (auto kv = j.begin(); kv != j.end() && keys.size() < 8; ++kv) keys.push_back(kv.key());
        return Status::invalid_argument(fmt::format(
            "{}: no key '{}' (it has: {}); hint: --json-keys names the keys to tokenize", where(),
            printable(key), printable(join(keys, ", "))));
      }
      EncodedDocument& doc = b.encoded[k][r];
      if (it->is_string()) {
        TP_RETURN_IF_ERROR(add_sentence(it->get_ref<const std::string&>(), doc, b, r));
      } else if (it->is_array()) {
        for (const auto& s : *it) {
          if (!s.is_string()) {
            return Status::invalid_argument(fmt::format(
                "{}: key '{}' is a list holding a JSON {}, expected strings (one sentence each)",
                where(), printable(key), s.type_name()));
          }
          TP_RETURN_IF_ERROR(add_sentence(s.get_ref<const std::string&>(), doc, b, r));
        }
      } else {
        return Status::invalid_argument(
            fmt::format("{}: key '{}' is a JSON {}, expected a string or a list of strings",
                        where(), printable(key), it->type_name()));
      }
      finish_document(doc);
    }
    return OkStatus();
  }

  Status add_sentence(std::string_view text, EncodedDocument& doc, const Block& b, size_t r) const {
    if (text.size() > tokenizer_.max_text_bytes()) {
      return Status::invalid_argument(fmt::format(
          "{}: a text of {}, over {}'s {} at a time; hint: split the document (sentences as a "
          "JSON list of strings, or paragraphs separated by a blank line), or use "
          "GPT2BPETokenizer",
          where(b, r), human_bytes(static_cast<double>(text.size())),
          tokenizer_type_name(tokenizer_.type()),
          human_bytes(static_cast<double>(tokenizer_.max_text_bytes()))));
    }
    std::vector<int32_t> ids = tokenizer_.encode(text);
    if (ids.empty()) return OkStatus();
    doc.lengths.push_back(static_cast<int64_t>(ids.size()));
    if (doc.tokens.empty()) {
      doc.tokens = std::move(ids);
    } else {
      doc.tokens.insert(doc.tokens.end(), ids.begin(), ids.end());
    }
    return OkStatus();
  }
  void finish_document(EncodedDocument& doc) const {
    if (doc.tokens.empty() || !o_.append_eod) return;
    doc.tokens.push_back(tokenizer_.eod());
    ++doc.lengths.back();
  }

  const PreprocessOptions& o_;
  const Tokenizer& tokenizer_;
  bool json_;
};

// `workers` threads encoding the blocks they are handed; the caller waits on each block in turn.
class EncoderPool {
 public:
  EncoderPool(const Encoder& encoder, int32_t workers) : encoder_(encoder) {
    for (int32_t w = 0; w < workers; ++w) threads_.emplace_back([this] { run(); });
  }
  ~EncoderPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  EncoderPool(const EncoderPool&) = delete;
  EncoderPool& operator=(const EncoderPool&) = delete;

  void submit(Block* b) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(b);
    }
    work_cv_.notify_one();
  }
  void wait(const Block* b) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return b->done; });
  }

 private:
  void run() {
    for (;;) {
      Block* b = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        b = queue_.front();
        queue_.pop_front();
      }
      encoder_.encode(*b);
      {
        std::lock_guard<std::mutex> lock(mu_);
        b->done = true;
      }
      done_cv_.notify_all();
    }
  }

  const Encoder& encoder_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Block*> queue_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

bool is_json_lines_path(std::string_view path) {
  return path.ends_with(".jsonl") || path.ends_with(".json");
}

std::string preprocess_output_prefix(std::string_view output_prefix, std::string_view key) {
  return fmt::format("{}_{}_document", output_prefix, key);
}

Status PreprocessOptions::validate() const {
  if (input.empty()) {
    return Status::invalid_argument("no input; hint: --input FILE (.jsonl lines or plain text)");
  }
  if (output_prefix.empty()) {
    return Status::invalid_argument(
        "no output prefix; hint: --output-prefix P writes P_text_document.bin/.idx");
  }
  if (workers < 1) {
    return Status::invalid_argument(
        fmt::format("--workers {}: must be >= 1; hint: one per core", workers));
  }
  if (log_interval < 1) {
    return Status::invalid_argument(fmt::format(
        "--log-interval {}: must be >= 1 (documents between progress lines)", log_interval));
  }
  if (json_keys.empty()) {
    return Status::invalid_argument("--json-keys: no key; hint: --json-keys text");
  }
  for (size_t k = 0; k < json_keys.size(); ++k) {
    if (json_keys[k].empty()) {
      return Status::invalid_argument("--json-keys: an empty key; hint: --json-keys text");
    }
    for (size_t l = 0; l < k; ++l) {
      if (json_keys[l] == json_keys[k]) {
        return Status::invalid_argument(fmt::format(
            "--json-keys: '{}' twice; hint: each key writes one dataset", printable(json_keys[k])));
      }
    }
  }
  if (!is_json_lines_path(input) && json_keys != std::vector<std::string>{"text"}) {
    return Status::invalid_argument(fmt::format(
        "--json-keys {}: --input '{}' is plain text (its name does not end in .jsonl or .json), "
        "whose documents are key 'text'; hint: drop --json-keys, or pass JSON lines",
        printable(join(json_keys, " ")), printable(input, 200)));
  }
  return tokenizer.validate();
}

Result<PreprocessSummary> preprocess(
    const PreprocessOptions& o, const std::function<void(const PreprocessProgress&)>& progress) {
  TP_RETURN_IF_ERROR(o.validate());
  TP_ASSIGN_OR_RETURN(RecordReader reader,
                      RecordReader::open(o.input, is_json_lines_path(o.input)));
  TP_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, make_tokenizer(o.tokenizer));
  if (o.append_eod && tokenizer->eod() < 0) {
    return Status::invalid_argument(fmt::format(
        "--append-eod: --tokenizer-type {} has no end-of-document token; hint: drop --append-eod",
        tokenizer_type_name(tokenizer->type())));
  }

  PreprocessSummary summary;
  summary.dtype = indexed_dtype_for_vocab(tokenizer->vocab_size());
  std::vector<std::string> temp_files;
  for (const std::string& key : o.json_keys) {
    const std::string prefix = preprocess_output_prefix(o.output_prefix, key);
    temp_files.push_back(indexed_bin_path(prefix) + ".tmp");
    temp_files.push_back(indexed_idx_path(prefix) + ".tmp");
  }
  // Before the writers: it outlives them.
  const TempFilesOnSignal remove_on_signal(temp_files);
  std::vector<std::unique_ptr<IndexedDatasetWriter>> writers;
  for (const std::string& key : o.json_keys) {
    summary.prefixes.push_back(preprocess_output_prefix(o.output_prefix, key));
    auto w = IndexedDatasetWriter::create(summary.prefixes.back(), summary.dtype);
    if (!w.ok()) return w.status().with_context("--output-prefix");
    writers.push_back(std::move(w).value());
  }

  const Encoder encoder(o, *tokenizer);
  const double t0 = now_seconds();
  int64_t next_report = o.log_interval;
  // Blocks in flight, oldest first; their owners. Declared before the pool so that the pool's
  // threads are joined before the blocks they may hold are freed.
  std::deque<std::unique_ptr<Block>> in_flight;
  EncoderPool pool(encoder, o.workers);
  const size_t max_in_flight = 2 * static_cast<size_t>(o.workers);
  bool at_end = false;
  while (!at_end || !in_flight.empty()) {
    if (!at_end && in_flight.size() < max_in_flight) {
      TP_ASSIGN_OR_RETURN(std::unique_ptr<Block> b, reader.next_block());
      if (b == nullptr) {
        at_end = true;
      } else {
        pool.submit(b.get());
        in_flight.push_back(std::move(b));
      }
      continue;
    }
    Block& b = *in_flight.front();
    pool.wait(&b);
    TP_RETURN_IF_ERROR(b.status);
    for (size_t k = 0; k < writers.size(); ++k) {
      for (const EncodedDocument& doc : b.encoded[k]) {
        TP_RETURN_IF_ERROR(writers[k]->add_document(doc.tokens, doc.lengths));
      }
    }
    summary.documents += static_cast<int64_t>(b.records.size());
    summary.bytes += b.bytes;
    in_flight.pop_front();
    if (progress && summary.documents >= next_report) {
      progress({summary.documents, summary.bytes, now_seconds() - t0});
      next_report = (summary.documents / o.log_interval + 1) * o.log_interval;
    }
  }
  for (auto& w : writers) {
    TP_RETURN_IF_ERROR(w->finish());
    summary.sequences += w->num_sequences();
    summary.tokens += w->num_tokens();
  }
  summary.seconds = now_seconds() - t0;
  return summary;
}

}  // namespace tightpipe
