// Flag parsing shared by the benches (and fault_train, tests/integration): `--help` prints the
// usage and returns before the bench runs anything; an unknown flag or a bad value is one line on
// stderr and exit code 2. CLI11 parses and writes the usage, inside bench_cli.cc only (library
// tp_bench_cli): a file that includes CLI11 costs ~9 s to compile here, so it is compiled once.
//
//   Flags flags("what the bench measures", "name_bench");
//   flags.option("--steps", steps, "training steps per run").show_default().range(2, 1000);
//   flags.flag("--no-mpi", no_mpi, "threads only");
//   if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace CLI {
class Option;
}

namespace tightpipe::bench {

inline constexpr int kExitUsage = 2;

// One flag of a Flags, for the settings and checks chained onto it; each returns *this. A check
// also shows in the usage (e.g. "INT in [2 - 1000]"); a value that fails it is a usage error.
class Flag {
 public:
  Flag& show_default();  // the usage shows the variable's value as it is now, e.g. "=8"
  Flag& range(int lo, int hi);
  Flag& range(int64_t lo, int64_t hi);
  Flag& range(double lo, double hi);
  Flag& positive();                                     // > 0
  Flag& one_of(const std::vector<std::string>& names);  // exactly one of these words
  Flag& delimiter(char c);  // a list flag's values may also come in one word split at c
  Flag& excludes(const std::string& other);  // not together with the flag named `other`
  Flag& required();

 private:
  friend class Flags;
  explicit Flag(CLI::Option* option) : option_(option) {}
  CLI::Option* option_;
};

// A program's flags: each option or flag writes into its variable during parse (the variable
// must outlive the Flags); the usage lists them in the order they were added.
class Flags {
 public:
  Flags(const std::string& description, const std::string& name);
  ~Flags();
  Flags(const Flags&) = delete;
  Flags& operator=(const Flags&) = delete;

  // An option taking a value (a list option: one or more; a plain one given twice is an error).
  Flag option(const std::string& name, int& value, const std::string& help = "");
  Flag option(const std::string& name, int64_t& value, const std::string& help = "");
  Flag option(const std::string& name, uint64_t& value, const std::string& help = "");
  Flag option(const std::string& name, double& value, const std::string& help = "");
  Flag option(const std::string& name, std::string& value, const std::string& help = "");
  Flag option(const std::string& name, std::vector<int>& value, const std::string& help = "");
  Flag option(const std::string& name, std::vector<int64_t>& value, const std::string& help = "");
  Flag option(const std::string& name, std::vector<std::string>& value,
              const std::string& help = "");
  // A flag without a value: sets `value` to true, or to false for a name spelled "!--no-x".
  Flag flag(const std::string& name, bool& value, const std::string& help = "");

  // Parses argv. Returns -1 when the program should run, otherwise the exit code for main to
  // return at once: 0 after printing --help, kExitUsage after a usage error (one line on stderr).
  int parse(int argc, char** argv);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tightpipe::bench
