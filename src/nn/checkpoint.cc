// Checkpoint files: see include/tightpipe/checkpoint.h for the layout and the format.
#include "tightpipe/checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "tightpipe/base.h"
#include "tightpipe/input_file.h"
#include "tightpipe/output_file.h"

namespace tightpipe::nn {
namespace fs = std::filesystem;
namespace {
constexpr char kMagic[8] = {'T', 'P', 'C', 'K', 'P', 'T', 0, 0};
constexpr uint32_t kVersion = 1;
constexpr const char* kIterPrefix = "iter_";
constexpr const char* kOlderHint =
    "hint: the file was damaged or the save interrupted; --load the --save directory to take "
    "the newest complete checkpoint, or an older iter_* directory";

#pragma pack(push, 1)
struct Header {
  char magic[8];
  uint32_t version;
  int32_t vocab_size, seq_length, num_layers, hidden_size, num_heads;
  int32_t first_layer, stage_layers, has_embedding, has_head;
  uint64_t num_params;
  int64_t step, adam_step;
  uint64_t rng[4];
};
#pragma pack(pop)

// The system's reason for errno `err`, with a hint for the ones a user can act on.
std::string io_reason(int err) {
  std::string r = std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    r += "; hint: free space on that file system (--keep-last-checkpoints K keeps only the newest "
         "K checkpoints) or --save to another one";
  } else if (err == EACCES || err == EPERM || err == EROFS) {
    r += "; hint: --save needs a directory this user can write";
  }
  return r;
}

void sync_directory(const std::string& dir) {
  const int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);  // best effort: some file systems refuse a directory fsync
  ::close(fd);
}

std::string shape_flags(const GptConfig& c) {
  return fmt::format("--num-layers {} --hidden-size {} --num-attention-heads {} --seq-length {}",
                     c.num_layers, c.hidden_size, c.num_heads, c.seq_length);
}

// A path that must be a regular file: not_found when missing, invalid_argument when a directory
// or something else. `what` names it in the message ("stage checkpoint", "manifest").
Result<int64_t> regular_file_size(const std::string& path, const char* what) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    return Status::not_found(fmt::format("{} '{}' does not exist", what, path));
  }
  if (!fs::is_regular_file(st)) {
    return Status::corruption(fmt::format(
        "{} '{}' is {}, not a file; hint: a checkpoint directory holds the files tightpipe train "
        "--save wrote; remove or rename what is in the way",
        what, path, fs::is_directory(st) ? "a directory" : "not a regular file"));
  }
  const auto size = fs::file_size(path, ec);
  if (ec) return Status::io_error(fmt::format("cannot read {} '{}': {}", what, path, ec.message()));
  return static_cast<int64_t>(size);
}

// The header of a stage file, checked for itself: magic, version, counts in range and a file
// size that fits its parameter count (all before anything is allocated).
struct StageFile {
  Header h;
  int64_t size = 0;
};

Result<StageFile> read_stage_header(const std::string& path) {
  TP_ASSIGN_OR_RETURN(const int64_t size, regular_file_size(path, "stage checkpoint"));
  StageFile f;
  f.size = size;
  if (size < static_cast<int64_t>(sizeof(Header))) {
    return Status::corruption(
        fmt::format("checkpoint '{}' is truncated: {} bytes, the header alone needs {}; {}", path,
                    size, sizeof(Header), kOlderHint));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in.read(reinterpret_cast<char*>(&f.h), sizeof(Header))) {
    return Status::io_error(
        fmt::format("cannot read the header of '{}': {}", path, std::strerror(errno)));
  }
  const Header& h = f.h;
  if (std::memcmp(h.magic, kMagic, 8) != 0) {
    return Status::corruption(
        fmt::format("'{}' is not a tightpipe stage checkpoint (bad magic '{}'); {}", path,
                    printable(std::string_view(h.magic, 8)), kOlderHint));
  }
  if (h.version != kVersion) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' has format version {}, this build reads {}; hint: load it with the "
        "tightpipe that wrote it",
        path, h.version, kVersion));
  }
  if (h.vocab_size < 1 || h.seq_length < 1 || h.num_layers < 1 || h.hidden_size < 1 ||
      h.num_heads < 1 || h.first_layer < 0 || h.stage_layers < 0 ||
      int64_t{h.first_layer} + h.stage_layers > h.num_layers || h.step < 0 || h.adam_step < 0) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' has a corrupt header: vocab {}, seq_length {}, layers {}, hidden {}, "
        "heads {}, stage layers [{}, +{}), step {}; {}",
        path, h.vocab_size, h.seq_length, h.num_layers, h.hidden_size, h.num_heads, h.first_layer,
        h.stage_layers, h.step, kOlderHint));
  }
  return f;
}

// The file's size against the parameter count its header records: params, m and v (float32
// each) and the checksum (the count bounded by the size first, so nothing overflows).
Status check_stage_size(const std::string& path, const StageFile& f) {
  const uint64_t size = static_cast<uint64_t>(f.size), n = f.h.num_params;
  const uint64_t payload = size - sizeof(Header);
  const bool too_many = n > payload / (3 * sizeof(float));
  const uint64_t needed = too_many ? 0 : sizeof(Header) + 3 * sizeof(float) * n + 8;
  if (!too_many && size == needed) return OkStatus();
  // A size that holds a whole number of parameters other than the header's: most likely the
  // count was damaged (a cut file ends on such a boundary once in 12).
  const uint64_t body = payload >= 8 ? payload - 8 : 1;
  if (body % (3 * sizeof(float)) == 0) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' is corrupt: its header records {} parameters, but its size ({} bytes) "
        "holds {} (a damaged header, or a cut file); {}",
        path, n, size, body / (3 * sizeof(float)), kOlderHint));
  }
  return Status::corruption(fmt::format(
      "checkpoint '{}' is {}: {} bytes, the {} parameters its header records need {}; {}", path,
      too_many || size < needed ? "truncated" : "too long", size, n,
      too_many ? std::string("more") : fmt::format("{}", needed), kOlderHint));
}

GptConfig header_config(const Header& h, int micro_batch_size) {
  return GptConfig{h.vocab_size,  h.seq_length, h.num_layers,
                   h.hidden_size, h.num_heads,  micro_batch_size};
}
StageSpec header_spec(const Header& h) {
  return StageSpec{h.first_layer, h.stage_layers, h.has_embedding != 0, h.has_head != 0};
}
bool same_shape(const GptConfig& a, const GptConfig& b) {
  return a.vocab_size == b.vocab_size && a.seq_length == b.seq_length &&
         a.num_layers == b.num_layers && a.hidden_size == b.hidden_size &&
         a.num_heads == b.num_heads;
}

// "iter_0000130" -> 130; nullopt for any other name.
std::optional<int64_t> iteration_of(const std::string& name) {
  const std::string_view p(kIterPrefix);
  if (name.size() <= p.size() || name.compare(0, p.size(), p) != 0) return std::nullopt;
  const std::string_view digits = std::string_view(name).substr(p.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  auto v = parse_int(digits);
  if (!v.ok()) return std::nullopt;
  return *v;
}

// The iteration directories of root, newest first.
std::vector<std::pair<int64_t, std::string>> list_iterations(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (auto step = iteration_of(name); step && it->is_directory(ec))
      out.emplace_back(*step, it->path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

// Why a candidate was skipped: its error without the hint (the caller gives one hint).
std::string reason(const Status& s) {
  const std::string& m = s.message();
  return m.substr(0, m.find("; hint:"));
}

bool plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}
}  // namespace

std::string iteration_dir(const std::string& root, int64_t step) {
  TP_CHECK(step >= 0, "iteration_dir: negative step ", step);
  return (fs::path(root) / fmt::format("{}{:07d}", kIterPrefix, step)).string();
}
std::string tracker_path(const std::string& root) {
  return (fs::path(root) / kTrackerFile).string();
}
std::string stage_checkpoint_path(const std::string& dir, int stage) {
  return (fs::path(dir) / fmt::format("stage-{}.ckpt", stage)).string();
}
std::string manifest_path(const std::string& dir) {
  return (fs::path(dir) / kManifestFile).string();
}

Status write_checkpoint_file(const std::string& path, std::string_view bytes) {
  return write_output_file(path, bytes, /*durable=*/true);
}

Status save_stage_checkpoint(const std::string& path, const GptStage& stage,
                             const CheckpointState& state) {
  const GptConfig& c = stage.config();
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.vocab_size = c.vocab_size;
  h.seq_length = c.seq_length;
  h.num_layers = c.num_layers;
  h.hidden_size = c.hidden_size;
  h.num_heads = c.num_heads;
  h.first_layer = stage.spec().first_layer;
  h.stage_layers = stage.spec().num_layers;
  h.has_embedding = stage.spec().has_embedding;
  h.has_head = stage.spec().has_head;
  h.num_params = stage.num_params();
  h.step = state.step;
  h.adam_step = stage.adam_step();
  for (int i = 0; i < 4; ++i) h.rng[i] = state.rng_state[i];
  const size_t n = stage.num_params() * sizeof(float);
  std::string bytes;
  bytes.reserve(sizeof(Header) + 3 * n + 8);
  bytes.append(reinterpret_cast<const char*>(&h), sizeof(h));
  bytes.append(reinterpret_cast<const char*>(stage.params().data()), n);
  bytes.append(reinterpret_cast<const char*>(stage.adam_m().data()), n);
  bytes.append(reinterpret_cast<const char*>(stage.adam_v().data()), n);
  const uint64_t sum = fnv1a(bytes);
  bytes.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
  return write_checkpoint_file(path, bytes);
}

Result<CheckpointState> load_stage_checkpoint(const std::string& path, GptStage& stage) {
  auto header = read_stage_header(path);
  if (!header.ok()) {
    if (header.status().code() != StatusCode::kNotFound) return header.status();
    return Status::not_found(header.status().message() +
                             "; hint: --load must name a directory written by --save");
  }
  const Header& h = header->h;
  const GptConfig& c = stage.config();
  const GptConfig saved = header_config(h, c.micro_batch_size);
  auto mismatch = [&](const char* what, int64_t file_v, int64_t model_v) {
    return Status::invalid_argument(
        fmt::format("checkpoint '{}' has {} {}, the model has {}; hint: pass the shape the "
                    "checkpoint was saved with: {}",
                    path, what, file_v, model_v, shape_flags(saved)));
  };
  if (h.vocab_size != c.vocab_size) return mismatch("vocab size", h.vocab_size, c.vocab_size);
  if (h.num_layers != c.num_layers) return mismatch("num_layers", h.num_layers, c.num_layers);
  if (h.hidden_size != c.hidden_size) return mismatch("hidden_size", h.hidden_size, c.hidden_size);
  if (h.num_heads != c.num_heads) return mismatch("num_attention_heads", h.num_heads, c.num_heads);
  if (h.seq_length != c.seq_length) return mismatch("seq_length", h.seq_length, c.seq_length);
  const StageSpec file_spec = header_spec(h);
  if (!(file_spec == stage.spec())) {
    return Status::invalid_argument(fmt::format(
        "checkpoint '{}' holds stage '{}' (layers [{}, {})), the model's stage is '{}' (layers "
        "[{}, {})); hint: load with the same --pp and --pipeline-layout as the save",
        path, format_layout({file_spec}), h.first_layer, int64_t{h.first_layer} + h.stage_layers,
        format_layout({stage.spec()}), stage.spec().first_layer,
        stage.spec().first_layer + stage.spec().num_layers));
  }
  // The shape and the stage agree, so the count can only differ by damage to the file (not a
  // flag to change).
  if (h.num_params != stage.num_params()) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' is corrupt: its header records {} parameters, but stage '{}' of the "
        "shape it records ({}) has {}; {}",
        path, h.num_params, format_layout({file_spec}), shape_flags(saved), stage.num_params(),
        kOlderHint));
  }
  TP_RETURN_IF_ERROR(check_stage_size(path, *header));
  auto read = read_input_file("stage checkpoint", path, input_kind::kData);
  if (!read.ok()) return read.status();
  const std::string& bytes = *read;
  const size_t n = stage.num_params() * sizeof(float);
  const size_t expected = sizeof(Header) + 3 * n + sizeof(uint64_t);
  if (bytes.size() != expected) {  // changed since the header was read
    return Status::corruption(
        fmt::format("checkpoint '{}' is {}: {} bytes, expected {} for {} parameters; {}", path,
                    bytes.size() < expected ? "truncated" : "too long", bytes.size(), expected,
                    stage.num_params(), kOlderHint));
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + expected - sizeof(sum), sizeof(sum));
  if (sum != fnv1a(std::string_view(bytes).substr(0, expected - sizeof(sum)))) {
    return Status::corruption(
        fmt::format("checkpoint '{}' is corrupt: checksum mismatch; {}", path, kOlderHint));
  }
  const char* p = bytes.data() + sizeof(Header);
  std::memcpy(stage.params().data(), p, n);
  std::memcpy(stage.adam_m().data(), p + n, n);
  std::memcpy(stage.adam_v().data(), p + 2 * n, n);
  stage.set_adam_step(h.adam_step);
  CheckpointState st;
  st.step = h.step;
  for (int i = 0; i < 4; ++i) st.rng_state[i] = h.rng[i];
  return st;
}

Status save_manifest(const std::string& dir, const Manifest& m) {
  std::string s = fmt::format("tightpipe-checkpoint {}\nstep {}\nnum_stages {}\n", m.version,
                              m.step, m.stages.size());
  s += fmt::format("vocab_size {}\nseq_length {}\nnum_layers {}\nhidden_size {}\nnum_heads {}\n",
                   m.config.vocab_size, m.config.seq_length, m.config.num_layers,
                   m.config.hidden_size, m.config.num_heads);
  s += fmt::format("layout {}\n", format_layout(m.stages));
  // The arithmetic the run trained in; the weights are FP32 master weights either way.
  s += fmt::format("precision {}\n", precision_name(m.config.precision));
  for (size_t i = 0; i < m.stages.size(); ++i) s += fmt::format("file stage-{}.ckpt\n", i);
  for (const std::string& f : m.extra_files) s += fmt::format("file {}\n", f);
  return write_checkpoint_file(manifest_path(dir), s);
}

Result<Manifest> load_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  auto size = regular_file_size(path, "manifest");
  if (!size.ok()) {
    if (size.status().code() != StatusCode::kNotFound) return size.status();
    return Status::not_found(size.status().message() +
                             "; hint: --load must name a directory written by --save");
  }
  if (*size > kMaxManifestBytes) {
    return Status::corruption(
        fmt::format("manifest '{}' is {} bytes, more than the {} a manifest "
                    "can be; {}",
                    path, *size, kMaxManifestBytes, kOlderHint));
  }
  TP_ASSIGN_OR_RETURN(const std::string text,
                      read_input_file("manifest", path, input_kind::kManifest));
  Manifest m;
  std::optional<int64_t> num_stages;
  bool has_step = false;
  std::string layout;
  bool header = false;
  auto bad = [&](std::string_view what) {
    return Status::corruption(fmt::format("manifest '{}': {}; {}", path, what, kOlderHint));
  };
  // A count of the model: a whole number in [1, INT_MAX] (GptConfig::validate bounds it further).
  auto count = [&](const std::string& key, int64_t v, int& out) -> Status {
    if (v < 1 || v > INT_MAX) {
      return bad(fmt::format("'{}' is {}, expected a count in [1, {}]", key, v, INT_MAX));
    }
    out = static_cast<int>(v);
    return OkStatus();
  };
  for (const std::string& raw : split(text, '\n')) {
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string key(line.substr(0, sp));
    const std::string val(sp == std::string_view::npos ? "" : trim(line.substr(sp + 1)));
    if (key == "tightpipe-checkpoint") {
      header = true;
      auto v = parse_int(val);
      if (!v.ok() || *v != kVersion) {
        return Status::corruption(
            fmt::format("manifest '{}' has version '{}', expected {}; hint: load it with the "
                        "tightpipe that wrote it",
                        path, printable(val), kVersion));
      }
      continue;
    }
    if (!header) break;
    if (key == "layout") {
      layout = val;
      continue;
    }
    if (key == "precision") {  // absent in checkpoints before --bf16: they trained in fp32
      auto p = parse_precision(val);
      if (!p.ok())
        return bad(fmt::format("'precision' is '{}', expected fp32 or bf16", printable(val)));
      m.config.precision = *p;
      continue;
    }
    if (key == "file") {
      if (!plain_file_name(val)) {
        return bad(fmt::format("'file {}' is not a file name in the checkpoint directory",
                               printable(val)));
      }
      if (val.rfind("stage-", 0) != 0) m.extra_files.push_back(val);  // stages: num_stages
      continue;
    }
    auto v = parse_int(val);
    if (!v.ok())
      return bad(fmt::format("bad value for '{}': '{}'", printable(key), printable(val)));
    if (key == "step") {
      if (*v < 0) return bad(fmt::format("'step' is {}, expected >= 0", *v));
      m.step = *v;
      has_step = true;
    } else if (key == "num_stages") {
      num_stages = *v;
    } else if (key == "vocab_size") {
      TP_RETURN_IF_ERROR(count(key, *v, m.config.vocab_size));
    } else if (key == "seq_length") {
      TP_RETURN_IF_ERROR(count(key, *v, m.config.seq_length));
    } else if (key == "num_layers") {
      TP_RETURN_IF_ERROR(count(key, *v, m.config.num_layers));
    } else if (key == "hidden_size") {
      TP_RETURN_IF_ERROR(count(key, *v, m.config.hidden_size));
    } else if (key == "num_heads") {
      TP_RETURN_IF_ERROR(count(key, *v, m.config.num_heads));
    }
  }
  if (!header) {
    return Status::corruption(fmt::format(
        "'{}' is not a tightpipe checkpoint manifest (no 'tightpipe-checkpoint' line); {}", path,
        kOlderHint));
  }
  if (!has_step) return bad("no 'step' line");
  if (!num_stages) return bad("no 'num_stages' line");
  if (Status s = m.config.validate(); !s.ok()) return bad(reason(s));  // its hint names flags
  // Every stage holds at least one of the embedding, a block or the loss.
  const int64_t max_stages = std::min<int64_t>(m.config.num_layers, kMaxNumLayers) + 2;
  if (*num_stages < 1 || *num_stages > max_stages) {
    return bad(fmt::format("'num_stages' is {}, expected 1 to {} for num_layers {}", *num_stages,
                           max_stages, m.config.num_layers));
  }
  auto stages = partition_layers(m.config, static_cast<int>(*num_stages), layout);
  if (!stages.ok()) return bad(stages.status().message());
  m.stages = *stages;
  return m;
}

Status check_manifest_shape(const std::string& dir, const Manifest& m, const GptConfig& c) {
  if (!same_shape(m.config, c)) {
    return Status::invalid_argument(fmt::format(
        "checkpoint '{}' is a model with {}, the model here has {}; hint: pass the flags the "
        "checkpoint was saved with",
        manifest_path(dir), shape_flags(m.config), shape_flags(c)));
  }
  return OkStatus();
}

Result<Manifest> check_checkpoint_complete(const std::string& dir) {
  TP_ASSIGN_OR_RETURN(Manifest m, load_manifest(dir));
  for (size_t s = 0; s < m.stages.size(); ++s) {
    const std::string path = stage_checkpoint_path(dir, static_cast<int>(s));
    TP_ASSIGN_OR_RETURN(StageFile f, read_stage_header(path));
    TP_RETURN_IF_ERROR(check_stage_size(path, f));
    if (!same_shape(header_config(f.h, 1), m.config) || !(header_spec(f.h) == m.stages[s])) {
      return Status::corruption(fmt::format(
          "'{}' holds stage '{}' of a model with {}, the manifest says stage '{}' of {}; {}", path,
          format_layout({header_spec(f.h)}), shape_flags(header_config(f.h, 1)),
          format_layout({m.stages[s]}), shape_flags(m.config), kOlderHint));
    }
    if (f.h.step != m.step) {  // a save interrupted between files mixes two checkpoints
      return Status::corruption(fmt::format("'{}' is at step {} but the manifest at step {}; {}",
                                            path, f.h.step, m.step, kOlderHint));
    }
  }
  for (const std::string& name : m.extra_files) {
    auto size = regular_file_size((fs::path(dir) / name).string(), "checkpoint file");
    if (!size.ok())
      return Status(size.status().code(), size.status().message() + "; " + kOlderHint);
  }
  return m;
}

Status write_tracker(const std::string& root, int64_t step) {
  return write_checkpoint_file(tracker_path(root), fmt::format("{}\n", step));
}

Result<ResolvedCheckpoint> resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    if (ec.value() == ELOOP) {
      return Status::invalid_argument(fmt::format(
          "--load '{}' is a symbolic link loop (too many levels of symbolic links); hint: name a "
          "directory written by --save (or one of its iter_* directories)",
          path));
    }
    return Status::not_found(fmt::format(
        "--load '{}' does not exist; hint: name a directory written by --save (or one of its "
        "iter_* directories)",
        path));
  }
  if (!fs::is_directory(path, ec)) {
    return Status::invalid_argument(fmt::format(
        "--load '{}' is not a directory; hint: name a directory written by --save (or one of its "
        "iter_* directories)",
        path));
  }
  ResolvedCheckpoint r;
  const std::string tracker = tracker_path(path);
  const auto iterations = list_iterations(path);
  // An iteration directory, or the flat layout (manifest and stage files in the --save dir).
  if (!fs::exists(fs::symlink_status(tracker, ec)) && iterations.empty() &&
      fs::exists(manifest_path(path), ec)) {
    auto m = check_checkpoint_complete(path);
    if (!m.ok()) return m.status().with_context(fmt::format("--load '{}'", path));
    r.dir = path;
    r.manifest = std::move(*m);
    return r;
  }
  // A --save root: the tracker, else the newest complete iteration.
  auto take = [&](const std::string& dir, Manifest m) -> ResolvedCheckpoint {
    for (std::string& w : r.warnings) {
      w = fmt::format("warning: --load {}: {}; took {} (step {})", path, w, dir, m.step);
    }
    r.dir = dir;
    r.manifest = std::move(m);
    return r;
  };
  std::optional<int64_t> tracked;
  bool no_tracker = false;
  if (auto size = regular_file_size(tracker, "tracker"); !size.ok()) {
    no_tracker = size.status().code() == StatusCode::kNotFound;
    r.warnings.push_back(no_tracker ? fmt::format("no {}", tracker) : reason(size.status()));
  } else if (*size > 64) {
    r.warnings.push_back(
        fmt::format("tracker '{}' is {} bytes, not a step number", tracker, *size));
  } else if (auto text = read_input_file("tracker", tracker, input_kind::kConfig); !text.ok()) {
    r.warnings.push_back(text.status().message());
  } else if (auto step = parse_int(trim(*text)); !step.ok() || *step < 0) {
    r.warnings.push_back(
        fmt::format("tracker '{}' holds '{}', not a step number", tracker, printable(*text)));
  } else {
    tracked = *step;
    const std::string dir = iteration_dir(path, *step);
    auto m = check_checkpoint_complete(dir);
    if (m.ok()) return take(dir, std::move(*m));
    r.warnings.push_back(fmt::format("tracker '{}' names {}, which is incomplete: {}", tracker, dir,
                                     reason(m.status())));
  }
  for (const auto& [step, dir] : iterations) {
    if (tracked && step == *tracked) continue;  // checked above
    auto m = check_checkpoint_complete(dir);
    if (m.ok()) return take(dir, std::move(*m));
    r.warnings.push_back(fmt::format("skipped {}: {}", dir, reason(m.status())));
  }
  if (no_tracker && iterations.empty()) {
    return Status::not_found(fmt::format(
        "--load '{}' holds no checkpoint (no {}, no iter_* directory, no {}); hint: name a "
        "directory written by --save",
        path, kTrackerFile, kManifestFile));
  }
  return Status::corruption(
      fmt::format("--load '{}' holds no complete checkpoint: {}; hint: the "
                  "saves were interrupted or damaged; train from scratch "
                  "or restore a copy",
                  path, join(r.warnings, "; ")));
}

std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last,
                                           int64_t current_step) {
  TP_CHECK(keep_last >= 1, "prune_checkpoints: keep_last ", keep_last);
  std::vector<std::string> lines;
  int64_t kept = 0;
  for (const auto& [step, dir] : list_iterations(root)) {
    if (step > current_step) continue;  // not this run's past: left alone
    std::string why;
    if (step == current_step) {
      ++kept;
      continue;
    }
    auto m = check_checkpoint_complete(dir);
    if (m.ok() && ++kept <= keep_last) continue;
    why = m.ok() ? fmt::format("older than the newest {} (--keep-last-checkpoints)", keep_last)
                 : fmt::format("incomplete: {}", reason(m.status()));
    std::error_code ec;
    fs::remove_all(dir, ec);
    lines.push_back(
        ec ? fmt::format("warning: could not remove {} ({}): {}", dir, why, ec.message())
           : fmt::format("removed {} ({})", dir, why));
  }
  return lines;
}

std::string staging_dir(const std::string& dir) { return dir + ".saving"; }

Status prepare_iteration_dir(const std::string& dir) {
  const std::string staging = staging_dir(dir);
  std::error_code ec;
  fs::create_directories(staging, ec);
  if (ec) {
    return Status::io_error(
        fmt::format("cannot create checkpoint directory '{}': {}", staging, io_reason(ec.value())));
  }
  // An earlier attempt at this step (killed) may have left its files there, or the checkpoint a
  // swap replaced: without a manifest the directory is incomplete until this save's lands.
  fs::remove(manifest_path(staging), ec);
  if (ec) {
    return Status::io_error(
        fmt::format("cannot remove '{}': {}", manifest_path(staging), io_reason(ec.value())));
  }
  return OkStatus();
}

namespace {

// Moves the complete `staging` directory to `dir`. A checkpoint already at `dir` is swapped out
// in one step (RENAME_EXCHANGE) and then removed, so `dir` always holds a complete checkpoint;
// where the file system cannot exchange, the old one is moved aside first (DIR.old) and removed
// after.
Status swap_into_place(const std::string& staging, const std::string& dir) {
  auto failed = [&](int err) {
    return Status::io_error(fmt::format(
        "cannot move the new checkpoint '{}' into place as '{}': {}; the checkpoint at '{}' is "
        "unchanged",
        staging, dir, io_reason(err), dir));
  };
  if (std::rename(staging.c_str(), dir.c_str()) == 0) return OkStatus();  // none there (or empty)
  if (errno != ENOTEMPTY && errno != EEXIST) return failed(errno);
  std::error_code ec;
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) == 0) {
    fs::remove_all(staging, ec);  // the old checkpoint; a leftover is cleared by the next save
    return OkStatus();
  }
  if (errno != EINVAL && errno != ENOSYS) return failed(errno);
  const std::string old = dir + ".old";
  fs::remove_all(old, ec);
  if (std::rename(dir.c_str(), old.c_str()) != 0) return failed(errno);
  if (std::rename(staging.c_str(), dir.c_str()) != 0) {
    const int err = errno;
    (void)std::rename(old.c_str(), dir.c_str());
    return failed(err);
  }
  fs::remove_all(old, ec);
  return OkStatus();
}

}  // namespace

Status commit_checkpoint(const std::string& root, const Manifest& manifest) {
  const std::string dir = iteration_dir(root, manifest.step);
  const std::string staging = staging_dir(dir);
  TP_RETURN_IF_ERROR(save_manifest(staging, manifest));
  sync_directory(staging);
  TP_RETURN_IF_ERROR(swap_into_place(staging, dir));
  sync_directory(root);
  return write_tracker(root, manifest.step);
}

Status save_checkpoint(const std::string& root, std::span<GptStage* const> stages,
                       const CheckpointState& state) {
  TP_CHECK(!stages.empty());
  const std::string dir = staging_dir(iteration_dir(root, state.step));
  TP_RETURN_IF_ERROR(prepare_iteration_dir(iteration_dir(root, state.step)));
  Manifest m;
  m.step = state.step;
  m.config = stages[0]->config();
  for (size_t s = 0; s < stages.size(); ++s) {
    m.stages.push_back(stages[s]->spec());
    TP_RETURN_IF_ERROR(
        save_stage_checkpoint(stage_checkpoint_path(dir, int(s)), *stages[s], state));
  }
  return commit_checkpoint(root, m);
}

Result<CheckpointState> load_checkpoint(const std::string& path,
                                        std::span<GptStage* const> stages) {
  TP_CHECK(!stages.empty());
  TP_ASSIGN_OR_RETURN(const ResolvedCheckpoint r, resolve_checkpoint(path));
  const Manifest& m = r.manifest;
  TP_RETURN_IF_ERROR(check_manifest_shape(r.dir, m, stages[0]->config()));
  if (m.stages.size() != stages.size()) {
    return Status::invalid_argument(fmt::format(
        "checkpoint '{}' has {} stages ('{}'), the model here has {}; hint: use the same --pp as "
        "the run that saved it",
        manifest_path(r.dir), m.stages.size(), format_layout(m.stages), stages.size()));
  }
  CheckpointState st;
  for (size_t s = 0; s < stages.size(); ++s) {
    TP_ASSIGN_OR_RETURN(st,
                        load_stage_checkpoint(stage_checkpoint_path(r.dir, int(s)), *stages[s]));
  }
  return st;
}

}  // namespace tightpipe::nn
