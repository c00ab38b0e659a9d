// Checkpoint files: see include/tightpipe/checkpoint.h for the format.
#include "tightpipe/checkpoint.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tightpipe/base.h"

namespace tightpipe::nn {
namespace {
constexpr char kMagic[8] = {'T', 'P', 'C', 'K', 'P', 'T', 0, 0};
constexpr uint32_t kVersion = 1;

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

uint64_t fnv1a(std::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

Status write_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  TP_RETURN_IF_ERROR(write_file(tmp, bytes));
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec)
    return Status::io_error(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
  return OkStatus();
}

std::string shape_flags(const GptConfig& c) {
  return fmt::format("--num-layers {} --hidden-size {} --num-attention-heads {} --seq-length {}",
                     c.num_layers, c.hidden_size, c.num_heads, c.seq_length);
}
}  // namespace

std::string stage_checkpoint_path(const std::string& dir, int stage) {
  return (std::filesystem::path(dir) / fmt::format("stage-{}.ckpt", stage)).string();
}
std::string manifest_path(const std::string& dir) {
  return (std::filesystem::path(dir) / "manifest.txt").string();
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
  return write_atomically(path, bytes);
}

Result<CheckpointState> load_stage_checkpoint(const std::string& path, GptStage& stage) {
  auto read = read_file(path);
  if (!read.ok()) {
    return Status(
        read.status().code(),
        read.status().message() + "; hint: --load must name a directory written by --save");
  }
  const std::string& bytes = *read;
  if (bytes.size() < sizeof(Header)) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' is truncated: {} bytes, the header alone needs {}; hint: the save was "
        "interrupted, use an older checkpoint",
        path, bytes.size(), sizeof(Header)));
  }
  Header h;
  std::memcpy(&h, bytes.data(), sizeof(h));
  if (std::memcmp(h.magic, kMagic, 8) != 0) {
    return Status::corruption(
        fmt::format("'{}' is not a tightpipe stage checkpoint (bad magic)", path));
  }
  if (h.version != kVersion) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' has format version {}, this build reads {}", path, h.version, kVersion));
  }
  const GptConfig& c = stage.config();
  const GptConfig saved{c.vocab_size,  h.seq_length, h.num_layers,
                        h.hidden_size, h.num_heads,  c.micro_batch_size};
  auto mismatch = [&](const char* what, int64_t file_v, int64_t model_v) {
    return Status::invalid_argument(
        fmt::format("checkpoint '{}' has {} {}, the model has {}; hint: pass the shape the "
                    "checkpoint was saved "
                    "with: {}",
                    path, what, file_v, model_v, shape_flags(saved)));
  };
  if (h.vocab_size != c.vocab_size) return mismatch("vocab size", h.vocab_size, c.vocab_size);
  if (h.num_layers != c.num_layers) return mismatch("num_layers", h.num_layers, c.num_layers);
  if (h.hidden_size != c.hidden_size) return mismatch("hidden_size", h.hidden_size, c.hidden_size);
  if (h.num_heads != c.num_heads) return mismatch("num_attention_heads", h.num_heads, c.num_heads);
  if (h.seq_length != c.seq_length) return mismatch("seq_length", h.seq_length, c.seq_length);
  const StageSpec file_spec{h.first_layer, h.stage_layers, h.has_embedding != 0, h.has_head != 0};
  if (!(file_spec == stage.spec())) {
    return Status::invalid_argument(fmt::format(
        "checkpoint '{}' holds stage '{}' (layers [{}, {})), the model's stage is '{}' (layers "
        "[{}, {})); hint: load with the same --pp and --pipeline-layout as the save",
        path, format_layout({file_spec}), h.first_layer, int64_t{h.first_layer} + h.stage_layers,
        format_layout({stage.spec()}), stage.spec().first_layer,
        stage.spec().first_layer + stage.spec().num_layers));
  }
  if (h.num_params != stage.num_params())
    return mismatch("parameter count", h.num_params, stage.num_params());
  const size_t n = stage.num_params() * sizeof(float);
  const size_t expected = sizeof(Header) + 3 * n + sizeof(uint64_t);
  if (bytes.size() != expected) {
    return Status::corruption(fmt::format(
        "checkpoint '{}' is {}: {} bytes, expected {} for {} parameters; hint: the save was "
        "interrupted or the file was cut, use an older checkpoint",
        path, bytes.size() < expected ? "truncated" : "too long", bytes.size(), expected,
        stage.num_params()));
  }
  uint64_t sum;
  std::memcpy(&sum, bytes.data() + expected - sizeof(sum), sizeof(sum));
  if (sum != fnv1a(std::string_view(bytes).substr(0, expected - sizeof(sum)))) {
    return Status::corruption(fmt::format("checkpoint '{}' is corrupt: checksum mismatch", path));
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
  for (size_t i = 0; i < m.stages.size(); ++i) s += fmt::format("file stage-{}.ckpt\n", i);
  return write_atomically(manifest_path(dir), s);
}

Result<Manifest> load_manifest(const std::string& dir) {
  const std::string path = manifest_path(dir);
  auto read = read_file(path);
  if (!read.ok()) {
    return Status(
        read.status().code(),
        read.status().message() + "; hint: --load must name a directory written by --save");
  }
  Manifest m;
  int64_t num_stages = -1;
  std::string layout;
  bool header = false;
  for (const std::string& raw : split(*read, '\n')) {
    const std::string_view line = trim(raw);
    if (line.empty()) continue;
    const size_t sp = line.find(' ');
    const std::string key(line.substr(0, sp));
    const std::string val(sp == std::string_view::npos ? "" : trim(line.substr(sp + 1)));
    if (key == "tightpipe-checkpoint") {
      header = true;
      auto v = parse_int(val);
      if (!v.ok() || *v != kVersion)
        return Status::corruption(
            fmt::format("manifest '{}' has version '{}', expected {}", path, val, kVersion));
      continue;
    }
    if (!header) break;
    if (key == "layout" || key == "file") {
      if (key == "layout") layout = val;
      continue;
    }
    auto v = parse_int(val);
    if (!v.ok())
      return Status::corruption(
          fmt::format("manifest '{}': bad value for '{}': '{}'", path, key, val));
    if (key == "step")
      m.step = *v;
    else if (key == "num_stages")
      num_stages = *v;
    else if (key == "vocab_size")
      m.config.vocab_size = int(*v);
    else if (key == "seq_length")
      m.config.seq_length = int(*v);
    else if (key == "num_layers")
      m.config.num_layers = int(*v);
    else if (key == "hidden_size")
      m.config.hidden_size = int(*v);
    else if (key == "num_heads")
      m.config.num_heads = int(*v);
  }
  if (!header)
    return Status::corruption(fmt::format("'{}' is not a tightpipe checkpoint manifest", path));
  if (num_stages < 1)
    return Status::corruption(fmt::format("manifest '{}' lacks num_stages", path));
  auto stages = partition_layers(m.config, int(num_stages), layout);
  if (!stages.ok()) {
    return Status::corruption(fmt::format("manifest '{}': {}", path, stages.status().message()));
  }
  m.stages = *stages;
  return m;
}

Status save_checkpoint(const std::string& dir, std::span<GptStage* const> stages,
                       const CheckpointState& state) {
  TP_CHECK(!stages.empty());
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status::io_error(
        fmt::format("cannot create checkpoint directory '{}': {}", dir, ec.message()));
  Manifest m;
  m.step = state.step;
  m.config = stages[0]->config();
  for (size_t s = 0; s < stages.size(); ++s) {
    m.stages.push_back(stages[s]->spec());
    TP_RETURN_IF_ERROR(
        save_stage_checkpoint(stage_checkpoint_path(dir, int(s)), *stages[s], state));
  }
  return save_manifest(dir, m);
}

Status check_manifest_shape(const std::string& dir, const Manifest& m, const GptConfig& c) {
  if (m.config.num_layers != c.num_layers || m.config.hidden_size != c.hidden_size ||
      m.config.num_heads != c.num_heads || m.config.seq_length != c.seq_length ||
      m.config.vocab_size != c.vocab_size) {
    return Status::invalid_argument(fmt::format(
        "checkpoint '{}' is a model with {}, the model here has {}; hint: pass the flags the "
        "checkpoint was saved with",
        manifest_path(dir), shape_flags(m.config), shape_flags(c)));
  }
  return OkStatus();
}

Result<CheckpointState> load_checkpoint(const std::string& dir, std::span<GptStage* const> stages) {
  TP_CHECK(!stages.empty());
  TP_ASSIGN_OR_RETURN(Manifest m, load_manifest(dir));
  TP_RETURN_IF_ERROR(check_manifest_shape(dir, m, stages[0]->config()));
  if (m.stages.size() != stages.size()) {
    return Status::invalid_argument(fmt::format(
        "checkpoint '{}' has {} stages ('{}'), the model here has {}; hint: use the same --pp as "
        "the run that saved it",
        manifest_path(dir), m.stages.size(), format_layout(m.stages), stages.size()));
  }
  CheckpointState st;
  for (size_t s = 0; s < stages.size(); ++s) {
    TP_ASSIGN_OR_RETURN(st, load_stage_checkpoint(stage_checkpoint_path(dir, int(s)), *stages[s]));
  }
  return st;
}

}  // namespace tightpipe::nn
