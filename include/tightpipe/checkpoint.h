// Checkpoints: Megatron-LM's layout of iteration directories and a tracker file under one --save
// root; in each iteration directory one binary file per stage plus a text manifest.
//
//   ROOT/latest_checkpointed_iteration.txt   the step of the newest complete checkpoint ("130")
//   ROOT/iter_0000130/manifest.txt           "tightpipe-checkpoint 1", step, model shape, layout,
//                                            precision ("precision bf16"; absent: fp32), the
//                                            files of the checkpoint ("file stage-0.ckpt"...)
//   ROOT/iter_0000130/stage-<s>.ckpt         magic "TPCKPT\0\0", version, model shape, stage spec,
//                                            step, AdamW step, RNG state, then params, AdamW m,
//                                            AdamW v (float32, little-endian), and an FNV-1a 64
//                                            checksum of everything before it
//   ROOT/iter_0000130/data_position.json     the loader's position (train, real data)
//   ROOT/iter_0000130/schedule.csv           the schedule an auto run built
//
// Every file is written to "<path>.tmp", fsynced and renamed (then the directory is fsynced); a
// failed write removes its .tmp (write_output_file, output_file.h). A save writes into
// ROOT/iter_0000130.saving: every stage file first, the manifest last; then it swaps that
// directory into place as ROOT/iter_0000130 (a complete checkpoint of the same step is replaced
// only then, whole), then the tracker: a directory without its manifest, or with a file of
// another step, is incomplete and is never named by the tracker. Load checks the manifest and every
// header against the model it fills and refuses a truncated, corrupt or mismatched file with an
// error that names the file, what was expected and what was found. A round trip is exact (bit for
// bit). Stateless free functions; a stage is read or written by one thread at a time; one writer
// per root.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tightpipe/model.h"
#include "tightpipe/status.h"

namespace tightpipe::nn {

inline constexpr const char* kTrackerFile = "latest_checkpointed_iteration.txt";
inline constexpr const char* kManifestFile = "manifest.txt";
inline constexpr const char* kDataPositionFile = "data_position.json";
// The tokenizer the run trained with (TokenizerOptions::to_json), for `tightpipe sample`.
inline constexpr const char* kTokenizerFile = "tokenizer.json";
// A manifest larger than this is refused before it is read (one of 1026 stages is ~30 KB).
inline constexpr int64_t kMaxManifestBytes = int64_t{1} << 20;

// Training state saved next to the weights.
struct CheckpointState {
  int64_t step = 0;                     // iterations done
  std::array<uint64_t, 4> rng_state{};  // the data sampler's Rng::state()
};

struct Manifest {
  int version = 1;
  int64_t step = 0;
  // micro_batch_size is not part of the shape; precision (fp32/bf16) is what the run trained in:
  // master weights are FP32 either way, so a checkpoint loads in the other precision too.
  GptConfig config;
  std::vector<StageSpec> stages;
  // The checkpoint's files besides stage-<s>.ckpt (data_position.json, schedule.csv): plain names
  // in the same directory; a checkpoint lacking one is incomplete.
  std::vector<std::string> extra_files;
};

// ROOT/iter_0000130 (7 digits, more for steps >= 10^7). REQUIRES: step >= 0.
std::string iteration_dir(const std::string& root, int64_t step);
// ROOT/latest_checkpointed_iteration.txt
std::string tracker_path(const std::string& root);
std::string stage_checkpoint_path(const std::string& dir, int stage);
std::string manifest_path(const std::string& dir);

// Writes `bytes` to "<path>.tmp", fsyncs it, renames it to `path` and fsyncs the directory. On
// any failure the .tmp is removed and the error names the path, the system's reason (e.g. "No
// space left on device") and a hint.
Status write_checkpoint_file(const std::string& path, std::string_view bytes);

Status save_stage_checkpoint(const std::string& path, const GptStage& stage,
                             const CheckpointState& state);
// Reads the header first and checks it against `stage` and the file's size before reading the
// rest, so a damaged count allocates nothing.
Result<CheckpointState> load_stage_checkpoint(const std::string& path, GptStage& stage);

// Writes DIR/manifest.txt naming the stage files and manifest.extra_files.
Status save_manifest(const std::string& dir, const Manifest& manifest);
// Every count is range-checked (the model limits of GptConfig::validate, at most
// num_layers + 2 stages) before anything is allocated.
Result<Manifest> load_manifest(const std::string& dir);
// OK when the manifest of `dir` describes a model of config's shape (layers, width, heads, T,
// vocab); otherwise an error naming the manifest and both sets of flags.
Status check_manifest_shape(const std::string& dir, const Manifest& manifest,
                            const GptConfig& config);

// The manifest of `dir` when the checkpoint there is complete: the manifest parses, every file it
// names is present, and every stage file's header (magic, version, shape, stage, step) matches
// the manifest and its size fits its parameter count. Cheap: headers only, no checksum.
// Otherwise an error saying what is missing or wrong.
Result<Manifest> check_checkpoint_complete(const std::string& dir);

// Writes ROOT/latest_checkpointed_iteration.txt = step (atomically; call after the manifest).
Status write_tracker(const std::string& root, int64_t step);

// What --load PATH means.
struct ResolvedCheckpoint {
  std::string dir;    // the checkpoint directory to read (an iter_* directory)
  Manifest manifest;  // its manifest (manifest.step: the step it holds)
  // One line per thing skipped and why (tracker missing, an incomplete iteration): "warning:
  // --load PATH: ...; took DIR (step N)".
  std::vector<std::string> warnings;
};
// PATH is a --save root: the iteration the tracker names when it is complete; else (no tracker,
// unreadable, or naming an incomplete iteration) the newest complete iter_* with a warning for
// each thing skipped. PATH holding a manifest (an iter_* directory, or the flat layout of
// tightpipe before iteration directories) is taken as it is and must be complete. Errors: PATH
// missing, nothing complete (listing what was found and why it was skipped).
Result<ResolvedCheckpoint> resolve_checkpoint(const std::string& path);

// --keep-last-checkpoints K (K >= 1): removes the complete iter_* directories of ROOT older than
// the newest K at or below `current_step` (never current_step's own), and the incomplete ones
// older than current_step. Returns one line per directory removed (or that could not be removed).
std::vector<std::string> prune_checkpoints(const std::string& root, int64_t keep_last,
                                           int64_t current_step);

// The steps of a save (one writer per file; with several ranks each step ends at a barrier):
// prepare_iteration_dir (creates staging_dir(ROOT/iter_<step>) beside the iteration directory,
// removes the manifest an earlier attempt left there), the stage files and extra files into the
// staging directory, then commit_checkpoint (the manifest into the staging directory, the swap
// that puts it at ROOT/iter_<step>, then the tracker). A checkpoint already at that step keeps
// loading until the swap replaces it whole: an interrupted save never costs a complete one.
std::string staging_dir(const std::string& iteration_dir);  // ROOT/iter_<step>.saving
Status prepare_iteration_dir(const std::string& dir);
Status commit_checkpoint(const std::string& root, const Manifest& manifest);

// Whole checkpoint of stages 0..S-1 held by this process into ROOT/iter_<step> (stage files, then
// the manifest, then the tracker; creates the directories).
Status save_checkpoint(const std::string& root, std::span<GptStage* const> stages,
                       const CheckpointState& state);
// Loads every stage of the checkpoint resolve_checkpoint(path) takes; the manifest must describe
// the same model and split, and every stage file the manifest's step.
Result<CheckpointState> load_checkpoint(const std::string& path, std::span<GptStage* const> stages);

}  // namespace tightpipe::nn
