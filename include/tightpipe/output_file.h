// Every file tightpipe writes goes through this header: write_output_file() for an output written
// whole (a report, a schedule CSV, a trace, a checkpoint's file), OutputFile for one written piece
// by piece (a trace streamed out, metrics.jsonl and the timelines that grow during a run).
//
// A replaced output (OutputFile::Mode::kReplace, write_output_file) is written to "<path>.tmp"
// beside the target, every write checked, fsynced when `durable`, closed (checked) and renamed
// over the target, so a reader sees the old file or the new one and never a part: on any failure
// the .tmp is removed, the previous file at `path` is left as it was and the Status (kIOError)
// names the path, the system's reason ("No space left on device") and a hint. A target that is
// not a regular file (a FIFO, /dev/null), or one that names an open descriptor (/dev/stdout,
// /dev/fd/N, /proc/...: a redirect the shell opened), is written in place. A symlink to a file is
// followed (the file it names is replaced, the link stays).
//
// A log (Mode::kLog, kAppend) is written in place so that it can be read while it grows: each
// write() goes out whole before it returns; a failed one is cut back to the end of the last one
// that succeeded (no half line), and a log this process created that holds nothing is removed.
//
// OutputFile owns its descriptor (RAII, movable, not copyable); one thread at a time.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

namespace tightpipe {

// The system's reason for errno `err` with a hint for the ones a user can act on, e.g. "No space
// left on device; hint: free space on that file system, or write to another one".
std::string output_error_reason(int err);

// Writes `contents` to `path` as described above (temp beside, rename). `durable`: fsync the file
// before the rename and its directory after (checkpoints).
Status write_output_file(const std::string& path, std::string_view contents, bool durable = false);

class OutputFile {
 public:
  enum class Mode {
    kReplace,  // "<path>.tmp", renamed over `path` by commit(); the old file stays until then
    kLog,      // `path` itself, truncated at open, read while it grows
    kAppend,   // `path` itself, appended to (created if missing)
  };

  OutputFile() = default;
  // An uncommitted kReplace output removes its .tmp; a log is closed.
  ~OutputFile();
  OutputFile(OutputFile&& other) noexcept;
  OutputFile& operator=(OutputFile&& other) noexcept;
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  Status open(const std::string& path, Mode mode = Mode::kReplace, bool durable = false);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

  // Buffered for kReplace (goes out at 64 KiB and at commit); written through for a log. After
  // the first failure every call returns that failure (the output is abandoned).
  // REQUIRES: open() succeeded.
  Status write(std::string_view bytes);
  // kReplace: flush, fsync (durable), close and rename over the target; a log: flush, fsync
  // (durable), close. Returns the first failure of the output's life. Closed after it either way.
  Status commit();
  // The first failure so far (OK while every write succeeded).
  Status status() const { return error_; }

 private:
  Status flush();
  Status fail(std::string_view action, int err);
  void abandon();

  std::string path_;    // the target as the caller named it
  std::string target_;  // path_ with a symlink to a file followed
  std::string file_;    // what is written: path_'s .tmp, or the file itself (logs, devices)
  Mode mode_ = Mode::kReplace;
  bool durable_ = false;
  bool in_place_ = false;    // no rename at commit (a log, or a device/FIFO)
  bool descriptor_ = false;  // /dev/stdout, /dev/fd/N, /proc/...: appended to, left as it is
  bool created_ = false;     // this open created or emptied file_ (a log removed when left empty)
  int fd_ = -1;
  std::string buffer_;
  int64_t written_ = 0;   // bytes of this output that reached the file
  int64_t good_end_ = 0;  // a log's size after its last successful write
  Status error_;
};

// Refuses (invalid_argument) when an output would write over one of the inputs: `output` and an
// input are the same file (same device and inode, or the same canonical path). The message
// names both and says which `flag` to change. Inputs that do not exist are skipped.
Status check_output_is_not_input(const std::string& output, const std::vector<std::string>& inputs,
                                 std::string_view flag);

}  // namespace tightpipe
