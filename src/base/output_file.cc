// Checked output files: see include/tightpipe/output_file.h.
#include "tightpipe/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

namespace tightpipe {
namespace {

constexpr size_t kBufferBytes = size_t{64} << 10;

// The directory holding `path` ("." for a bare name).
std::string parent_dir(const std::string& path) {
  const std::string p = std::filesystem::path(path).parent_path().string();
  return p.empty() ? "." : p;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);  // best effort: some file systems refuse a directory fsync
  ::close(fd);
}

}  // namespace

std::string output_error_reason(int err) {
  std::string r = std::strerror(err);
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return r + "; hint: free space on that file system, or write to another one";
    case EFBIG:
      return r +
             "; hint: the file is larger than this process may write (ulimit -f) or the file "
             "system holds";
    case EACCES:
    case EPERM:
    case EROFS:
      return r + "; hint: choose a path this user can write";
    case ENOENT:
    case ENOTDIR:
      return r + "; hint: the directory does not exist: create it, or choose another path";
    case EISDIR:
      return r + "; hint: name a file, not a directory";
    case EPIPE:
      return r + "; hint: whatever read the pipe stopped reading";
    default:
      return r;
  }
}

Status write_output_file(const std::string& path, std::string_view contents, bool durable) {
  OutputFile f;
  TP_RETURN_IF_ERROR(f.open(path, OutputFile::Mode::kReplace, durable));
  TP_RETURN_IF_ERROR(f.write(contents));
  return f.commit();
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) abandon();
}

OutputFile::OutputFile(OutputFile&& o) noexcept { *this = std::move(o); }

OutputFile& OutputFile::operator=(OutputFile&& o) noexcept {
  if (this == &o) return *this;
  if (fd_ >= 0) abandon();
  path_ = std::move(o.path_);
  file_ = std::move(o.file_);
  target_ = std::move(o.target_);
  mode_ = o.mode_;
  durable_ = o.durable_;
  in_place_ = o.in_place_;
  descriptor_ = o.descriptor_;
  created_ = o.created_;
  fd_ = std::exchange(o.fd_, -1);
  buffer_ = std::move(o.buffer_);
  written_ = o.written_;
  good_end_ = o.good_end_;
  error_ = std::move(o.error_);
  return *this;
}

Status OutputFile::open(const std::string& path, Mode mode, bool durable) {
  TP_CHECK(fd_ < 0, "OutputFile::open: '", path_, "' is still open");
  *this = OutputFile();
  path_ = path;
  target_ = path;
  mode_ = mode;
  durable_ = durable;
  struct stat st;
  bool exists = ::lstat(path.c_str(), &st) == 0;
  if (exists && S_ISLNK(st.st_mode)) {
    // Follow a link to what it names: the file is replaced, the link stays. A dangling link is
    // replaced by the file.
    exists = ::stat(path.c_str(), &st) == 0;
    if (exists) {
      char* real = ::realpath(path.c_str(), nullptr);
      if (real) {
        target_ = real;
        std::free(real);
      }
    }
  }
  if (exists && S_ISDIR(st.st_mode)) {
    error_ =
        Status::io_error(fmt::format("cannot write '{}': {}", path_, output_error_reason(EISDIR)));
    return error_;
  }
  // /dev/stdout, /dev/fd/N, /proc/self/fd/N name an open descriptor (a redirect the shell made):
  // written through, never replaced, whatever it is.
  // Appended to (a `>>` redirect stays whole), never truncated, removed or cut back.
  descriptor_ =
      path.starts_with("/dev/std") || path.starts_with("/dev/fd/") || path.starts_with("/proc/");
  const bool regular = !descriptor_ && (!exists || S_ISREG(st.st_mode));
  in_place_ = mode != Mode::kReplace || !regular;
  file_ = descriptor_ ? path_ : in_place_ ? target_ : target_ + ".tmp";
  int flags = O_WRONLY | O_CLOEXEC;
  if (regular) flags |= O_CREAT;
  flags |= mode == Mode::kAppend || descriptor_ ? O_APPEND : O_TRUNC;
  do {
    fd_ = ::open(file_.c_str(), flags, 0666);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) {
    const int err = errno;
    if (!in_place_) {
      // Say so when it is the directory that refuses, not the .tmp.
      error_ = Status::io_error(fmt::format("cannot create '{}' (the temporary file of '{}'): {}",
                                            file_, path_, output_error_reason(err)));
      return error_;
    }
    return fail("write", err);
  }
  created_ = regular && (mode != Mode::kAppend || !exists);
  if (mode == Mode::kAppend && exists) good_end_ = static_cast<int64_t>(st.st_size);
  // The replacement keeps the permissions of the file it replaces.
  if (!in_place_ && exists) (void)::fchmod(fd_, st.st_mode & 07777);
  return OkStatus();
}

Status OutputFile::fail(std::string_view action, int err) {
  const std::string via =
      in_place_ ? (written_ > 0 ? fmt::format(" ({} bytes written)", written_) : std::string())
                : fmt::format(" (its temporary file '{}', {} bytes written)", file_, written_);
  error_ = Status::io_error(
      fmt::format("cannot {} '{}'{}: {}", action, path_, via, output_error_reason(err)));
  abandon();
  return error_;
}

void OutputFile::abandon() {
  buffer_.clear();
  const bool failed = !error_.ok();
  if (fd_ >= 0) {
    // A failed log is cut back to the end of its last whole write (no half line).
    if (failed && in_place_ && mode_ != Mode::kReplace && !descriptor_)
      (void)::ftruncate(fd_, good_end_);
    ::close(fd_);
    fd_ = -1;
  }
  // A replacement not committed never happens; a log this open created that holds nothing goes.
  if (!in_place_ || (failed && created_ && good_end_ == 0)) ::unlink(file_.c_str());
}

Status OutputFile::flush() {
  size_t done = 0;
  while (done < buffer_.size()) {
    const ssize_t n = ::write(fd_, buffer_.data() + done, buffer_.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("write", n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  written_ += static_cast<int64_t>(done);
  good_end_ += static_cast<int64_t>(done);
  buffer_.clear();
  return OkStatus();
}

Status OutputFile::write(std::string_view bytes) {
  if (!error_.ok()) return error_;
  TP_CHECK(fd_ >= 0, "OutputFile::write: '", path_, "' is not open");
  buffer_.append(bytes);
  if (mode_ != Mode::kReplace || buffer_.size() >= kBufferBytes) return flush();
  return OkStatus();
}

Status OutputFile::commit() {
  if (!error_.ok()) return error_;
  TP_CHECK(fd_ >= 0, "OutputFile::commit: '", path_, "' is not open");
  TP_RETURN_IF_ERROR(flush());
  // fsync of a device or a pipe says EINVAL: nothing to make durable there.
  if (durable_ && ::fsync(fd_) != 0 && errno != EINVAL && errno != EROFS) {
    return fail("sync", errno);
  }
  if (::close(std::exchange(fd_, -1)) != 0 && errno != EINTR) {
    const int err = errno;
    fd_ = -1;
    return fail("write", err);
  }
  if (!in_place_) {
    if (std::rename(file_.c_str(), target_.c_str()) != 0) {
      const int err = errno;
      error_ = Status::io_error(fmt::format("cannot replace '{}' by its temporary file '{}': {}",
                                            path_, file_, output_error_reason(err)));
      ::unlink(file_.c_str());
      return error_;
    }
  }
  if (durable_) sync_directory(parent_dir(target_));
  return OkStatus();
}

Status check_output_is_not_input(const std::string& output, const std::vector<std::string>& inputs,
                                 std::string_view flag) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(output, ec)) return OkStatus();
  for (const std::string& input : inputs) {
    if (input.empty() || !fs::exists(input, ec)) continue;
    if (fs::equivalent(output, input, ec) && !ec) {
      return Status::invalid_argument(fmt::format(
          "'{}' is the input '{}': writing it would destroy that input; hint: pass another {}",
          output, input, flag));
    }
  }
  return OkStatus();
}

}  // namespace tightpipe
