// Checkpoints: one binary file per stage plus a text manifest, in one directory.
//
//   DIR/manifest.txt       "tightpipe-checkpoint 1", step, model shape, layout, stage file names
//   DIR/stage-<s>.ckpt     magic "TPCKPT\0\0", version, model shape, stage spec, step, AdamW step,
//                          RNG state, then params, AdamW m, AdamW v (float32, little-endian), and
//                          an FNV-1a 64 checksum of everything before it
//
// Save writes each file to "<path>.tmp" and renames it. Load checks the manifest and every header
// against the model it fills and refuses a truncated, corrupt or mismatched file with an error that
// names the file, what was expected and what was found. A round trip is exact (bit for bit).
// Stateless free functions; a stage is read or written by one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tightpipe/model.h"
#include "tightpipe/status.h"

namespace tightpipe::nn {

// Training state saved next to the weights.
struct CheckpointState {
  int64_t step = 0;                     // iterations done
  std::array<uint64_t, 4> rng_state{};  // the data sampler's Rng::state()
};

struct Manifest {
  int version = 1;
  int64_t step = 0;
  GptConfig config;  // micro_batch_size is not part of the shape
  std::vector<StageSpec> stages;
};

std::string stage_checkpoint_path(const std::string& dir, int stage);
std::string manifest_path(const std::string& dir);

Status save_stage_checkpoint(const std::string& path, const GptStage& stage,
                             const CheckpointState& state);
Result<CheckpointState> load_stage_checkpoint(const std::string& path, GptStage& stage);

Status save_manifest(const std::string& dir, const Manifest& manifest);
Result<Manifest> load_manifest(const std::string& dir);
// OK when the manifest of `dir` describes a model of config's shape (layers, width, heads, T,
// vocab); otherwise an error naming the manifest and both sets of flags.
Status check_manifest_shape(const std::string& dir, const Manifest& manifest,
                            const GptConfig& config);

// Whole checkpoint of stages 0..S-1 held by this process (creates dir).
Status save_checkpoint(const std::string& dir, std::span<GptStage* const> stages,
                       const CheckpointState& state);
// Loads every stage; the manifest must describe the same model and split.
Result<CheckpointState> load_checkpoint(const std::string& dir, std::span<GptStage* const> stages);

}  // namespace tightpipe::nn
