// Every file tightpipe reads goes through one check: it must be a regular file (not a directory,
// a FIFO, a device, a socket or a dangling or looping symlink) and, for the files read whole,
// no larger than the cap of its kind. A FIFO given where a file is read would block forever and
// /dev/zero would never end, so the kind is checked before the open and again (fstat) on the
// opened descriptor, which is opened with O_NONBLOCK so that a FIFO swapped in between cannot
// block the open. Each refusal is one line naming what the file is for, the path and a hint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "tightpipe/status.h"

namespace tightpipe {

// What a kind of input file may weigh, and what to say when one is over it.
struct InputKind {
  std::string_view noun;  // "schedule file": "... more than the 64 MiB a <noun> may be"
  int64_t max_bytes;
  std::string_view expected;  // "a schedule CSV or JSON file": "hint: pass <expected>"
};

// The caps, each far above any real file of its kind (so only a wrong file reaches one).
namespace input_kind {
inline constexpr int64_t kMiB = int64_t{1} << 20;
inline constexpr InputKind kSchedule{"schedule file", 256 * kMiB,
                                     "a schedule CSV or JSON file (tightpipe schedule --out)"};
inline constexpr InputKind kCostTable{"cost table", 64 * kMiB,
                                      "a JSON cost table (docs/cost_model.md)"};
// summary.json, costs.json, cost samples, data_position.json and the like.
inline constexpr InputKind kRunFile{"run file", 256 * kMiB, "the file as tightpipe train wrote it"};
// timeline_rank*.jsonl and metrics.jsonl grow with the steps of a run.
inline constexpr InputKind kTimeline{"timeline", 4096 * kMiB,
                                     "the file as tightpipe train wrote it"};
// PyTorch profiler traces and nsys exports are GBs for long runs; read as a stream.
inline constexpr InputKind kGpuTrace{"GPU trace", int64_t{64} << 30,
                                     "a PyTorch profiler trace (.json, .json.gz) or an nsys "
                                     "SQLite export; trace fewer steps for a smaller one"};
inline constexpr InputKind kManifest{"manifest", 1 * kMiB,
                                     "a checkpoint directory train --save wrote"};
inline constexpr InputKind kConfig{"config file", 16 * kMiB, "the file as tightpipe wrote it"};
// vocab.json, merges.txt, SentencePiece .model files.
inline constexpr InputKind kTokenizer{"tokenizer file", 1024 * kMiB,
                                      "the tokenizer's vocabulary, merges or model file"};
// Training text, preprocess input, tar shards, indexed datasets: streamed or mapped, any size.
inline constexpr InputKind kData{"data file", INT64_MAX,
                                 "a regular file, e.g. a text file or a .tar shard"};
}  // namespace input_kind

// OK when `path` names a regular file this process can open for reading; else NotFound /
// InvalidArgument (what it is instead) / IOError (the OS reason), each naming `what` and the path.
// For readers that stream a file themselves (tar shards, indexed datasets, SQLite).
Status check_input_file(std::string_view what, const std::string& path,
                        const InputKind& kind = input_kind::kData);

// An input file opened for reading: a regular file (checked on the descriptor) of `size` bytes at
// the open. Closes the descriptor when destroyed; release() hands it over (e.g. to gzdopen).
class InputFile {
 public:
  InputFile() = default;
  InputFile(int fd, int64_t size) : fd_(fd), size_(size) {}
  InputFile(InputFile&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  InputFile& operator=(InputFile&& o) noexcept;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();

  int fd() const { return fd_; }
  int64_t size() const { return size_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_ = -1;
  int64_t size_ = 0;
};

// check_input_file, then open (O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY), fstat the descriptor
// (still a regular file) and refuse one over kind.max_bytes, naming its size, the cap and a hint.
Result<InputFile> open_input_file(std::string_view what, const std::string& path,
                                  const InputKind& kind);

// The whole file, through open_input_file; a file that grows past the cap while it is read (or a
// /proc file, whose size says 0) is refused too. `what` names the file's role: "--costs",
// "schedule", "summary".
Result<std::string> read_input_file(std::string_view what, const std::string& path,
                                    const InputKind& kind);

}  // namespace tightpipe
