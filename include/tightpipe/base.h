// Small shared utilities: a seeded random number generator (no global RNG anywhere in tightpipe),
// a monotonic clock, whole-file reads and writes returning Status, and string helpers.
//
// Rng is a value type (copyable state, so it can be checkpointed); not thread-safe: give each
// thread its own, seeded explicitly.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/status.h"

namespace tightpipe {

// xoshiro256** seeded through splitmix64: the same seed gives the same stream on every platform
// (std:: distributions do not guarantee that, so we define our own).
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits.
  float uniform_float();
  // Uniform in [0, 1) with 53 random bits.
  double uniform_double();
  // Uniform integer in [0, n). REQUIRES: n > 0.
  uint64_t below(uint64_t n);
  // Standard normal (Box-Muller), deterministic for a given state.
  float normal();
  // Derive an independent stream (e.g. one per rank or worker) without touching this one.
  Rng fork(uint64_t stream) const;

  std::array<uint64_t, 4> state() const { return s_; }
  void set_state(const std::array<uint64_t, 4>& s) { s_ = s; }

 private:
  std::array<uint64_t, 4> s_;
};

// Seconds since an arbitrary fixed point, monotonic.
double now_seconds();
// Seconds the calling thread has spent ready to run but waiting for a core since it started (the
// kernel's run-queue delay, /proc/thread-self/schedstat); -1 where the kernel does not say.
// Cheap (one pread of an fd kept open per thread): called around every executed action.
double thread_cpu_wait_seconds();

Result<std::string> read_file(const std::string& path);

// 64-bit FNV-1a of `bytes`, the seed chained (default: the FNV offset basis): checkpoint files'
// checksum and the post-validated step's kept copy (one definition). `fnv1a(b, fnv1a(a))` is the
// hash of a then b.
uint64_t fnv1a(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ULL);
Status write_file(const std::string& path, std::string_view contents);

std::vector<std::string> split(std::string_view s, char sep);
std::string_view trim(std::string_view s);
std::string join(const std::vector<std::string>& parts, std::string_view sep);
// Parses a whole string as a number; no trailing junk, no empty input.
Result<double> parse_double(std::string_view s);
Result<int64_t> parse_int(std::string_view s);
// A value as an error message shows it: bytes outside printable ASCII (a NUL, a newline, UTF-8)
// and the backslash escaped as \xNN / \\, cut after max_chars with "... (N bytes in all)". Every
// message that echoes user input (a CSV cell, a flag value, a file's bytes) passes it through this.
std::string printable(std::string_view s, size_t max_chars = 80);
// The product of sizes or counts derived from user input, or nullopt when it overflows int64_t
// (or a factor is negative). Every size computed from flags or file headers before an allocation
// goes through this one helper.
std::optional<int64_t> checked_product(std::initializer_list<int64_t> factors);

// Memory this process may still allocate: the smallest of MemAvailable (/proc/meminfo), the
// address-space limit (RLIMIT_AS, `ulimit -v`) less what the process already maps, and the
// cgroup's memory.max less its memory.current. `source` names the one that bounds it.
struct AvailableMemory {
  double bytes = 0;    // +inf when nothing says
  std::string source;  // e.g. "MemAvailable in /proc/meminfo"
};
AvailableMemory available_memory();

// "1.5 KiB", "12.0 MiB"...
std::string human_bytes(double bytes);
// The middle value (the mean of the two middle ones for an even count); 0 for none.
double median(std::vector<double> values);

}  // namespace tightpipe
