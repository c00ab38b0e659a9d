// The data loader: an infinite, deterministic stream of (B,T) token batches read from a plain text
// file or from WebDataset-style tar shards, decoded by N background worker threads.
//
// Pipeline (docs/data_format.md has the full contract):
//   sources (text files or tar shards, after the train/val split)
//     -> per epoch: source order (seeded permutation when shuffling), source p read by worker p % N
//     -> each worker streams its sources through libarchive, groups entries into samples, decodes
//        `.tokens` / tokenizes `.txt` (byte tokenizer), keeps the samples of its replica, and
//        pushes them into its own bounded prefetch queue
//     -> the consumer merges the worker queues round-robin (deterministic for a given N)
//     -> a seeded shuffle buffer (seed derived from (seed, epoch)), drained at each epoch end so an
//        epoch is an exact permutation of its samples
//     -> the samples' tokens are concatenated into one stream; each row of a batch is the next
//        T+1 tokens (tokens = row[0..T), targets = row[1..T]); rows do not overlap.
// A plain text file is a source whose samples are consecutive (T+1)-byte chunks.
//
// The order depends on (seed, num_workers, shuffle_buffer, split, replica, num_replicas, sources),
// never on timing. A DataPosition counts samples and tokens, so it is independent of B and T.
//
// Ownership and threads: a DataLoader owns its worker threads (joined in the destructor). Its
// methods are NOT thread-safe: call them from one thread (the trainer's input stage).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tightpipe/input_file.h"
#include "tightpipe/status.h"

namespace tightpipe {

// What a worker does when a shard or a sample does not parse.
enum class OnCorrupt {
  kFail,  // next() returns the error (file, entry, byte offset); the loader stays failed
  kSkip,  // skip the rest of the shard (or the one bad sample), count it in DataStats, go on
};

// Which part of the data the loader reads.
//   text file: train = first 90% of its bytes, val = last 10%.
//   2+ shards: val = the last ceil(S/10) shards of the sorted list, train = the others.
//   1 shard:   val = samples whose index in the shard is 9 mod 10, train = the others.
//   indexed datasets: the parts of DataOptions::split_weights (--split), see below.
enum class Split { kTrain, kVal, kAll };

std::string_view split_name(Split split);
Result<Split> parse_split(std::string_view name);  // "train", "val", "all"
std::string_view on_corrupt_name(OnCorrupt on_corrupt);
Result<OnCorrupt> parse_on_corrupt(std::string_view name);  // "fail", "skip"

// One member of --data-path: a path and its blend weight (normalised over the blend).
struct DataSource {
  double weight = 1.0;  // > 0; 0 for every member means "by size" (each dataset's token count)
  std::string path;     // an indexed dataset prefix (PREFIX.idx and PREFIX.bin)
};

// Megatron's --data-path words: "PATH" (one source, weight 1); "W1 P1 W2 P2 ..." (weights parse
// as finite numbers > 0); "P1 P2 ..." (no numbers at all: weights proportional to each indexed
// dataset's token count, resolved when the loader opens; weight 0 here means "by size").
// InvalidArgument, one line, for: no words, a weight that does not parse or is <= 0 / NaN / inf
// while others parse (naming the word, its 1-based position and value), an odd word count with
// numbers in it, an empty path.
Result<std::vector<DataSource>> parse_data_path(std::span<const std::string> words);
// Megatron's --split "969,30,1" (also "/"-separated; 1-3 numbers >= 0, not all 0; missing ones
// are 0) normalised to fractions. InvalidArgument naming the value otherwise.
Result<std::array<double, 3>> parse_split_weights(std::string_view text);
// The documents [begin, end) of train / validation / test for `num_documents`, with Megatron's
// rounding (get_train_valid_test_split_): indices 0, then previous + round(fraction * size)
// (round half to even, as Python's round), then every index after the first shifted down by
// (last - size). Where that shift would make an index negative or decreasing (Megatron would
// build an inverted range), it is clamped to the previous index. REQUIRES: num_documents >= 0.
std::array<std::pair<int64_t, int64_t>, 3> split_document_ranges(
    const std::array<double, 3>& fractions, int64_t num_documents);
// True when PREFIX.idx exists (an indexed dataset's prefix, as Megatron's --data-path takes it).
bool is_indexed_dataset(const std::string& prefix);

struct DataOptions {
  // A text file, one tar shard, a directory of `*.tar` shards, or a brace pattern
  // 'DIR/shard-{000000..000009}.tar' (zero padding taken from the first bound; `{a,b}` lists too).
  std::string path;
  int32_t micro_batch_size = 8;   // B: rows per batch
  int32_t seq_length = 128;       // T: tokens per row
  uint64_t seed = 1;              // source permutation and shuffle buffer, per epoch
  int32_t num_workers = 1;        // decoding threads; part of the order's definition
  int32_t prefetch = 4;           // each worker may hold prefetch * B decoded samples ahead
  int32_t shuffle_buffer = 1024;  // samples; <= 1 disables shuffling (file order, sources in order)
  OnCorrupt on_corrupt = OnCorrupt::kFail;
  int32_t replica = 0;       // data-parallel replica index: keeps samples i with i % R == r
  int32_t num_replicas = 1;  // R
  Split split = Split::kTrain;
  int32_t vocab_size = 256;  // every token id must be < vocab_size, else the sample is corrupt
  // Indexed datasets to blend (parse_data_path). Empty: `path` as above, where a path naming an
  // indexed dataset prefix (is_indexed_dataset) is a blend of one.
  std::vector<DataSource> blend = {};
  // --split: train / validation / test shares of each indexed dataset's documents
  // (parse_split_weights). Used by indexed datasets only: kTrain reads part 0, kVal part 1, kAll
  // every document.
  std::string split_weights = "969,30,1";

  // InvalidArgument naming the field, its value and the allowed range.
  Status validate() const;
};

// One micro-batch. tokens and targets are (B,T) row-major; targets[b][t] = tokens[b][t+1] of the
// same stream (the token after the row's last token for t = T-1).
struct Batch {
  int32_t batch_size = 0;        // B
  int32_t seq_length = 0;        // T
  std::vector<int32_t> tokens;   // (B,T)
  std::vector<int32_t> targets;  // (B,T)
};

// Where the stream stands; a checkpoint saves it and restore() resumes at exactly the next token.
// The fingerprint fields must match the loader's options on restore.
struct DataPosition {
  int64_t epoch = 0;             // epoch of the shuffled sample stream
  int64_t samples_in_epoch = 0;  // samples taken from the shuffled stream of this epoch
  int64_t token_offset = 0;      // tokens of the last taken sample already consumed
  int64_t batches = 0;           // batches returned so far (informational)
  // Fingerprint: what the order depends on.
  uint64_t seed = 0;
  int32_t num_workers = 0;
  int32_t shuffle_buffer = 0;
  int32_t replica = 0;
  int32_t num_replicas = 0;
  Split split = Split::kTrain;
  int64_t num_sources = 0;

  std::string to_json() const;  // one-line JSON object
  static Result<DataPosition> from_json(std::string_view json);
  friend bool operator==(const DataPosition&, const DataPosition&) = default;
};

struct DataStats {
  int64_t batches = 0;
  int64_t samples = 0;  // samples taken from the stream
  int64_t tokens = 0;   // tokens handed out in batches (B*T per batch)
  int64_t epochs_completed = 0;
  int64_t corrupt_skipped = 0;                // shards or samples skipped under OnCorrupt::kSkip
  std::vector<std::string> corrupt_messages;  // the first 100 skip reasons, in stream order
  double wait_seconds = 0;                    // total time next() blocked on the workers
  double last_wait_seconds = 0;  // time the last next() blocked (the executor's data lane)
  int64_t queued = 0;            // items ready in the worker queues now (prefetch fill level)
  int64_t queue_capacity = 0;    // their total capacity
};

class DataLoader {
 public:
  // Validates the options, expands the path into sources and starts the workers. Errors:
  // InvalidArgument (options), NotFound (path, pattern member, empty directory).
  // Indexed datasets (a non-empty blend, or a path that is_indexed_dataset): opens every member
  // (IndexedDataset::open's errors), InvalidArgument for a member that is not an indexed dataset
  // or whose split part holds fewer than seq_length + 1 tokens.
  static Result<std::unique_ptr<DataLoader>> open(const DataOptions& options);

  virtual ~DataLoader() = default;
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // The next (B,T) batch. Blocks until the workers have produced enough samples. Errors: a corrupt
  // shard under kFail (Corruption, names file, entry, byte offset), an epoch with no samples
  // (FailedPrecondition), I/O errors. After an error every later call returns the same error.
  virtual Result<Batch> next() = 0;
  // The position after the last batch returned.
  virtual DataPosition position() const = 0;
  // Resumes at `pos` (restarts the workers and replays the epoch up to it: cost is reading that
  // part of the epoch again). InvalidArgument when the fingerprint differs from the options.
  virtual Status restore(const DataPosition& pos) = 0;
  virtual DataStats stats() const = 0;
  // The source files, in sorted order, after the split.
  virtual const std::vector<std::string>& sources() const = 0;

 protected:
  DataLoader() = default;
};

// Expands a DataOptions::path into sorted existing files (no split applied). NotFound when the
// path, a pattern member or every shard of a directory is missing.
Result<std::vector<std::string>> expand_data_path(const std::string& path);
// "a{1..3}b" -> {"a1b","a2b","a3b"}; "{a,b}" lists; several groups multiply. InvalidArgument on a
// malformed pattern. Pure string operation.
Result<std::vector<std::string>> expand_braces(std::string_view pattern);
// check_input_file() (tightpipe/input_file.h) checks each data input before it is read.
// True for names ending in .tar, .tar.gz, .tgz: read as tar shards; anything else is text.
bool is_shard_path(std::string_view path);

// The byte tokenizer: each byte is one token, vocabulary 256.
inline constexpr int32_t kByteVocabSize = 256;
std::vector<int32_t> byte_tokenize(std::string_view text);

}  // namespace tightpipe
