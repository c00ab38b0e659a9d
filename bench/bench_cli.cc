// Flags on CLI11 (bench_cli.h): the one bench file that compiles CLI11.
#include "bench_cli.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

namespace tightpipe::bench {

struct Flags::Impl {
  CLI::App app;
  Impl(const std::string& description, const std::string& name) : app(description, name) {}

  template <typename T>
  Flag option(const std::string& name, T& value, const std::string& help) {
    return Flag(app.add_option(name, value, help));
  }
};

Flag& Flag::show_default() {
  option_->capture_default_str();
  return *this;
}

Flag& Flag::range(int lo, int hi) {
  option_->check(CLI::Range(lo, hi));
  return *this;
}

Flag& Flag::range(int64_t lo, int64_t hi) {
  option_->check(CLI::Range(lo, hi));
  return *this;
}

Flag& Flag::range(double lo, double hi) {
  option_->check(CLI::Range(lo, hi));
  return *this;
}

Flag& Flag::positive() {
  option_->check(CLI::PositiveNumber);
  return *this;
}

Flag& Flag::one_of(const std::vector<std::string>& names) {
  option_->check(CLI::IsMember(names));
  return *this;
}

Flag& Flag::delimiter(char c) {
  option_->delimiter(c);
  return *this;
}

Flag& Flag::excludes(const std::string& other) {
  option_->excludes(other);
  return *this;
}

Flag& Flag::required() {
  option_->required();
  return *this;
}

Flags::Flags(const std::string& description, const std::string& name)
    : impl_(std::make_unique<Impl>(description, name)) {}

Flags::~Flags() = default;

Flag Flags::option(const std::string& name, int& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, int64_t& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, uint64_t& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, double& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, std::string& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, std::vector<int>& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, std::vector<int64_t>& value, const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::option(const std::string& name, std::vector<std::string>& value,
                   const std::string& help) {
  return impl_->option(name, value, help);
}

Flag Flags::flag(const std::string& name, bool& value, const std::string& help) {
  return Flag(impl_->app.add_flag(name, value, help));
}

int Flags::parse(int argc, char** argv) {
  CLI::App& app = impl_->app;
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::fputs(app.help("", CLI::AppFormatMode::All).c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    std::fprintf(stderr, "%s: %s; hint: run '%s --help' for the flags\n", app.get_name().c_str(),
                 what.c_str(), app.get_name().c_str());
    return kExitUsage;
  }
  return -1;
}

}  // namespace tightpipe::bench
