// DataOptions validation, enum names, DataPosition JSON, path expansion and the byte tokenizer.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/check.h"
#include "tightpipe/data.h"
#include "tightpipe/indexed_dataset.h"
#include "tightpipe/json_int.h"

namespace tightpipe {

namespace fs = std::filesystem;

std::string_view split_name(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kVal:
      return "val";
    case Split::kAll:
      return "all";
  }
  return "?";
}

Result<Split> parse_split(std::string_view name) {
  if (name == "train") return Split::kTrain;
  if (name == "val") return Split::kVal;
  if (name == "all") return Split::kAll;
  return Status::invalid_argument(fmt::format("unknown split '{}'; hint: train, val or all", name));
}

std::string_view on_corrupt_name(OnCorrupt on_corrupt) {
  switch (on_corrupt) {
    case OnCorrupt::kFail:
      return "fail";
    case OnCorrupt::kSkip:
      return "skip";
  }
  return "?";
}

Result<OnCorrupt> parse_on_corrupt(std::string_view name) {
  if (name == "fail") return OnCorrupt::kFail;
  if (name == "skip") return OnCorrupt::kSkip;
  return Status::invalid_argument(
      fmt::format("unknown --on-corrupt '{}'; hint: fail or skip", name));
}

Status DataOptions::validate() const {
  // `flag`: the command-line spelling (train --micro-batch-size, data check --batch-size...).
  auto range = [](std::string_view field, std::string_view flag, int64_t v, int64_t lo,
                  int64_t hi) -> Status {
    if (v >= lo && v <= hi) return OkStatus();
    return Status::invalid_argument(
        fmt::format("data option {} = {} ({}) is out of range [{}, {}]; hint: pass a value in it",
                    field, v, flag, lo, hi));
  };
  if (path.empty() && blend.empty()) {
    return Status::invalid_argument(
        "data option path is empty; hint: a text file, a shard, a "
        "directory of shards or 'DIR/shard-{000000..000009}.tar'");
  }
  TP_RETURN_IF_ERROR(range("micro_batch_size", "--micro-batch-size, data check --batch-size",
                           micro_batch_size, 1, 1 << 20));
  TP_RETURN_IF_ERROR(range("seq_length", "--seq-length", seq_length, 1, 1 << 24));
  TP_RETURN_IF_ERROR(range("num_workers", "--num-workers", num_workers, 1, 256));
  TP_RETURN_IF_ERROR(range("prefetch", "--prefetch", prefetch, 1, 1 << 16));
  TP_RETURN_IF_ERROR(range("shuffle_buffer", "shuffle buffer", shuffle_buffer, 0, 1 << 24));
  TP_RETURN_IF_ERROR(range("num_replicas", "data-parallel replicas", num_replicas, 1, 1 << 20));
  TP_RETURN_IF_ERROR(range("replica", "data-parallel replica", replica, 0, num_replicas - 1));
  TP_RETURN_IF_ERROR(range("vocab_size", "vocabulary", vocab_size, 1, (int64_t{1} << 31) - 1));
  bool by_size = !blend.empty() && blend[0].weight == 0;
  for (size_t i = 0; i < blend.size(); ++i) {
    const DataSource& m = blend[i];
    if (m.path.empty()) {
      return Status::invalid_argument(fmt::format(
          "data option blend member {} has an empty path; hint: an indexed dataset prefix", i));
    }
    if (!std::isfinite(m.weight) || m.weight < 0 || (m.weight == 0) != by_size) {
      return Status::invalid_argument(fmt::format(
          "data option blend member {} ('{}') has weight {}; hint: every weight finite and > 0, "
          "or every weight 0 (by size)",
          i, printable(m.path, 200), m.weight));
    }
  }
  if (Result<std::array<double, 3>> w = parse_split_weights(split_weights); !w.ok()) {
    return w.status();
  }
  return OkStatus();
}

Result<std::vector<DataSource>> parse_data_path(std::span<const std::string> words) {
  constexpr std::string_view kHint = "hint: --data-path PREFIX or --data-path 0.7 A 0.3 B";
  if (words.empty()) {
    return Status::invalid_argument(fmt::format("--data-path: no words; {}", kHint));
  }
  for (size_t i = 0; i < words.size(); ++i) {
    if (trim(words[i]).empty()) {
      return Status::invalid_argument(
          fmt::format("--data-path: word {} is empty; {}", i + 1, kHint));
    }
  }
  if (words.size() == 1) return std::vector<DataSource>{DataSource{1.0, words[0]}};
  // Does any word read as a number? Then the words alternate weight, path.
  bool numbers = false;
  for (const std::string& w : words) {
    // strtod's whole-word match: also "nan", "inf" and "1e999", which are then bad weights.
    const std::string t(trim(w));
    char* end = nullptr;
    (void)std::strtod(t.c_str(), &end);
    numbers = numbers || (!t.empty() && end == t.c_str() + t.size());
  }
  std::vector<DataSource> out;
  if (!numbers) {
    for (const std::string& w : words) out.push_back(DataSource{0.0, w});
    return out;
  }
  if (words.size() % 2 != 0) {
    return Status::invalid_argument(fmt::format(
        "--data-path: {} words with blend weights among them; expected pairs WEIGHT PREFIX; {}",
        words.size(), kHint));
  }
  for (size_t i = 0; i < words.size(); i += 2) {
    Result<double> w = parse_double(words[i]);
    if (!w.ok() || !std::isfinite(*w) || *w <= 0) {
      return Status::invalid_argument(fmt::format(
          "--data-path: blend weight '{}' (word {}) is not a number > 0; hint: --data-path 0.7 A "
          "0.3 B",
          printable(words[i]), i + 1));
    }
    out.push_back(DataSource{*w, words[i + 1]});
  }
  return out;
}

Result<std::array<double, 3>> parse_split_weights(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return Status::invalid_argument(
        fmt::format("--split '{}': {}; hint: 1 to 3 numbers >= 0, not all 0, separated by ',' or "
                    "'/', e.g. --split 969,30,1",
                    printable(text), why));
  };
  const char sep = text.find(',') != std::string_view::npos   ? ','
                   : text.find('/') != std::string_view::npos ? '/'
                                                              : ',';
  const std::vector<std::string> parts = split(text, sep);
  if (parts.empty() || parts.size() > 3) {
    return bad(fmt::format("{} numbers", parts.size()));
  }
  std::array<double, 3> v{0, 0, 0};
  double sum = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    Result<double> x = parse_double(parts[i]);
    if (!x.ok() || !std::isfinite(*x) || *x < 0) {
      return bad(fmt::format("share {} '{}' is not a number >= 0", i + 1, printable(parts[i])));
    }
    v[i] = *x;
    sum += *x;
  }
  if (!(sum > 0) || !std::isfinite(sum)) {
    return bad(fmt::format("the shares add up to {} (expected a finite number > 0)", sum));
  }
  for (double& x : v) x /= sum;
  return v;
}

std::array<std::pair<int64_t, int64_t>, 3> split_document_ranges(
    const std::array<double, 3>& fractions, int64_t num_documents) {
  TP_CHECK(num_documents >= 0, num_documents);
  std::array<int64_t, 4> index{0, 0, 0, 0};
  for (size_t i = 0; i < 3; ++i) {
    // std::nearbyint in the default rounding mode rounds half to even, like Python's round().
    index[i + 1] =
        index[i] +
        static_cast<int64_t>(std::nearbyint(fractions[i] * static_cast<double>(num_documents)));
  }
  const int64_t diff = index[3] - num_documents;
  for (size_t i = 1; i < 4; ++i) {
    index[i] = std::clamp<int64_t>(index[i] - diff, index[i - 1], num_documents);
  }
  return {{{index[0], index[1]}, {index[1], index[2]}, {index[2], index[3]}}};
}

bool is_indexed_dataset(const std::string& prefix) {
  std::error_code ec;
  return !prefix.empty() && fs::is_regular_file(indexed_idx_path(prefix), ec);
}

std::string DataPosition::to_json() const {
  nlohmann::json j = {{"version", 1},
                      {"epoch", epoch},
                      {"samples_in_epoch", samples_in_epoch},
                      {"token_offset", token_offset},
                      {"batches", batches},
                      {"seed", seed},
                      {"num_workers", num_workers},
                      {"shuffle_buffer", shuffle_buffer},
                      {"replica", replica},
                      {"num_replicas", num_replicas},
                      {"split", std::string(split_name(split))},
                      {"num_sources", num_sources}};
  return j.dump();
}

Result<DataPosition> DataPosition::from_json(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status::corruption("data position is not a JSON object");
  }
  DataPosition p;
  try {
    if (json_int<int>(j.at("version")) != 1) {
      return Status::corruption(
          fmt::format("data position version {} is not 1", j.at("version").dump()));
    }
    p.epoch = json_int<int64_t>(j.at("epoch"));
    p.samples_in_epoch = json_int<int64_t>(j.at("samples_in_epoch"));
    p.token_offset = json_int<int64_t>(j.at("token_offset"));
    p.batches = json_int<int64_t>(j.at("batches"));
    p.seed = json_int<uint64_t>(j.at("seed"));
    p.num_workers = json_int<int32_t>(j.at("num_workers"));
    p.shuffle_buffer = json_int<int32_t>(j.at("shuffle_buffer"));
    p.replica = json_int<int32_t>(j.at("replica"));
    p.num_replicas = json_int<int32_t>(j.at("num_replicas"));
    TP_ASSIGN_OR_RETURN(p.split, parse_split(j.at("split").get<std::string>()));
    p.num_sources = json_int<int64_t>(j.at("num_sources"));
  } catch (const nlohmann::json::exception& e) {
    return Status::corruption(fmt::format("data position: {}", json_error_text(e)));
  }
  if (p.epoch < 0 || p.samples_in_epoch < 0 || p.token_offset < 0 || p.batches < 0) {
    return Status::corruption("data position has a negative counter");
  }
  return p;
}

bool is_shard_path(std::string_view path) {
  return path.ends_with(".tar") || path.ends_with(".tar.gz") || path.ends_with(".tgz");
}

namespace {
// The most names one pattern expands to (each a shard path checked on disk): far above any real
// data set's shard count.
constexpr size_t kMaxBraceNames = 1'000'000;

// Refuses a pattern that expands to more than kMaxBraceNames names before any is built (several
// groups multiply: {0..99999}{0..99999} is 10^10 names); malformed groups count 1 here
// (expand_braces_unchecked names them).
Status check_brace_count(std::string_view pattern) {
  size_t total = 1;
  for (size_t open = pattern.find('{'); open != std::string_view::npos;
       open = pattern.find('{', open + 1)) {
    const size_t close = pattern.find('}', open);
    if (close == std::string_view::npos) break;
    const std::string_view body = pattern.substr(open + 1, close - open - 1);
    size_t n = 1;
    if (const size_t dots = body.find(".."); dots != std::string_view::npos) {
      auto lo = parse_int(body.substr(0, dots)), hi = parse_int(body.substr(dots + 2));
      if (lo.ok() && hi.ok() && *lo >= 0 && *hi >= *lo) {
        if (static_cast<uint64_t>(*hi - *lo) >= kMaxBraceNames) {
          return Status::invalid_argument(fmt::format(
              "pattern '{}': range '{{{}}}' has {} names, more than the {} a pattern may expand "
              "to; hint: a directory of shards, or a narrower range",
              printable(pattern), printable(body), *hi - *lo + 1, kMaxBraceNames));
        }
        n = static_cast<size_t>(*hi - *lo + 1);
      }
    } else {
      n = static_cast<size_t>(std::count(body.begin(), body.end(), ',')) + 1;
    }
    if (n > kMaxBraceNames / total) {
      return Status::invalid_argument(fmt::format(
          "pattern '{}' expands to more than the {} names a pattern may expand to; hint: a "
          "directory of shards, or narrower ranges",
          printable(pattern), kMaxBraceNames));
    }
    total *= n;
    open = close;
  }
  return OkStatus();
}

Result<std::vector<std::string>> expand_braces_unchecked(std::string_view pattern) {
  size_t open = pattern.find('{');
  if (open == std::string_view::npos) {
    if (pattern.find('}') != std::string_view::npos) {
      return Status::invalid_argument(fmt::format(
          "pattern '{}': '}}' without '{{'; hint: a group looks like {{a,b}} or {{000..009}}",
          printable(pattern)));
    }
    return std::vector<std::string>{std::string(pattern)};
  }
  size_t close = pattern.find('}', open);
  if (close == std::string_view::npos) {
    return Status::invalid_argument(fmt::format(
        "pattern '{}': '{{' without '}}'; hint: a group looks like {{a,b}} or {{000..009}}",
        printable(pattern)));
  }
  std::string_view head = pattern.substr(0, open);
  std::string_view body = pattern.substr(open + 1, close - open - 1);
  TP_ASSIGN_OR_RETURN(std::vector<std::string> tails,
                      expand_braces_unchecked(pattern.substr(close + 1)));
  std::vector<std::string> items;
  size_t dots = body.find("..");
  if (dots != std::string_view::npos) {
    std::string_view lo_s = body.substr(0, dots), hi_s = body.substr(dots + 2);
    auto lo = parse_int(lo_s), hi = parse_int(hi_s);
    if (!lo.ok() || !hi.ok() || *lo < 0 || *hi < *lo) {
      return Status::invalid_argument(fmt::format(
          "pattern '{}': bad range '{{{}}}'; hint: '{{000000..000099}}' (first <= last)",
          printable(pattern), printable(body)));
    }
    size_t width = lo_s.size() > 1 && lo_s[0] == '0' ? lo_s.size() : 0;
    for (int64_t i = *lo; i <= *hi; ++i) items.push_back(fmt::format("{:0{}}", i, width));
  } else if (body.find(',') != std::string_view::npos) {
    for (const std::string& s : split(body, ',')) items.push_back(s);
  } else {
    return Status::invalid_argument(
        fmt::format("pattern '{}': '{{{}}}' is neither a range 'a..b' nor a list 'a,b'; hint: e.g. "
                    "{{000..009}} or {{a,b}}",
                    printable(pattern), printable(body)));
  }
  std::vector<std::string> out;
  out.reserve(items.size() * tails.size());
  for (const std::string& item : items) {
    for (const std::string& tail : tails) out.push_back(fmt::format("{}{}{}", head, item, tail));
  }
  return out;
}

}  // namespace

Result<std::vector<std::string>> expand_braces(std::string_view pattern) {
  TP_RETURN_IF_ERROR(check_brace_count(pattern));
  return expand_braces_unchecked(pattern);
}

Result<std::vector<std::string>> expand_data_path(const std::string& path) {
  std::vector<std::string> files;
  std::error_code ec;
  if (path.find('{') != std::string::npos) {
    TP_ASSIGN_OR_RETURN(files, expand_braces(path));
    int64_t missing = 0;
    std::string first_missing;
    for (const std::string& f : files) {
      if (!fs::is_regular_file(f, ec)) {
        if (missing++ == 0) first_missing = f;
      }
    }
    if (missing > 0) {
      return Status::not_found(fmt::format("data path '{}': {} of {} files missing, first '{}'",
                                           path, missing, files.size(), first_missing));
    }
  } else if (fs::is_directory(path, ec)) {
    for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
      std::string p = it->path().string();
      std::error_code kind;
      if (it->is_regular_file(kind) && is_shard_path(p)) files.push_back(p);
    }
    if (ec) {
      return Status::io_error(
          fmt::format("data directory '{}': cannot list it: {}; hint: check its permissions",
                      printable(path, 200), ec.message()));
    }
    if (files.empty()) {
      return Status::not_found(fmt::format(
          "data directory '{}' holds no *.tar shards; hint: 'tightpipe data shard --input FILE "
          "--out {}'",
          path, path));
    }
  } else if (fs::exists(fs::symlink_status(path, ec))) {  // a dangling or looping link too
    TP_RETURN_IF_ERROR(check_input_file("data path", path));
    files.push_back(path);
  } else {
    return Status::not_found(fmt::format(
        "data path '{}' does not exist; hint: a text file (e.g. "
        "../shared/data/tinyshakespeare.txt), "
        "a .tar shard, a directory of shards or a pattern like 'dir/shard-{{000000..000009}}.tar'",
        printable(path, 200)));
  }
  std::sort(files.begin(), files.end());
  files.erase(std::unique(files.begin(), files.end()), files.end());
  return files;
}

std::vector<int32_t> byte_tokenize(std::string_view text) {
  std::vector<int32_t> ids(text.size());
  for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
  return ids;
}

}  // namespace tightpipe
