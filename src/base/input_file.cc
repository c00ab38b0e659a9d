#include "tightpipe/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "tightpipe/base.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

std::string shown(const std::string& path) { return printable(path, 200); }

// What a file that is not a regular one is, in words; nullptr for a regular file.
const char* kind_word(fs::file_type t) {
  switch (t) {
    case fs::file_type::regular:
      return nullptr;
    case fs::file_type::directory:
      return "a directory";
    case fs::file_type::character:
      return "a character device";
    case fs::file_type::block:
      return "a block device";
    case fs::file_type::fifo:
      return "a FIFO (named pipe)";
    case fs::file_type::socket:
      return "a socket";
    default:
      return "not a regular file";
  }
}

fs::file_type type_of(mode_t m) {
  if (S_ISREG(m)) return fs::file_type::regular;
  if (S_ISDIR(m)) return fs::file_type::directory;
  if (S_ISCHR(m)) return fs::file_type::character;
  if (S_ISBLK(m)) return fs::file_type::block;
  if (S_ISFIFO(m)) return fs::file_type::fifo;
  if (S_ISSOCK(m)) return fs::file_type::socket;
  return fs::file_type::unknown;
}

Status not_regular(std::string_view what, const std::string& path, const char* word,
                   const InputKind& kind) {
  return Status::invalid_argument(fmt::format(
      "{} '{}' is {}, not a regular file; hint: pass {} (a regular file: its size must be known "
      "and it must end)",
      what, shown(path), word, kind.expected));
}

}  // namespace

Status check_input_file(std::string_view what, const std::string& path, const InputKind& kind) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (st.type() == fs::file_type::not_found) {
    std::error_code lec;
    if (fs::is_symlink(fs::symlink_status(path, lec))) {
      const fs::path target = fs::read_symlink(path, lec);
      return Status::not_found(fmt::format(
          "{} '{}' is a symbolic link to '{}', which does not exist; hint: point the link at {}",
          what, shown(path), printable(target.string(), 200), kind.expected));
    }
    return Status::not_found(
        fmt::format("{} '{}' does not exist; hint: check the path (relative paths start at {})",
                    what, shown(path), printable(fs::current_path(lec).string(), 200)));
  }
  if (ec) {
    if (ec.value() == ELOOP) {
      return Status::invalid_argument(fmt::format(
          "{} '{}' is a symbolic link loop (too many levels of symbolic links); hint: point the "
          "link at {}",
          what, shown(path), kind.expected));
    }
    return Status::io_error(
        fmt::format("{} '{}': cannot stat it: {}; hint: check the path and its permissions", what,
                    shown(path), ec.message()));
  }
  if (const char* word = kind_word(st.type())) return not_regular(what, path, word, kind);
  // Opening tells whether this process may read it (permissions, ACLs, a read-only mount's
  // quirks), without blocking: it is a regular file.
  TP_ASSIGN_OR_RETURN(InputFile f, open_input_file(what, path, kind));
  return OkStatus();
}

InputFile& InputFile::operator=(InputFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    o.fd_ = -1;
  }
  return *this;
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<InputFile> open_input_file(std::string_view what, const std::string& path,
                                  const InputKind& kind) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec || st.type() != fs::file_type::regular) return check_input_file(what, path, kind);
  // O_NONBLOCK: a FIFO swapped in after the check opens at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return check_input_file(what, path, kind);  // removed meanwhile
    return Status::io_error(fmt::format("{} '{}' cannot be opened: {}; hint: check its permissions",
                                        what, shown(path), std::strerror(err)));
  }
  InputFile f(fd, 0);
  struct stat sb;
  if (::fstat(fd, &sb) != 0) {
    const int err = errno;
    return Status::io_error(fmt::format("{} '{}': cannot stat it: {}; hint: check the path", what,
                                        shown(path), std::strerror(err)));
  }
  if (const char* word = kind_word(type_of(sb.st_mode))) {
    return not_regular(what, path, word, kind);
  }
  // Reads block again as usual (for a regular file O_NONBLOCK changes nothing, but say so).
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  const int64_t size = static_cast<int64_t>(sb.st_size);
  if (size > kind.max_bytes) {
    return Status::invalid_argument(fmt::format(
        "{} '{}' is {} ({} bytes), more than the {} a {} may be; hint: is it the right file? "
        "pass {}",
        what, shown(path), human_bytes(static_cast<double>(size)), size,
        human_bytes(static_cast<double>(kind.max_bytes)), kind.noun, kind.expected));
  }
  return InputFile(f.release(), size);
}

Result<std::string> read_input_file(std::string_view what, const std::string& path,
                                    const InputKind& kind) {
  TP_ASSIGN_OR_RETURN(InputFile f, open_input_file(what, path, kind));
  std::string out;
  out.resize(static_cast<size_t>(f.size()));
  size_t have = 0;
  while (true) {
    if (have == out.size()) {
      // The size at the open is read; more means it grew (or is a /proc file): read on, bounded.
      if (static_cast<int64_t>(out.size()) > kind.max_bytes) {
        return Status::invalid_argument(fmt::format(
            "{} '{}' grew past the {} a {} may be while it was read; hint: pass {} that is not "
            "being written",
            what, shown(path), human_bytes(static_cast<double>(kind.max_bytes)), kind.noun,
            kind.expected));
      }
      const size_t more = std::max<size_t>(4096, out.size() / 2);
      const size_t room = static_cast<size_t>(kind.max_bytes) - out.size() + 1;
      out.resize(out.size() + std::min(more, room));
    }
    const ssize_t n = ::read(f.fd(), out.data() + have, out.size() - have);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      return Status::io_error(
          fmt::format("{} '{}': read failed at byte {}: {}; hint: {}", what, shown(path), have,
                      std::strerror(err),
                      err == EISDIR ? "pass a regular file" : "check the disk and the file"));
    }
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  out.resize(have);
  return out;
}

}  // namespace tightpipe
