// write_shards: text -> byte tokens -> (T+1)-token samples -> POSIX tar shards via libarchive.
#include <archive.h>
#include <archive_entry.h>
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/output_file.h"
#include "tightpipe/shard.h"

namespace tightpipe {

namespace fs = std::filesystem;

namespace {

constexpr int64_t kTarBlock = 512;
int64_t tar_entry_bytes(int64_t size) {
  return kTarBlock + (size + kTarBlock - 1) / kTarBlock * kTarBlock;
}

// One open shard being written; RAII over the libarchive handle.
class TarWriter {
 public:
  static Result<std::unique_ptr<TarWriter>> create(std::string path) {
    std::unique_ptr<TarWriter> w(new TarWriter(std::move(path)));
    w->a_ = archive_write_new();
    TP_CHECK(w->a_ != nullptr, "archive_write_new failed");
    archive_write_set_format_pax_restricted(w->a_);
    archive_write_set_bytes_per_block(w->a_, 10240);
    // The archive's bytes go through an OutputFile: "<path>.tmp", every write checked, renamed by
    // close(), removed on any failure.
    TP_RETURN_IF_ERROR(w->out_.open(w->path_));
    if (archive_write_open(w->a_, w.get(), nullptr, &TarWriter::write_cb, nullptr) != ARCHIVE_OK) {
      return Status::io_error(
          fmt::format("cannot create '{}': {}", w->tmp_, archive_error_string(w->a_)));
    }
    return w;
  }
  ~TarWriter() {
    if (a_) archive_write_free(a_);  // on error paths; out_ then removes the .tmp
  }
  Status add(const std::string& name, std::string_view bytes) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_mtime(e, 0, 0);  // reproducible shards
    archive_entry_set_uid(e, 0);
    archive_entry_set_gid(e, 0);
    int r = archive_write_header(a_, e);
    archive_entry_free(e);
    if (r != ARCHIVE_OK) {
      return Status::io_error(
          fmt::format("'{}': writing header of '{}': {}", tmp_, name, archive_error_string(a_)));
    }
    if (archive_write_data(a_, bytes.data(), bytes.size()) !=
        static_cast<la_ssize_t>(bytes.size())) {
      return Status::io_error(
          fmt::format("'{}': writing data of '{}': {}", tmp_, name, archive_error_string(a_)));
    }
    bytes_ += tar_entry_bytes(static_cast<int64_t>(bytes.size()));
    return OkStatus();
  }
  // Writes the end-of-archive marker and renames *.tmp to the final name.
  Status close() {
    if (archive_write_close(a_) != ARCHIVE_OK) {
      return Status::io_error(fmt::format("'{}': {}", tmp_, archive_error_string(a_)));
    }
    archive_write_free(a_);
    a_ = nullptr;
    TP_RETURN_IF_ERROR(out_.commit());
    return OkStatus();
  }
  int64_t bytes() const { return bytes_; }  // entries so far, without the end marker
  const std::string& path() const { return path_; }

 private:
  explicit TarWriter(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}
  static la_ssize_t write_cb(archive* a, void* self, const void* buf, size_t n) {
    OutputFile& out = static_cast<TarWriter*>(self)->out_;
    const Status s = out.write(std::string_view(static_cast<const char*>(buf), n));
    if (s.ok()) return static_cast<la_ssize_t>(n);
    archive_set_error(a, EIO, "%s", s.message().c_str());
    return -1;
  }
  std::string path_, tmp_;
  OutputFile out_;
  archive* a_ = nullptr;
  int64_t bytes_ = 0;
};

Result<std::vector<std::string>> list_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<std::string> found;
      for (fs::recursive_directory_iterator it(in, ec), end; !ec && it != end; it.increment(ec)) {
        std::error_code kind;
        if (it->is_regular_file(kind)) found.push_back(it->path().string());
      }
      if (ec) {
        return Status::io_error(
            fmt::format("--input directory '{}': cannot list it: {}; hint: "
                        "check its permissions",
                        printable(in, 200), ec.message()));
      }
      std::sort(found.begin(), found.end());
      if (found.empty()) {
        return Status::not_found(fmt::format(
            "--input directory '{}' holds no regular files; hint: pass text files or a directory "
            "of them",
            printable(in, 200)));
      }
      files.insert(files.end(), found.begin(), found.end());
    } else {
      TP_RETURN_IF_ERROR(check_input_file("--input", in));
      files.push_back(in);
    }
  }
  return files;
}

}  // namespace

Status ShardWriterOptions::validate() const {
  if (inputs.empty()) {
    return Status::invalid_argument("no input; hint: --input FILE_OR_DIR (repeatable)");
  }
  if (out_dir.empty()) return Status::invalid_argument("no output directory; hint: --out DIR");
  if (samples_per_shard < 0) {
    return Status::invalid_argument(
        fmt::format("--samples-per-shard {} is negative", samples_per_shard));
  }
  if (samples_per_shard == 0 && shard_size < 4096) {
    return Status::invalid_argument(
        fmt::format("--shard-size {} bytes is below the 4096-byte minimum", shard_size));
  }
  if (tokenizer != "byte") {
    return Status::invalid_argument(
        fmt::format("unknown tokenizer '{}'; hint: --tokenizer byte", tokenizer));
  }
  if (seq_length < 0 || seq_length > (1 << 24)) {
    return Status::invalid_argument(
        fmt::format("--seq-length {} is out of range [0, {}]", seq_length, 1 << 24));
  }
  return OkStatus();
}

Result<ShardWriteSummary> write_shards(const ShardWriterOptions& options) {
  TP_RETURN_IF_ERROR(options.validate());
  TP_ASSIGN_OR_RETURN(std::vector<std::string> files, list_inputs(options.inputs));
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) {
    return Status::io_error(
        fmt::format("cannot create --out '{}': {}", options.out_dir, ec.message()));
  }
  const int32_t vocab = kByteVocabSize;
  const bool narrow = vocab <= 65536;
  const std::string dtype = narrow ? "uint16" : "int32";
  const size_t width = narrow ? 2 : 4;

  ShardWriteSummary summary;
  summary.dtype = dtype;
  std::unique_ptr<TarWriter> shard;
  int64_t in_shard = 0;
  auto finish = [&]() -> Status {
    if (!shard) return OkStatus();
    TP_RETURN_IF_ERROR(shard->close());
    summary.shards.push_back(shard->path());
    summary.bytes += static_cast<int64_t>(fs::file_size(shard->path(), ec));
    shard.reset();
    return OkStatus();
  };

  for (const std::string& file : files) {
    TP_RETURN_IF_ERROR(check_input_file("--input", file));
    std::ifstream in(file, std::ios::binary);
    if (!in) {
      return Status::io_error(
          fmt::format("cannot open --input '{}': {}; hint: check its permissions",
                      printable(file, 200), std::strerror(errno)));
    }
    const int64_t chunk = options.seq_length > 0 ? int64_t{options.seq_length} + 1
                                                 : std::numeric_limits<int64_t>::max();
    std::string text;
    int64_t offset = 0;
    while (true) {
      // Read one chunk (chunk is in bytes = tokens for the byte tokenizer).
      text.clear();
      if (options.seq_length > 0) {
        text.resize(static_cast<size_t>(chunk));
        in.read(text.data(), chunk);
        text.resize(static_cast<size_t>(in.gcount()));
      } else {
        text.assign(std::istreambuf_iterator<char>(in), {});
      }
      if (in.bad()) return Status::io_error(fmt::format("error reading '{}'", file));
      if (text.empty()) break;
      // The byte tokenizer reads any bytes, but a NUL never occurs in text: this is a binary
      // file (a tar shard, an image) given by mistake.
      if (const size_t nul = text.find('\0'); nul != std::string::npos) {
        return Status::invalid_argument(fmt::format(
            "--input '{}' holds a NUL byte at byte offset {}: binary data, not text; hint: shard "
            "text files (read shards with --data-path, not --input)",
            printable(file, 200), offset + static_cast<int64_t>(nul)));
      }
      std::vector<int32_t> ids = byte_tokenize(text);
      std::string payload(ids.size() * width, '\0');
      for (size_t i = 0; i < ids.size(); ++i) {
        auto v = static_cast<uint32_t>(ids[i]);
        for (size_t k = 0; k < width; ++k) payload[i * width + k] = static_cast<char>(v >> (8 * k));
      }
      nlohmann::json meta = {{"source", file},
                             {"offset", offset},
                             {"length", static_cast<int64_t>(text.size())},
                             {"tokenizer", options.tokenizer},
                             {"vocab_size", vocab},
                             {"dtype", dtype},
                             {"num_tokens", static_cast<int64_t>(ids.size())}};
      std::string meta_s = meta.dump();
      const int64_t sample_bytes = tar_entry_bytes(payload.size()) + tar_entry_bytes(meta_s.size());
      bool full = shard && (options.samples_per_shard > 0
                                ? in_shard >= options.samples_per_shard
                                : shard->bytes() + sample_bytes + 1024 > options.shard_size);
      if (full) TP_RETURN_IF_ERROR(finish());
      if (!shard) {
        std::string path =
            (fs::path(options.out_dir) / fmt::format("shard-{:06}.tar", summary.shards.size()))
                .string();
        TP_ASSIGN_OR_RETURN(shard, TarWriter::create(path));
        in_shard = 0;
      }
      std::string key = fmt::format("{:09}", summary.samples);
      TP_RETURN_IF_ERROR(shard->add(key + ".tokens", payload));
      TP_RETURN_IF_ERROR(shard->add(key + ".json", meta_s));
      ++in_shard;
      ++summary.samples;
      summary.tokens += static_cast<int64_t>(ids.size());
      offset += static_cast<int64_t>(text.size());
      if (options.seq_length == 0) break;
    }
  }
  TP_RETURN_IF_ERROR(finish());
  if (summary.samples == 0) {
    return Status::invalid_argument(fmt::format(
        "--input {}: {} empty (0 bytes): nothing to shard; hint: pass text files with content",
        files.size() == 1 ? fmt::format("'{}'", printable(files[0], 200))
                          : fmt::format("{} files", files.size()),
        files.size() == 1 ? "the file is" : "all are"));
  }
  return summary;
}

Result<int64_t> parse_byte_size(std::string_view text) {
  std::string_view s = trim(text);
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  auto bad = [&] {
    return Status::invalid_argument(fmt::format(
        "bad size '{}'; hint: a number with an optional unit: 4096, 512KiB, 64MiB, 1GiB, 100MB",
        text));
  };
  if (i == 0) return bad();
  auto num = parse_double(s.substr(0, i));
  if (!num.ok()) return bad();
  std::string_view unit = trim(s.substr(i));
  double mult = 0;
  if (unit.empty() || unit == "B")
    mult = 1;
  else if (unit == "k" || unit == "K" || unit == "KiB")
    mult = 1024.0;
  else if (unit == "M" || unit == "MiB")
    mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "KB" || unit == "kB")
    mult = 1e3;
  else if (unit == "MB")
    mult = 1e6;
  else if (unit == "GB")
    mult = 1e9;
  else
    return bad();
  double v = *num * mult;
  if (!(v >= 1) || v > 9e18) return bad();
  return static_cast<int64_t>(std::llround(v));
}

}  // namespace tightpipe
