// The indexed-dataset loader (issue 16): Megatron-LM indexed datasets (.bin/.idx) as --data-path,
// one or a weighted blend, each cut to its --split part, read as samples of T+1 tokens across
// document boundaries. No worker threads: a sample is one or a few copies out of the mmap'd .bin.
// The order contract is in docs/data_format.md ("Indexed datasets as --data-path").
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "data/loader_internal.h"
#include "data/order.h"
#include "tightpipe/base.h"
#include "tightpipe/check.h"
#include "tightpipe/data.h"
#include "tightpipe/indexed_dataset.h"

namespace tightpipe::data_internal {

namespace {

// Restoring replays the blend sample by sample; a saved count beyond this is not a real position.
constexpr int64_t kMaxRestoreSamples = int64_t{1} << 40;

std::string part_description(Split split, std::string_view split_weights) {
  switch (split) {
    case Split::kTrain:
      return fmt::format("training part of --split {}", printable(split_weights));
    case Split::kVal:
      return fmt::format("validation part of --split {}", printable(split_weights));
    case Split::kAll:
      break;
  }
  return "whole dataset";
}

// One member of the blend: its dataset, the documents of its split part and the order of the
// member epoch it is in.
struct Member {
  explicit Member(IndexedDataset dataset) : ds(std::move(dataset)) {}
  IndexedDataset ds;
  double weight = 0;  // normalised over the blend
  int64_t doc_begin = 0, doc_end = 0;
  int64_t tokens = 0;  // in the part
  int64_t samples_per_epoch = 0;
  // The member epoch whose order is built below; -1 before the first.
  int64_t epoch = -1;
  std::vector<int64_t> sequences;  // the epoch's non-empty sequences, documents in their order
  std::vector<int64_t> ends;       // ends[k]: offset in the epoch's stream where sequences[k] ends
  std::vector<int64_t> sample_order;  // sample_order[j]: the j-th sample the epoch hands out
};

// The document holding sequence `seq`: the last d with document_index(d) <= seq, skipping empty
// documents (which repeat an index).
int64_t document_of(const IndexedDataset& ds, int64_t seq) {
  int64_t lo = 0, hi = ds.num_documents();  // answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (ds.document_index(mid) <= seq ? lo : hi) = mid;
  }
  return lo;
}

Status check_tokens(const IndexedDataset& ds, int64_t seq, std::span<const int32_t> tokens,
                    int32_t vocab_size) {
  for (int32_t t : tokens) {
    if (t >= 0 && t < vocab_size) continue;
    const std::string where =
        fmt::format("{}: token {} in sequence {} (document {})",
                    printable(indexed_bin_path(ds.prefix()), 200), t, seq, document_of(ds, seq));
    if (t < 0) {
      return Status::corruption(fmt::format(
          "{} is negative; hint: token ids are >= 0: rewrite the dataset with an unsigned dtype "
          "(tightpipe data preprocess)",
          where));
    }
    return Status::corruption(fmt::format(
        "{} is >= the model's vocabulary {}; hint: train with the tokenizer that wrote it "
        "(--tokenizer-type/--vocab-file/--merge-file): the model's vocabulary is its tokenizer's, "
        "padded",
        where, vocab_size));
  }
  return OkStatus();
}

class IndexedLoader final : public DataLoader {
 public:
  IndexedLoader(DataOptions options, std::vector<Member> members)
      : opt_(std::move(options)), members_(std::move(members)), taken_(members_.size(), 0) {
    for (const Member& m : members_) prefixes_.push_back(m.ds.prefix());
  }

  Result<Batch> next() override {
    if (!failed_.ok()) return failed_;
    const double start = now_seconds();
    const int64_t B = opt_.micro_batch_size, T = opt_.seq_length;
    Batch batch = empty_batch(opt_);
    row_.resize(T + 1);
    for (int64_t b = 0; b < B; ++b) {
      if (Status s = take_sample(row_); !s.ok()) {
        failed_ = s;
        account_wait(start);
        return s;
      }
      put_row(batch, b, row_);
    }
    ++batches_;
    tokens_ += B * T;
    account_wait(start);
    return batch;
  }

  DataPosition position() const override {
    DataPosition p = fingerprint();
    p.samples_in_epoch = samples_;
    p.batches = batches_;
    return p;
  }

  Status restore(const DataPosition& pos) override {
    TP_RETURN_IF_ERROR(check_position_fingerprint(pos, fingerprint()));
    if (pos.epoch != 0 || pos.token_offset != 0 || pos.samples_in_epoch > kMaxRestoreSamples) {
      return Status::invalid_argument(fmt::format(
          "data position epoch {}, samples {}, token_offset {} is not one an indexed-dataset "
          "loader saves (epoch 0, token_offset 0, at most {} samples); hint: resume with the "
          "--data-path it was saved with",
          pos.epoch, pos.samples_in_epoch, pos.token_offset, kMaxRestoreSamples));
    }
    failed_ = OkStatus();
    blended_ = 0;
    samples_ = 0;
    std::fill(taken_.begin(), taken_.end(), 0);
    while (samples_ < pos.samples_in_epoch) (void)next_own_sample();
    batches_ = pos.batches;
    tokens_ = 0;
    wait_seconds_ = last_wait_seconds_ = 0;
    return OkStatus();
  }

  DataStats stats() const override {
    DataStats st;
    st.batches = batches_;
    st.samples = samples_;
    st.tokens = tokens_;
    for (size_t d = 0; d < members_.size(); ++d) {
      st.epochs_completed += taken_[d] / members_[d].samples_per_epoch;
    }
    st.wait_seconds = wait_seconds_;
    st.last_wait_seconds = last_wait_seconds_;
    return st;
  }

  const std::vector<std::string>& sources() const override { return prefixes_; }

 private:
  DataPosition fingerprint() const {
    // The order does not depend on --num-workers (there are no workers).
    return data_internal::position_fingerprint(opt_, 1, static_cast<int64_t>(members_.size()));
  }

  bool shuffling() const { return opt_.shuffle_buffer > 1; }

  void account_wait(double start) {
    last_wait_seconds_ = now_seconds() - start;
    wait_seconds_ += last_wait_seconds_;
  }

  // Megatron's greedy blending (helpers.cpp build_blending_indices): blended sample i goes to the
  // member furthest behind its share, weight * max(i, 1) - taken, the first one on ties.
  size_t pick(int64_t i) const {
    const double x = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = members_[0].weight * x - static_cast<double>(taken_[0]);
    for (size_t d = 1; d < members_.size(); ++d) {
      const double error = members_[d].weight * x - static_cast<double>(taken_[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    return best;
  }

  // Advances the blend to this replica's next sample: (member, the member's sample count).
  std::pair<size_t, int64_t> next_own_sample() {
    while (true) {
      const int64_t i = blended_++;
      const size_t d = pick(i);
      const int64_t k = taken_[d]++;
      if (i % opt_.num_replicas == opt_.replica) {
        ++samples_;
        return {d, k};
      }
    }
  }

  Status take_sample(std::span<int32_t> row) {
    const auto [d, k] = next_own_sample();
    Member& m = members_[d];
    const int64_t epoch = k / m.samples_per_epoch;
    if (m.epoch != epoch) build_epoch(d, epoch);
    return copy_sample(m, m.sample_order[k % m.samples_per_epoch], row);
  }

  // The member's order in `epoch`: its documents (seeded permutation) as one stream of their
  // sequences, and the order of the stream's samples (another seeded permutation).
  void build_epoch(size_t d, int64_t epoch) {
    Member& m = members_[d];
    const std::vector<int64_t> docs =
        member_order(static_cast<size_t>(m.doc_end - m.doc_begin), opt_.seed, kDocumentOrderStream,
                     static_cast<int64_t>(d), epoch, shuffling());
    m.sequences.clear();
    m.ends.clear();
    int64_t at = 0;
    for (int64_t doc : docs) {
      const DocumentSequences seqs = m.ds.document(m.doc_begin + doc);
      for (int64_t s = seqs.first; s < seqs.end; ++s) {
        const int64_t len = m.ds.sequence_length(s);
        if (len == 0) continue;
        at += len;
        m.sequences.push_back(s);
        m.ends.push_back(at);
      }
    }
    TP_CHECK(at == m.tokens, at, m.tokens);
    m.sample_order = member_order(static_cast<size_t>(m.samples_per_epoch), opt_.seed,
                                  kSampleOrderStream, static_cast<int64_t>(d), epoch, shuffling());
    m.epoch = epoch;
  }

  // Sample j of the member's current epoch: stream tokens [j*T, j*T + T + 1).
  Status copy_sample(const Member& m, int64_t j, std::span<int32_t> row) const {
    const int64_t T = opt_.seq_length;
    const int64_t first = j * T;
    size_t k =
        static_cast<size_t>(std::upper_bound(m.ends.begin(), m.ends.end(), first) - m.ends.begin());
    int64_t filled = 0;
    while (filled < T + 1) {
      TP_CHECK(k < m.sequences.size(), k, m.sequences.size(), j, T);
      const int64_t seq = m.sequences[k];
      const int64_t seq_begin = m.ends[k] - m.ds.sequence_length(seq);
      const int64_t at = first + filled;
      const int64_t n = std::min(T + 1 - filled, m.ends[k] - at);
      const std::span<int32_t> out =
          row.subspan(static_cast<size_t>(filled), static_cast<size_t>(n));
      m.ds.read_tokens(seq, at - seq_begin, out);
      TP_RETURN_IF_ERROR(check_tokens(m.ds, seq, out, opt_.vocab_size));
      filled += n;
      ++k;
    }
    return OkStatus();
  }

  DataOptions opt_;
  std::vector<Member> members_;
  std::vector<std::string> prefixes_;
  std::vector<int64_t> taken_;  // per member: samples of the blend it has supplied (all replicas)
  int64_t blended_ = 0;         // blended samples selected so far (all replicas)
  int64_t samples_ = 0;         // of them, this replica's (rows handed out)
  int64_t batches_ = 0;
  int64_t tokens_ = 0;
  double wait_seconds_ = 0, last_wait_seconds_ = 0;
  std::vector<int32_t> row_;
  Status failed_;
};

// OK when `path` is an indexed dataset prefix; otherwise why not, with a hint.
Status check_member(const std::string& path) {
  const std::string shown = printable(path, 200);
  if (path.ends_with(".bin") || path.ends_with(".idx")) {
    const std::string prefix = path.substr(0, path.size() - 4);
    return Status::invalid_argument(fmt::format(
        "--data-path member '{}' names a file of an indexed dataset, not its prefix; hint: pass "
        "the prefix without .bin/.idx: '{}'",
        shown, printable(prefix, 200)));
  }
  if (is_indexed_dataset(path)) return OkStatus();
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  const std::string idx = printable(indexed_idx_path(path), 200);
  if (std::filesystem::is_directory(st)) {
    return Status::invalid_argument(fmt::format(
        "--data-path member '{}' is a directory, not an indexed dataset prefix ('{}' does not "
        "exist); hint: a blend takes prefixes P of P.bin/P.idx; shards train with a single "
        "--data-path DIR",
        shown, idx));
  }
  if (std::filesystem::exists(st)) {
    return Status::invalid_argument(fmt::format(
        "--data-path member '{}' is a {}, not an indexed dataset prefix ('{}' does not exist); "
        "hint: a blend takes prefixes P of P.bin/P.idx (tightpipe data preprocess --input FILE "
        "--output-prefix P writes one); a text file or shard trains alone as --data-path FILE",
        shown, is_shard_path(path) ? "tar shard" : "text file", idx));
  }
  return Status::invalid_argument(fmt::format(
      "--data-path member '{}' is not an indexed dataset: '{}' does not exist; hint: pass the "
      "prefix P of P.bin and P.idx (tightpipe data preprocess writes them)",
      shown, idx));
}

}  // namespace

Result<std::unique_ptr<DataLoader>> open_indexed_loader(const DataOptions& options) {
  const std::vector<DataSource> blend = options.blend.empty()
                                            ? std::vector<DataSource>{DataSource{1.0, options.path}}
                                            : options.blend;
  TP_ASSIGN_OR_RETURN(const auto fractions, parse_split_weights(options.split_weights));
  const int64_t need = int64_t{options.seq_length} + 1;
  std::vector<Member> members;
  double weight_sum = 0;
  for (const DataSource& source : blend) {
    TP_RETURN_IF_ERROR(check_member(source.path));
    TP_ASSIGN_OR_RETURN(IndexedDataset ds, IndexedDataset::open(source.path));
    const auto parts = split_document_ranges(fractions, ds.num_documents());
    Member m(std::move(ds));
    std::tie(m.doc_begin, m.doc_end) = options.split == Split::kTrain ? parts[0]
                                       : options.split == Split::kVal ? parts[1]
                                                                      : parts[0];
    if (options.split == Split::kAll) m.doc_end = m.ds.num_documents();
    for (int64_t d = m.doc_begin; d < m.doc_end; ++d) {
      const DocumentSequences seqs = m.ds.document(d);
      for (int64_t s = seqs.first; s < seqs.end; ++s) m.tokens += m.ds.sequence_length(s);
    }
    if (m.tokens < need) {
      return Status::invalid_argument(fmt::format(
          "--data-path member '{}': its {} holds {} of {} documents ({} tokens), fewer than "
          "--seq-length + 1 = {} tokens; hint: a larger share for it in --split (e.g. --split "
          "90,10,0), a smaller --seq-length or a larger dataset",
          printable(source.path, 200), part_description(options.split, options.split_weights),
          m.doc_end - m.doc_begin, m.ds.num_documents(), m.tokens, need));
    }
    m.samples_per_epoch = (m.tokens - 1) / options.seq_length;
    // Weight 0 for every member: by size, each dataset's token count.
    m.weight = source.weight > 0 ? source.weight : static_cast<double>(m.ds.num_tokens());
    weight_sum += m.weight;
    members.push_back(std::move(m));
  }
  for (Member& m : members) m.weight /= weight_sum;
  return std::unique_ptr<DataLoader>(std::make_unique<IndexedLoader>(options, std::move(members)));
}

}  // namespace tightpipe::data_internal
