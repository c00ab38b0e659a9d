#include "tightpipe/base.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cfloat>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tightpipe/output_file.h"

namespace tightpipe {
namespace {
uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) w = splitmix64(x);
}

uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Rng::uniform_float() { return static_cast<float>(next_u64() >> 40) * (1.0f / 16777216.0f); }
double Rng::uniform_double() {
  return static_cast<double>(next_u64() >> 11) * (1.0 / 9007199254740992.0);
}
uint64_t Rng::below(uint64_t n) {
  TP_CHECK(n > 0, "Rng::below(0)");
  // Rejection sampling keeps the result unbiased.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = next_u64();
  } while (x >= limit);
  return x % n;
}
float Rng::normal() {
  double u1 = uniform_double();
  double u2 = uniform_double();
  if (u1 < 1e-300) u1 = 1e-300;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
Rng Rng::fork(uint64_t stream) const {
  uint64_t x = s_[0] ^ rotl(s_[3], 13) ^ (stream * 0xd1342543de82ef95ULL + 0x632be59bd9b4e019ULL);
  return Rng(splitmix64(x));
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

namespace {

// The calling thread's schedstat file, opened once per thread and closed with it.
class SchedStat {
 public:
  SchedStat() {
    const std::string path = fmt::format("/proc/self/task/{}/schedstat", gettid());
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  }
  ~SchedStat() {
    if (fd_ >= 0) ::close(fd_);
  }
  SchedStat(const SchedStat&) = delete;
  SchedStat& operator=(const SchedStat&) = delete;
  double wait_seconds() const {
    if (fd_ < 0) return -1;
    char buf[128];
    const ssize_t n = ::pread(fd_, buf, sizeof(buf) - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    // "<ns on cpu> <ns waiting on a run queue> <timeslices>"
    char* end = nullptr;
    std::strtoull(buf, &end, 10);
    const unsigned long long wait_ns = std::strtoull(end, nullptr, 10);
    return static_cast<double>(wait_ns) * 1e-9;
  }

 private:
  int fd_ = -1;
};

}  // namespace

double thread_cpu_wait_seconds() {
  thread_local SchedStat stat;
  return stat.wait_seconds();
}

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

uint64_t fnv1a(std::string_view bytes, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Status::not_found(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::io_error(fmt::format("error reading '{}'", path));
  return ss.str();
}

Status write_file(const std::string& path, std::string_view contents) {
  return write_output_file(path, contents);
}

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

Result<double> parse_double(std::string_view s) {
  std::string str(trim(s));
  if (str.empty()) return Status::invalid_argument("expected a number, got an empty string");
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(str.c_str(), &end);
  if (end != str.c_str() + str.size() || std::isnan(v) || (std::isinf(v) && errno != ERANGE)) {
    return Status::invalid_argument(fmt::format("expected a number, got '{}'", printable(str)));
  }
  if (errno == ERANGE && std::abs(v) > 1.0) {
    return Status::invalid_argument(
        fmt::format("number '{}' is out of range (beyond +-{:g})", printable(str), DBL_MAX));
  }
  if (errno == ERANGE) {
    return Status::invalid_argument(fmt::format(
        "number '{}' is too small to represent (below {:g}); hint: use 0 or a larger value",
        printable(str), DBL_MIN));
  }
  return v;
}

Result<int64_t> parse_int(std::string_view s) {
  std::string_view t = trim(s);
  if (t.empty()) return Status::invalid_argument("expected an integer, got an empty string");
  int64_t v = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range && ptr == t.data() + t.size()) {
    return Status::invalid_argument(
        fmt::format("integer '{}' is out of range (beyond +-2^63)", printable(t)));
  }
  if (ec != std::errc() || ptr != t.data() + t.size()) {
    return Status::invalid_argument(fmt::format("expected an integer, got '{}'", printable(t)));
  }
  return v;
}

std::string printable(std::string_view s, size_t max_chars) {
  std::string out;
  const size_t shown = std::min(s.size(), max_chars);
  for (size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '\\') {
      out += "\\\\";
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += fmt::format("\\x{:02x}", c);
    }
  }
  if (shown < s.size()) out += fmt::format("... ({} bytes in all)", s.size());
  return out;
}

std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors) {
  int64_t p = 1;
  for (int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(p, f, &p)) return std::nullopt;
  }
  return p;
}

namespace {

// The number (in bytes) after `key` in a /proc file of "key: value kB" lines; -1 if absent.
double proc_kib_field(const char* path, std::string_view key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const char* p = line.c_str() + key.size();
    while (*p == ':' || *p == ' ' || *p == '\t') ++p;
    char* end = nullptr;
    const double kib = std::strtod(p, &end);
    if (end != p) return kib * 1024.0;
  }
  return -1;
}

// A cgroup v2 file holding one number (or "max"); -1 if absent or unlimited.
double cgroup_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return -1;
  char* end = nullptr;
  const double v = std::strtod(word.c_str(), &end);
  return end != word.c_str() ? v : -1;
}

}  // namespace

AvailableMemory available_memory() {
  AvailableMemory m{HUGE_VAL, "nothing (no limit found)"};
  const double avail = proc_kib_field("/proc/meminfo", "MemAvailable");
  if (avail >= 0) m = {avail, "MemAvailable in /proc/meminfo"};
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const double mapped = std::max(0.0, proc_kib_field("/proc/self/status", "VmSize"));
    const double left = std::max(0.0, static_cast<double>(rl.rlim_cur) - mapped);
    if (left < m.bytes) m = {left, "the address-space limit (ulimit -v) less what is mapped"};
  }
  const double max = cgroup_number("/sys/fs/cgroup/memory.max");
  if (max >= 0) {
    const double left =
        std::max(0.0, max - std::max(0.0, cgroup_number("/sys/fs/cgroup/memory.current")));
    if (left < m.bytes) m = {left, "the cgroup's memory.max less memory.current"};
  }
  return m;
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.1f} {}", bytes, units[u]);
}

}  // namespace tightpipe
