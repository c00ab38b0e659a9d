// DataLoader implementation: worker threads with bounded queues, round-robin merge, seeded shuffle
// buffer, row assembly, position save/restore. The order contract is in docs/data_format.md.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "data/loader_internal.h"
#include "data/order.h"
#include "data/tar_samples.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"

namespace tightpipe {

namespace {

using data_internal::decode_sample;
using data_internal::TarSampleReader;

constexpr size_t kMaxCorruptMessages = 100;

// One source after the split: a text byte range or a tar shard (optionally one sample in ten).
struct Source {
  std::string path;
  bool is_shard = false;
  int64_t begin = 0, end = 0;  // text: byte range
  // Single-shard split: keep samples with (index % 10 == 9) == keep_tenth; -1 keeps all.
  int keep_tenth = -1;
};

struct Item {
  enum class Kind { kSample, kEndOfEpoch, kSkipped, kError };
  Kind kind = Kind::kSample;
  std::vector<int32_t> tokens;
  Status status;  // kError: the error; kSkipped: why
};

// Bounded single-producer single-consumer queue.
class ItemQueue {
 public:
  explicit ItemQueue(size_t capacity) : capacity_(capacity) {}
  // False when stopped.
  bool push(Item item, const std::atomic<bool>& stop) {
    std::unique_lock lock(mu_);
    // Every item takes a slot, end-of-epoch markers too: a worker without sources must not run
    // ahead through epochs without bound.
    not_full_.wait(lock, [&] { return stop.load() || items_.size() < capacity_; });
    if (stop.load()) return false;
    items_.push_back(std::move(item));
    not_empty_.notify_one();
    return true;
  }
  // Blocks until an item is there; adds the blocked time to *waited.
  Item pop(double* waited) {
    std::unique_lock lock(mu_);
    if (items_.empty()) {
      double t0 = now_seconds();
      not_empty_.wait(lock, [&] { return !items_.empty(); });
      *waited += now_seconds() - t0;
    }
    Item item = std::move(items_.front());
    items_.pop_front();
    not_full_.notify_one();
    return item;
  }
  size_t size() {
    std::lock_guard lock(mu_);
    return items_.size();
  }
  size_t capacity() const { return capacity_; }
  void wake_all() {
    std::lock_guard lock(mu_);
    not_full_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable not_empty_, not_full_;
  std::deque<Item> items_;
  size_t capacity_;
};

class LoaderImpl final : public DataLoader {
 public:
  LoaderImpl(DataOptions options, std::vector<std::string> files, std::vector<Source> sources)
      : opt_(std::move(options)), files_(std::move(files)), sources_(std::move(sources)) {}
  ~LoaderImpl() override { stop_workers(); }

  void start(int64_t epoch) {
    stop_workers();
    stop_ = false;
    int32_t n = opt_.num_workers;
    // Each worker may hold prefetch batches' worth of samples: a single busy worker (one text
    // file, one shard left) then has the whole prefetch depth to itself.
    size_t capacity = static_cast<size_t>(opt_.prefetch) * opt_.micro_batch_size;
    queues_.clear();
    for (int32_t w = 0; w < n; ++w) queues_.push_back(std::make_unique<ItemQueue>(capacity));
    for (int32_t w = 0; w < n; ++w) {
      threads_.emplace_back([this, w, epoch] { worker_main(w, epoch); });
    }
    begin_epoch(epoch);
  }

  Result<Batch> next() override {
    if (!failed_.ok()) return failed_;
    wait_this_call_ = 0;
    const int64_t B = opt_.micro_batch_size, T = opt_.seq_length;
    Batch batch = data_internal::empty_batch(opt_);
    std::vector<int32_t> row(T + 1);
    for (int64_t b = 0; b < B; ++b) {
      int64_t filled = 0;
      while (filled < T + 1) {
        if (cur_offset_ == static_cast<int64_t>(cur_.size())) {
          Status s = take_sample();
          if (!s.ok()) {
            failed_ = s;
            account_wait();
            return s;
          }
        }
        int64_t n = std::min<int64_t>(T + 1 - filled, cur_.size() - cur_offset_);
        std::copy_n(cur_.begin() + cur_offset_, n, row.begin() + filled);
        cur_offset_ += n;
        filled += n;
      }
      data_internal::put_row(batch, b, row);
    }
    ++batches_;
    stats_.batches = batches_;
    stats_.tokens += B * T;
    account_wait();
    return batch;
  }

  DataPosition position() const override {
    DataPosition p = fingerprint();
    p.epoch = epoch_;
    p.samples_in_epoch = samples_in_epoch_;
    p.token_offset = cur_offset_;
    p.batches = batches_;
    return p;
  }

  Status restore(const DataPosition& pos) override {
    TP_RETURN_IF_ERROR(data_internal::check_position_fingerprint(pos, fingerprint()));
    failed_ = OkStatus();
    stats_ = DataStats{};
    start(pos.epoch);
    failed_ = replay(pos);
    return failed_;
  }

  DataStats stats() const override {
    DataStats st = stats_;
    for (const auto& q : queues_) {
      st.queued += static_cast<int64_t>(q->size());
      st.queue_capacity += static_cast<int64_t>(q->capacity());
    }
    return st;
  }
  const std::vector<std::string>& sources() const override { return files_; }

 private:
  DataPosition fingerprint() const {
    return data_internal::position_fingerprint(opt_, opt_.num_workers,
                                               static_cast<int64_t>(sources_.size()));
  }

  // Takes pos.samples_in_epoch samples of epoch pos.epoch, keeps the last one as the current one.
  Status replay(const DataPosition& pos) {
    for (int64_t i = 0; i < pos.samples_in_epoch; ++i) {
      TP_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> s, pull_shuffled());
      if (!s) {
        return Status::invalid_argument(fmt::format(
            "data position epoch {} sample {} is past the end of that epoch ({} samples)",
            pos.epoch, pos.samples_in_epoch, i));
      }
      cur_ = std::move(*s);
      epoch_tokens_ += static_cast<int64_t>(cur_.size());
    }
    samples_in_epoch_ = pos.samples_in_epoch;
    if (pos.token_offset > static_cast<int64_t>(cur_.size())) {
      return Status::invalid_argument(
          fmt::format("data position token_offset {} is past the end of its sample ({} tokens)",
                      pos.token_offset, cur_.size()));
    }
    cur_offset_ = pos.token_offset;
    batches_ = pos.batches;
    stats_.batches = batches_;
    return OkStatus();
  }

  bool shuffling() const { return opt_.shuffle_buffer > 1; }

  void account_wait() {
    stats_.last_wait_seconds = wait_this_call_;
    stats_.wait_seconds += wait_this_call_;
  }

  void begin_epoch(int64_t epoch) {
    epoch_ = epoch;
    samples_in_epoch_ = 0;
    epoch_tokens_ = 0;
    done_.assign(opt_.num_workers, false);
    rr_ = 0;
    merged_done_ = false;
    buffer_.clear();
    shuffle_rng_ = data_internal::shuffle_rng(opt_.seed, epoch);
    cur_.clear();
    cur_offset_ = 0;
  }

  // The next sample of the shuffled stream, crossing epochs; counts it.
  Status take_sample() {
    while (true) {
      TP_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> s, pull_shuffled());
      if (s) {
        cur_ = std::move(*s);
        cur_offset_ = 0;
        ++samples_in_epoch_;
        ++stats_.samples;
        epoch_tokens_ += static_cast<int64_t>(cur_.size());
        return OkStatus();
      }
      if (epoch_tokens_ == 0) {
        return Status::failed_precondition(fmt::format(
            "epoch {} of '{}' ({} sources, split {}, replica {}/{}) produced no tokens{}", epoch_,
            opt_.path, sources_.size(), split_name(opt_.split), opt_.replica, opt_.num_replicas,
            stats_.corrupt_skipped > 0
                ? fmt::format(" ({} corrupt shards/samples skipped)", stats_.corrupt_skipped)
                : std::string()));
      }
      ++stats_.epochs_completed;
      begin_epoch(epoch_ + 1);
    }
  }

  // Shuffle buffer over the merged stream; nullopt at the end of the epoch (buffer drained).
  Result<std::optional<std::vector<int32_t>>> pull_shuffled() {
    if (!shuffling()) return pull_merged();
    while (!merged_done_ && buffer_.size() < static_cast<size_t>(opt_.shuffle_buffer)) {
      TP_ASSIGN_OR_RETURN(std::optional<std::vector<int32_t>> s, pull_merged());
      if (!s) {
        merged_done_ = true;
        break;
      }
      buffer_.push_back(std::move(*s));
    }
    if (buffer_.empty()) return std::optional<std::vector<int32_t>>();
    size_t j = shuffle_rng_.below(buffer_.size());
    std::vector<int32_t> out = std::move(buffer_[j]);
    buffer_[j] = std::move(buffer_.back());
    buffer_.pop_back();
    return std::optional<std::vector<int32_t>>(std::move(out));
  }

  // Round-robin over the workers' queues; nullopt once every worker ended the epoch.
  Result<std::optional<std::vector<int32_t>>> pull_merged() {
    const int32_t n = opt_.num_workers;
    while (true) {
      int32_t tries = 0;
      while (done_[rr_] && tries < n) {
        rr_ = (rr_ + 1) % n;
        ++tries;
      }
      if (tries == n) return std::optional<std::vector<int32_t>>();
      Item item = queues_[rr_]->pop(&wait_this_call_);
      switch (item.kind) {
        case Item::Kind::kSample:
          rr_ = (rr_ + 1) % n;
          return std::optional<std::vector<int32_t>>(std::move(item.tokens));
        case Item::Kind::kEndOfEpoch:
          done_[rr_] = true;
          break;
        case Item::Kind::kSkipped:
          ++stats_.corrupt_skipped;
          if (stats_.corrupt_messages.size() < kMaxCorruptMessages) {
            stats_.corrupt_messages.push_back(item.status.message());
          }
          break;
        case Item::Kind::kError:
          return item.status;
      }
    }
  }

  void stop_workers() {
    stop_ = true;
    for (auto& q : queues_) q->wake_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  // ---- worker side -----------------------------------------------------------------------

  // Pushes a sample unless stopped; false when the worker must end.
  bool emit(ItemQueue& q, Item item) { return q.push(std::move(item), stop_); }

  void worker_main(int32_t w, int64_t first_epoch) {
    ItemQueue& q = *queues_[w];
    const int32_t n = opt_.num_workers;
    for (int64_t epoch = first_epoch; !stop_.load(); ++epoch) {
      std::vector<int64_t> order =
          data_internal::source_order(sources_.size(), opt_.seed, epoch, shuffling());
      for (size_t p = w; p < order.size(); p += n) {
        const Source& src = sources_[order[p]];
        Status s = src.is_shard ? read_shard(q, src, p) : read_text(q, src, p);
        if (stop_.load()) return;
        if (!s.ok()) {
          s = s.with_context(fmt::format("shard '{}'", src.path));
          if (opt_.on_corrupt == OnCorrupt::kSkip && s.code() == StatusCode::kCorruption) {
            if (!emit(q, Item{Item::Kind::kSkipped, {}, s})) return;
            continue;
          }
          emit(q, Item{Item::Kind::kError, {}, s});
          return;
        }
      }
      if (!emit(q, Item{Item::Kind::kEndOfEpoch, {}, {}})) return;
    }
  }

  bool mine(int64_t position, int64_t kept) const {
    return (position + kept) % opt_.num_replicas == opt_.replica;
  }

  Status read_text(ItemQueue& q, const Source& src, int64_t position) {
    TP_RETURN_IF_ERROR(check_input_file("text file", src.path));
    std::ifstream in(src.path, std::ios::binary);
    if (!in) return Status::not_found(fmt::format("cannot open text file '{}'", src.path));
    in.seekg(src.begin);
    const int64_t chunk = int64_t{opt_.seq_length} + 1;
    std::string buf;
    int64_t index = 0;
    for (int64_t at = src.begin; at < src.end; at += chunk, ++index) {
      int64_t len = std::min(chunk, src.end - at);
      if (!mine(position, index)) {
        in.seekg(at + len);
        continue;
      }
      buf.resize(len);
      if (!in.read(buf.data(), len)) {
        return Status::io_error(
            fmt::format("text file '{}': short read at byte offset {}", src.path, at));
      }
      if (!emit(q, Item{Item::Kind::kSample, byte_tokenize(buf), {}})) return OkStatus();
    }
    return OkStatus();
  }

  Status read_shard(ItemQueue& q, const Source& src, int64_t position) {
    TP_ASSIGN_OR_RETURN(auto reader, TarSampleReader::open(src.path));
    int64_t index = 0, kept = 0;
    while (!stop_.load()) {
      TP_ASSIGN_OR_RETURN(std::optional<data_internal::RawSample> raw, reader->next());
      if (!raw) return OkStatus();
      int64_t i = index++;
      if (src.keep_tenth >= 0 && (i % 10 == 9) != (src.keep_tenth == 1)) continue;
      if (!mine(position, kept++)) continue;
      Result<std::vector<int32_t>> ids = decode_sample(*raw, opt_.vocab_size);
      if (!ids.ok()) {
        if (opt_.on_corrupt == OnCorrupt::kFail) return ids.status();
        Status s = ids.status().with_context(fmt::format("shard '{}'", src.path));
        if (!emit(q, Item{Item::Kind::kSkipped, {}, s})) return OkStatus();
        continue;
      }
      if (ids->empty()) continue;
      if (!emit(q, Item{Item::Kind::kSample, std::move(*ids), {}})) return OkStatus();
    }
    return OkStatus();
  }

  const DataOptions opt_;
  const std::vector<std::string> files_;
  const std::vector<Source> sources_;

  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<ItemQueue>> queues_;
  std::vector<std::thread> threads_;

  // Consumer state.
  Status failed_;
  int64_t epoch_ = 0;
  int64_t samples_in_epoch_ = 0;
  int64_t epoch_tokens_ = 0;
  int64_t batches_ = 0;
  std::vector<bool> done_;
  int32_t rr_ = 0;
  bool merged_done_ = false;
  std::vector<std::vector<int32_t>> buffer_;
  Rng shuffle_rng_{0};
  std::vector<int32_t> cur_;
  int64_t cur_offset_ = 0;
  double wait_this_call_ = 0;
  DataStats stats_;
};

}  // namespace

Status data_internal::check_position_fingerprint(const DataPosition& pos,
                                                 const DataPosition& want) {
  auto mismatch = [&](std::string_view field, auto saved, auto now) -> Status {
    return Status::invalid_argument(fmt::format(
        "data position saved with {} = {} but the loader has {} = {}; hint: resume with the "
        "same data options (the order depends on seed, workers, shuffle buffer, split, "
        "replicas and the source list)",
        field, saved, field, now));
  };
  if (pos.seed != want.seed) return mismatch("seed", pos.seed, want.seed);
  if (pos.num_workers != want.num_workers) {
    return mismatch("num_workers", pos.num_workers, want.num_workers);
  }
  if (pos.shuffle_buffer != want.shuffle_buffer) {
    return mismatch("shuffle_buffer", pos.shuffle_buffer, want.shuffle_buffer);
  }
  if (pos.replica != want.replica) return mismatch("replica", pos.replica, want.replica);
  if (pos.num_replicas != want.num_replicas) {
    return mismatch("num_replicas", pos.num_replicas, want.num_replicas);
  }
  if (pos.split != want.split) {
    return mismatch("split", split_name(pos.split), split_name(want.split));
  }
  if (pos.num_sources != want.num_sources) {
    return mismatch("num_sources", pos.num_sources, want.num_sources);
  }
  return OkStatus();
}

Result<std::unique_ptr<DataLoader>> DataLoader::open(const DataOptions& options) {
  TP_RETURN_IF_ERROR(options.validate());
  // A path ending in .bin/.idx of an indexed dataset goes there too, for its "pass the prefix"
  // error (read as text it would train on the file's bytes).
  const std::string& path = options.path;
  const bool names_indexed_file = (path.ends_with(".bin") || path.ends_with(".idx")) &&
                                  is_indexed_dataset(path.substr(0, path.size() - 4));
  if (!options.blend.empty() || is_indexed_dataset(path) || names_indexed_file) {
    return data_internal::open_indexed_loader(options);
  }
  TP_ASSIGN_OR_RETURN(std::vector<std::string> files, expand_data_path(options.path));
  std::vector<std::string> shards, texts;
  for (const std::string& f : files) (is_shard_path(f) ? shards : texts).push_back(f);

  std::vector<Source> sources;
  std::vector<std::string> kept_files;
  int64_t text_bytes = 0, text_bytes_in_split = 0;
  for (const std::string& t : texts) {
    std::error_code ec;
    int64_t size = static_cast<int64_t>(std::filesystem::file_size(t, ec));
    if (ec) return Status::io_error(fmt::format("cannot stat '{}': {}", t, ec.message()));
    int64_t cut = size * 9 / 10;
    Source s{t, false, 0, size, -1};
    if (options.split == Split::kTrain) s.end = cut;
    if (options.split == Split::kVal) s.begin = cut;
    text_bytes += size;
    text_bytes_in_split += s.end - s.begin;
    sources.push_back(s);
    kept_files.push_back(t);
  }
  if (shards.empty() && !texts.empty()) {
    // Text only: the split must hold one window (T + 1 bytes), or every row would repeat the same
    // few bytes (a validation split of a short file would "evaluate" on a loop of 20 bytes).
    const char* split_text = options.split == Split::kTrain ? "training split (the first 90%)"
                             : options.split == Split::kVal ? "validation split (the last 10%)"
                                                            : "text";
    const int64_t need = int64_t(options.seq_length) + 1;
    const std::string what =
        texts.size() == 1 ? fmt::format("text file '{}'", texts[0])
                          : fmt::format("the {} text files of '{}'", texts.size(), options.path);
    if (text_bytes == 0) {
      return Status::invalid_argument(fmt::format(
          "{} is empty; hint: pass a text file with at least {} bytes", what, 10 * (need + 1)));
    }
    if (options.seq_length > 0 && text_bytes_in_split < need) {
      return Status::invalid_argument(fmt::format(
          "{} has {} bytes; its {} has {} bytes, fewer than --seq-length + 1 = {}; hint: use a "
          "file of at least {} bytes or a smaller --seq-length",
          what, text_bytes, split_text, text_bytes_in_split, need, 10 * (need + 1)));
    }
  }
  const int64_t S = static_cast<int64_t>(shards.size());
  const int64_t num_val = (S + 9) / 10;
  for (int64_t i = 0; i < S; ++i) {
    Source s{shards[i], true, 0, 0, -1};
    if (S == 1) {
      if (options.split != Split::kAll) s.keep_tenth = options.split == Split::kVal ? 1 : 0;
    } else {
      bool is_val = i >= S - num_val;
      if (options.split == Split::kTrain && is_val) continue;
      if (options.split == Split::kVal && !is_val) continue;
    }
    sources.push_back(s);
    kept_files.push_back(shards[i]);
  }
  auto loader = std::make_unique<LoaderImpl>(options, std::move(kept_files), std::move(sources));
  loader->start(0);
  return std::unique_ptr<DataLoader>(std::move(loader));
}

}  // namespace tightpipe
