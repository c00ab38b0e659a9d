// write_output_file / OutputFile: a failed write (a full disk as a file-size limit, /dev/full)
// says the path and the system's reason, leaves no .tmp and no part, and keeps the previous file.
#include "tightpipe/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "tightpipe/base.h"

namespace tightpipe {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / fmt::format("tp_output_{}_{}", name, getpid());
  fs::remove_all(d);
  fs::create_directories(d);
  return d.string();
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The message of `body` (a Status) run in a child whose files may not grow past `limit` bytes
// (RLIMIT_FSIZE, SIGXFSZ ignored: writes beyond it fail with EFBIG, as on a full disk). "" when
// the body succeeded.
template <typename F>
std::string in_child_with_file_limit(rlim_t limit, F body) {
  int fds[2];
  if (::pipe(fds) != 0) return "pipe failed";
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &rl) != 0) ::_exit(3);
    const Status s = body();
    const std::string m = s.ok() ? std::string() : s.message();
    if (!m.empty() && ::write(fds[1], m.data(), m.size()) < 0) ::_exit(4);
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(pid, &wstatus, 0);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  return out;
}

TEST(OutputFile, ReplacesWholeAndKeepsThePermissions) {
  const std::string dir = fresh_dir("replace");
  const std::string path = dir + "/out.csv";
  ASSERT_TRUE(write_output_file(path, "old\n").ok());
  ::chmod(path.c_str(), 0600);
  ASSERT_TRUE(write_output_file(path, "new\n").ok());
  EXPECT_EQ(read_file(path).value(), "new\n");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  // A link to a file: the file is replaced, the link stays a link.
  fs::create_symlink(path, dir + "/link.csv");
  ASSERT_TRUE(write_output_file(dir + "/link.csv", "via link\n").ok());
  EXPECT_TRUE(fs::is_symlink(dir + "/link.csv"));
  EXPECT_EQ(read_file(path).value(), "via link\n");
  // A directory in the way: named, with a hint; nothing created.
  Status s = write_output_file(dir, "x");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.message(), dir) && has(s.message(), "Is a directory") &&
              has(s.message(), "hint:"))
      << s.message();
}

// A full disk (a file-size limit) at the second write of a streamed output and in a one-shot
// write: the error names the path and "File too large", the .tmp is gone, the old file is whole.
TEST(OutputFile, FullDiskKeepsThePreviousFileAndLeavesNoTmp) {
  const std::string dir = fresh_dir("full");
  const std::string path = dir + "/trace.json";
  ASSERT_TRUE(write_output_file(path, "previous good output\n").ok());
  std::string m = in_child_with_file_limit(
      100000, [&] { return write_output_file(path, std::string(300000, 'x')); });
  EXPECT_TRUE(has(m, path) && has(m, "File too large") && has(m, "hint:")) << m;
  EXPECT_EQ(read_file(path).value(), "previous good output\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  m = in_child_with_file_limit(100000, [&]() -> Status {
    OutputFile f;
    TP_RETURN_IF_ERROR(f.open(path));
    for (int i = 0; i < 10; ++i) TP_RETURN_IF_ERROR(f.write(std::string(50000, 'y')));
    return f.commit();
  });
  EXPECT_TRUE(has(m, path) && has(m, "File too large")) << m;
  EXPECT_EQ(read_file(path).value(), "previous good output\n");
  EXPECT_FALSE(fs::exists(path + ".tmp"));

  // A new output that cannot be written leaves nothing at all (no 0-byte file).
  m = in_child_with_file_limit(
      0, [&] { return write_output_file(dir + "/new.json", std::string(1000, 'z')); });
  EXPECT_TRUE(has(m, dir + "/new.json") && has(m, "File too large")) << m;
  EXPECT_FALSE(fs::exists(dir + "/new.json"));
  EXPECT_FALSE(fs::exists(dir + "/new.json.tmp"));
}

// A log (metrics.jsonl) keeps its whole lines when the disk fills: the half line is cut, and a
// log that never got a line is removed.
TEST(OutputFile, LogKeepsWholeLinesOnAFullDisk) {
  const std::string dir = fresh_dir("log");
  const std::string path = dir + "/metrics.jsonl";
  const std::string line = std::string(999, 'l') + "\n";
  std::string m = in_child_with_file_limit(2500, [&]() -> Status {
    OutputFile f;
    TP_RETURN_IF_ERROR(f.open(path, OutputFile::Mode::kLog));
    for (int i = 0; i < 5; ++i) TP_RETURN_IF_ERROR(f.write(line));
    return f.commit();
  });
  EXPECT_TRUE(has(m, path) && has(m, "File too large") && has(m, "2000 bytes written")) << m;
  EXPECT_EQ(read_file(path).value(), line + line);
  // Appending to it: the earlier lines stay whatever happens.
  m = in_child_with_file_limit(2500, [&]() -> Status {
    OutputFile f;
    TP_RETURN_IF_ERROR(f.open(path, OutputFile::Mode::kAppend));
    TP_RETURN_IF_ERROR(f.write(line));
    return f.commit();
  });
  EXPECT_TRUE(has(m, "File too large")) << m;
  EXPECT_EQ(read_file(path).value(), line + line);
  m = in_child_with_file_limit(0, [&]() -> Status {
    OutputFile f;
    TP_RETURN_IF_ERROR(f.open(dir + "/empty.jsonl", OutputFile::Mode::kLog));
    TP_RETURN_IF_ERROR(f.write(line));
    return f.commit();
  });
  EXPECT_TRUE(has(m, "File too large")) << m;
  EXPECT_FALSE(fs::exists(dir + "/empty.jsonl"));
}

// Devices are written in place (never renamed over); /dev/full says why.
TEST(OutputFile, DevicesAreWrittenInPlace) {
  if (!fs::exists("/dev/full") || !fs::exists("/dev/null")) GTEST_SKIP() << "no /dev/full";
  EXPECT_TRUE(write_output_file("/dev/null", "x").ok());
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_FALSE(fs::exists("/dev/null.tmp"));
  Status s = write_output_file("/dev/full", std::string(100, 'x'));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(has(s.message(), "/dev/full") && has(s.message(), "No space left on device") &&
              has(s.message(), "hint:"))
      << s.message();
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  // A descriptor the shell opened (`--out /dev/stdout >> file`): written through it, appended,
  // the file neither replaced nor cut.
  const std::string dir = fresh_dir("fd");
  const std::string file = dir + "/log.txt";
  ASSERT_TRUE(write_output_file(file, "earlier\n").ok());
  const int fd = ::open(file.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  struct stat before;
  ::stat(file.c_str(), &before);
  EXPECT_TRUE(write_output_file(fmt::format("/dev/fd/{}", fd), "more\n").ok());
  ::close(fd);
  struct stat after;
  ::stat(file.c_str(), &after);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(read_file(file).value(), "earlier\nmore\n");
  EXPECT_FALSE(fs::exists(file + ".tmp"));
}

TEST(OutputFile, AnOutputThatIsAnInputIsRefused) {
  const std::string dir = fresh_dir("input");
  const std::string input = dir + "/trace.json";
  ASSERT_TRUE(write_output_file(input, "{}").ok());
  fs::create_hard_link(input, dir + "/hard.json");
  fs::create_symlink(input, dir + "/soft.json");
  EXPECT_TRUE(check_output_is_not_input(dir + "/other.json", {input}, "--out").ok());
  for (const char* out : {"/trace.json", "/hard.json", "/soft.json", "/./trace.json"}) {
    Status s = check_output_is_not_input(dir + out, {input}, "--out");
    ASSERT_FALSE(s.ok()) << out;
    EXPECT_TRUE(has(s.message(), dir + out) && has(s.message(), input) &&
                has(s.message(), "hint: pass another --out"))
        << s.message();
  }
}

}  // namespace
}  // namespace tightpipe
