// tightpipe train / tightpipe sample.
//
// train: the GPT model (the tokenizer's vocabulary, padded; the byte tokenizer by default) on P
// ranks with any schedule of the library (P = 1 included), Megatron flag spelling, through
// run_training (src/exec/trainer.cc): one JSON object per step in --out-dir/metrics.jsonl,
// summary.json, timelines, checkpoints. sample: next-token sampling from a checkpoint written by
// train --save.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "commands.h"
#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/input_file.h"
#include "tightpipe/kernels.h"
#include "tightpipe/model.h"
#include "tightpipe/optimizer.h"
#include "tightpipe/report.h"
#include "train_pipeline.h"

namespace tightpipe::cli {
namespace {
using nn::GptConfig;
using nn::GptStage;

constexpr int kMaxSampleTokens = 1'000'000;  // sample --tokens (docs/train_limits.md)

void add_model_flags(CLI::App& app, GptConfig& m) {
  app.add_option("--num-layers", m.num_layers, "transformer layers L")->capture_default_str();
  app.add_option("--hidden-size", m.hidden_size, "hidden size C")->capture_default_str();
  app.add_option("--num-attention-heads", m.num_heads, "attention heads NH")->capture_default_str();
  app.add_option("--seq-length", m.seq_length, "sequence length T")->capture_default_str();
  app.add_option("--micro-batch-size", m.micro_batch_size, "microbatch size B")
      ->capture_default_str();
}

// --layout-costs-from RUN_DIR: that run's measured costs per layer kind (report.h), for a model
// of the same shape (the layer count may differ).
Result<LayerCosts> layout_costs_from(const std::string& dir, const GptConfig& model) {
  auto run = load_run(dir);
  if (!run.ok()) return run.status().with_context("--layout-costs-from");
  auto costs = run_layer_costs(*run);
  if (!costs.ok()) return costs.status().with_context("--layout-costs-from");
  const GptConfig &theirs = *run->model, &ours = model;
  if (theirs.hidden_size != ours.hidden_size || theirs.num_heads != ours.num_heads ||
      theirs.seq_length != ours.seq_length || theirs.micro_batch_size != ours.micro_batch_size ||
      theirs.vocab_size != ours.vocab_size) {
    return Status::invalid_argument(fmt::format(
        "--layout-costs-from {}: that run trained hidden {}, heads {}, T={}, B={}, V={} but this "
        "one has hidden {}, heads {}, T={}, B={}, V={}; hint: measure the same model shape (the "
        "layer count may differ), or drop --layout-costs-from for the analytic costs",
        dir, theirs.hidden_size, theirs.num_heads, theirs.seq_length, theirs.micro_batch_size,
        theirs.vocab_size, ours.hidden_size, ours.num_heads, ours.seq_length, ours.micro_batch_size,
        ours.vocab_size));
  }
  if (theirs.precision != ours.precision) {  // bf16 speeds up the matmuls, not the rest
    return Status::invalid_argument(fmt::format(
        "--layout-costs-from {}: that run trained in {} but this one trains in {}; hint: measure "
        "a run of the same precision ({}), or drop --layout-costs-from for the analytic costs",
        dir, nn::precision_name(theirs.precision), nn::precision_name(ours.precision),
        ours.precision == nn::Precision::kBf16 ? "with --bf16" : "without --bf16"));
  }
  return costs;
}

// The tokenizer of the flags and the model's vocabulary: the tokenizer's, padded to a multiple
// of --make-vocab-size-divisible-by as Megatron-LM pads it (GPT-2's 50257 -> 50304; bytes: 256).
Result<std::pair<TokenizerOptions, int32_t>> model_vocabulary(const TokenizerFlags& flags,
                                                              int64_t divisible_by) {
  TP_RETURN_IF_ERROR(padded_vocab_size_flag(1, divisible_by).status());  // before any file
  TP_ASSIGN_OR_RETURN(TokenizerOptions options, flags.resolve());
  TP_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, make_tokenizer(options));
  TP_ASSIGN_OR_RETURN(const int64_t padded,
                      padded_vocab_size_flag(tokenizer->vocab_size(), divisible_by));
  if (padded > nn::kMaxVocabSize) {
    return Status::invalid_argument(fmt::format(
        "--make-vocab-size-divisible-by {}: pads the tokenizer's {} ids to {}, above the model's "
        "limit {}; hint: a smaller multiple",
        divisible_by, tokenizer->vocab_size(), padded, nn::kMaxVocabSize));
  }
  return std::pair{options, static_cast<int32_t>(padded)};
}

// `sample`'s tokenizer: the flags when given, else the checkpoint's tokenizer.json, else bytes
// (a checkpoint written before tokenizers were recorded).
Result<std::unique_ptr<Tokenizer>> sample_tokenizer(const TokenizerFlags& flags,
                                                    const std::string& dir) {
  if (flags.given()) {
    TP_ASSIGN_OR_RETURN(TokenizerOptions options, flags.resolve());
    return make_tokenizer(options);
  }
  const std::string path = (std::filesystem::path(dir) / nn::kTokenizerFile).string();
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) {
    return make_tokenizer(TokenizerOptions{});
  }
  TP_ASSIGN_OR_RETURN(std::string text,
                      read_input_file("tokenizer record", path, input_kind::kConfig));
  TP_ASSIGN_OR_RETURN(TokenizerOptions options, TokenizerOptions::from_json(text, path));
  auto tokenizer = make_tokenizer(options);
  if (!tokenizer.ok()) {
    return tokenizer.status().with_context(fmt::format(
        "the tokenizer recorded in {} (pass --tokenizer-type and its files to use others)",
        printable(path, 200)));
  }
  return tokenizer;
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app{
      "train the GPT model on --pp pipeline ranks with any schedule (vocabulary: the "
      "tokenizer's, padded; bytes by default)",
      "tightpipe train"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last one wins
  // Flags bind straight to the trainer's options; the pipeline group's flags go through
  // run_pipeline, which checks and converts them.
  TrainOptions o;
  o.eval_iters = 8;  // the CLI evaluates at the end by default
  float min_lr = 0;  // not given: lr / 10
  add_model_flags(app, o.model);
  app.add_option("--num-microbatches", o.microbatches, "microbatches per optimizer step M")
      ->capture_default_str();
  app.add_option("--train-iters", o.train_iters, "optimizer steps")->capture_default_str();
  app.add_option("--lr", o.lr.lr, "peak learning rate")->capture_default_str();
  auto* min_lr_flag =
      app.add_option("--min-lr", min_lr, "final learning rate of the cosine decay (default lr/10)");
  app.add_option("--lr-warmup-iters", o.lr.warmup_iters, "linear warm-up steps")
      ->capture_default_str();
  app.add_option("--weight-decay", o.adamw.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  app.add_flag("--enable-optimizer-post-validation,--optimizer-post-validation",
               o.optimizer_post_validation,
               "each rank steps at its own end from its own gradients and starts the next step; "
               "the global norm and inf/NaN check arrive during the next step, and a step that "
               "needed clipping is undone and redone (the zero-bubble runtime's flag; "
               "docs/post_validation.md)");
  app.add_option("--post-validation-stable-steps", o.post_validation_stable_steps,
                 "with --enable-optimizer-post-validation: post-validate a step only after this "
                 "many steps in a row needed no clipping (the others run synchronously)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--clip-grad", o.clip_grad, "global gradient-norm clip (0: off)")
      ->capture_default_str();
  app.add_flag("--check-for-nan-in-loss-and-grad,!--no-check-for-nan-in-loss-and-grad",
               o.check_for_nan,
               "stop at the first step whose loss or gradient norm is NaN/Inf, before its "
               "optimizer step, naming the stages and the microbatch (default on)");
  app.add_option("--seed", o.seed, "seed of the initial weights and the data sampler")
      ->capture_default_str();
  std::vector<std::string> data_words;  // of the last --data-path (an earlier one is replaced)
  app.add_option_function<std::vector<std::string>>(
         "--data-path", [&data_words](const std::vector<std::string>& w) { data_words = w; },
         "text file (train: first 90%, validation: last 10%), a .tar shard, a directory of "
         "shards, a pattern like 'dir/shard-{000000..000009}.tar', or Megatron-LM indexed "
         "datasets: PREFIX (PREFIX.bin/.idx) or a blend 'W1 PREFIX1 W2 PREFIX2 ...'")
      ->expected(1, -1)
      ->trigger_on_parse();
  app.add_option("--split", o.data.split_weights,
                 "indexed datasets: train, validation and test shares of each dataset's documents")
      ->capture_default_str();
  app.add_option("--eval-interval", o.eval_interval, "validation every N steps (0: at the end)")
      ->capture_default_str();
  app.add_option("--eval-iters", o.eval_iters, "validation microbatches (0: none)")
      ->capture_default_str();
  app.add_option("--log-interval", o.log_interval, "print every N steps")->capture_default_str();
  app.add_option("--out-dir", o.out_dir,
                 "directory for metrics.jsonl, summary.json, timeline_rank<R>.jsonl, schedule.csv");
  app.add_option(
      "--save", o.save_dir,
      "checkpoint root: DIR/iter_<step>/ per save, DIR/latest_checkpointed_iteration.txt");
  app.add_option("--save-interval", o.save_interval, "checkpoint every N steps (0: at the end)");
  app.add_option("--exit-interval", o.exit_interval,
                 "stop (saving with --save) at a multiple of N");
  app.add_option("--load", o.load_dir,
                 "resume from a --save root (its newest complete checkpoint) or an iter_* dir");
  app.add_option("--keep-last-checkpoints", o.keep_last_checkpoints,
                 "after each save keep only the newest K checkpoints of --save (0: all)")
      ->capture_default_str();
  app.add_option("--pp,--pipeline-model-parallel-size", o.pp, "pipeline stages")
      ->capture_default_str();
  app.add_option(
      "--data-parallel-size", o.data_parallel_size,
      "replicas of the pipeline, each on its own slice of the global batch of "
      "data-parallel-size x --num-microbatches microbatches (default: world size / --pp)");
  app.add_flag("--allow-other-data-parallel-size", o.allow_other_data_parallel_size,
               "with --load: accept a checkpoint saved at another data-parallel size (weights and "
               "optimizer state as saved; the data continues from the checkpoint's place in the "
               "global sample stream, in global batches of the new size)");
  app.add_flag("--overlap-grad-reduce", o.grad_reduce.overlap,
               "data parallel: start a stage's gradient all-reduce as soon as its last W (or B) of "
               "the step is done, overlapping the rest of the program (default: after it)");
  app.add_option("--bucket-size", o.grad_reduce.bucket_size,
                 "data parallel: gradient values per all-reduce")
      ->capture_default_str();
  app.add_option("--world-size", o.world_size,
                 "threads: ranks in all, --pp x data-parallel size (default: --pp x "
                 "--data-parallel-size); mpi: the process count (mpirun -np)");
  app.add_option("--pipeline-layout", o.pipeline_layout,
                 "explicit split, e.g. \"E,t*3|t*3|t*3|t*2,L\", or auto: the split with the "
                 "smallest simulated makespan of the schedule (default: balanced)");
  std::string layout_costs_dir;
  app.add_option("--layout-costs-from", layout_costs_dir,
                 "with --pipeline-layout auto: choose from the measured costs of this earlier "
                 "--out-dir run of the same model shape (default: analytic FLOPs)");
  app.add_option("--decoder-first-pipeline-num-layers", o.megatron_split.first_stage_layers,
                 "Megatron-LM: transformer layers of the first stage (the rest split evenly)");
  app.add_option("--decoder-last-pipeline-num-layers", o.megatron_split.last_stage_layers,
                 "Megatron-LM: transformer layers of the last stage (the rest split evenly)");
  app.add_flag("--account-for-embedding-in-pipeline-split", o.megatron_split.account_for_embedding,
               "Megatron-LM: the embedding counts as one layer of the first stage");
  app.add_flag("--account-for-loss-in-pipeline-split", o.megatron_split.account_for_loss,
               "Megatron-LM: the loss counts as one layer of the last stage");
  app.add_option("--recompute-granularity", o.recompute.granularity, "'full' to recompute");
  app.add_option("--recompute-method", o.recompute.method, "'uniform'")->capture_default_str();
  app.add_option("--recompute-num-layers", o.recompute.num_layers, "layers per recompute group")
      ->capture_default_str();
  bool bf16 = false, fp16 = false;
  app.add_flag("--bf16", bf16,
               "BF16 mixed precision (Megatron's flag): matmul inputs in bf16 with FP32 "
               "accumulation on oneDNN, FP32 master weights, gradients and AdamW moments; "
               "messages between ranks in bf16 (half the bytes)");
  app.add_flag("--fp16", fp16, "not supported (refused): use --bf16");
  app.add_option("--blas-threads", o.blas_threads,
                 "OpenBLAS threads of each rank (1 when several thread ranks share the process)")
      ->capture_default_str();
  TokenizerFlags tokenizer;
  add_tokenizer_flags(app, tokenizer);
  int64_t divisible_by = 128;
  app.add_option("--make-vocab-size-divisible-by", divisible_by,
                 "pad the tokenizer's vocabulary to a multiple of this (the model's vocabulary)")
      ->capture_default_str();
  PipelineFlags pf;
  add_pipeline_flags(app, pf);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (fp16) {  // also with --bf16: one precision, and it is not this one
    return report_error(
        "train", Status::invalid_argument("--fp16: not supported; hint: use --bf16 (bf16 needs no "
                                          "loss scaling)"));
  }
  o.model.precision = bf16 ? nn::Precision::kBf16 : nn::Precision::kFp32;
  // A flag that only tunes post-validation, given without it, would change nothing unsaid.
  if (app.get_option("--post-validation-stable-steps")->count() > 0 &&
      !o.optimizer_post_validation) {
    return report_error("train",
                        Status::invalid_argument(fmt::format(
                            "--post-validation-stable-steps {}: only runs with "
                            "--enable-optimizer-post-validation use it, and this run steps "
                            "synchronously; hint: add --enable-optimizer-post-validation, or drop "
                            "--post-validation-stable-steps",
                            o.post_validation_stable_steps)));
  }
  if (!data_words.empty()) {
    auto sources = parse_data_path(data_words);
    if (!sources.ok()) return report_error("train", sources.status());
    if (data_words.size() == 1) {
      o.data.path = data_words[0];
    } else {
      o.data.blend = std::move(*sources);
    }
  }
  auto vocab = model_vocabulary(tokenizer, divisible_by);
  if (!vocab.ok()) return report_error("train", vocab.status());
  o.tokenizer = vocab->first;
  o.model.vocab_size = vocab->second;
  // Only an absent --min-lr means lr/10: a given negative one is refused (LrSchedule::validate).
  o.lr.min_lr = min_lr_flag->count() == 0 ? o.lr.lr / 10 : min_lr;
  if (!layout_costs_dir.empty()) {
    auto costs = layout_costs_from(layout_costs_dir, o.model);
    if (!costs.ok()) return report_error("train", costs.status());
    o.layout_costs = std::move(*costs);
  }
  Status s = run_pipeline(o, pf);
  if (!s.ok()) return report_error("train", s);
  return kExitOk;
}

int cmd_sample(int argc, char** argv) {
  CLI::App app{"generate text from a checkpoint written by 'tightpipe train --save'",
               "tightpipe sample"};
  std::string load, prompt = "\n";
  int num_tokens = 200;
  float temperature = 0.8f;
  uint64_t seed = 1;
  app.add_option("--load", load, "a --save root (its newest complete checkpoint) or an iter_* dir")
      ->required();
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  app.add_option("--tokens", num_tokens, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", temperature, "softmax temperature (0: greedy)")
      ->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  TokenizerFlags tokenizer_flags;
  add_tokenizer_flags(app, tokenizer_flags);
  app.footer(
      "The tokenizer: the flags when given, else the one the checkpoint was trained with "
      "(tokenizer.json), else bytes.");
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto run = [&]() -> Status {
    if (prompt.empty()) {
      return Status::invalid_argument(
          "--prompt '': must not be empty; hint: text to continue, e.g. --prompt 'ROMEO:'");
    }
    if (num_tokens < 0 || num_tokens > kMaxSampleTokens) {
      return Status::invalid_argument(fmt::format(
          "--tokens {}: must be in [0, {}]; hint: tokens to generate, e.g. --tokens 200",
          num_tokens, kMaxSampleTokens));
    }
    if (!(std::isfinite(temperature) && temperature >= 0)) {
      return Status::invalid_argument(fmt::format(
          "--temperature {}: must be a finite number >= 0; hint: e.g. 0.8, or 0 for greedy",
          temperature));
    }
    nn::set_blas_threads(1);
    TP_ASSIGN_OR_RETURN(const nn::ResolvedCheckpoint ck, nn::resolve_checkpoint(load));
    for (const std::string& w : ck.warnings) std::fprintf(stderr, "%s\n", w.c_str());
    const nn::Manifest& m = ck.manifest;
    GptConfig c = m.config;
    c.micro_batch_size = 1;
    std::vector<GptStage> stages;
    for (const nn::StageSpec& s : m.stages) stages.emplace_back(c, s, 0);
    for (size_t s = 0; s < stages.size(); ++s) {
      TP_ASSIGN_OR_RETURN(
          auto st, nn::load_stage_checkpoint(nn::stage_checkpoint_path(ck.dir, int(s)), stages[s]));
      (void)st;
    }
    TP_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                        sample_tokenizer(tokenizer_flags, ck.dir));
    // Only the tokenizer's own ids are drawn: the padding rows of the LM head are never text.
    if (tokenizer->vocab_size() > c.vocab_size) {
      return Status::invalid_argument(fmt::format(
          "--load {}: the model has a vocabulary of {} but the tokenizer ({}) has {} ids; hint: "
          "sample with the tokenizer the model was trained with",
          ck.dir, c.vocab_size, tokenizer_type_name(tokenizer->type()), tokenizer->vocab_size()));
    }
    const int ids = tokenizer->vocab_size();
    std::vector<int32_t> ctx = tokenizer->encode(prompt);
    if (ctx.empty()) {
      return Status::invalid_argument(fmt::format(
          "--prompt '{}': encodes to no token; hint: a longer prompt", printable(prompt)));
    }
    Rng rng(seed);
    std::vector<int32_t> tokens(c.seq_length), targets(c.seq_length, 0);
    constexpr int kMb = 0;
    for (int i = 0; i < num_tokens; ++i) {
      const size_t n = std::min(ctx.size(), size_t(c.seq_length));
      std::fill(tokens.begin(), tokens.end(), 0);
      std::copy(ctx.end() - n, ctx.end(), tokens.begin());
      std::vector<float> p;
      if (stages.size() == 1) {
        p = nn::next_token_probs(stages[0], ctx);
      } else {  // chain the stages of a split checkpoint
        std::vector<float> act;
        for (size_t s = 0; s < stages.size(); ++s) {
          nn::StageOutput o =
              s == 0 ? stages[s].forward(kMb, std::span<const int32_t>(tokens))
                     : stages[s].forward(kMb, std::span<const float>(act),
                                         s + 1 == stages.size() ? std::span<const int32_t>(targets)
                                                                : std::span<const int32_t>(),
                                         0.0f);
          act.assign(o.activations.begin(), o.activations.end());
        }
        auto probs = stages.back().probs(kMb).subspan((n - 1) * c.vocab_size, c.vocab_size);
        p.assign(probs.begin(), probs.end());
        for (auto& s : stages) s.discard(kMb);
      }
      p.resize(static_cast<size_t>(ids));
      int next = 0;
      if (temperature <= 0) {
        next = int(std::max_element(p.begin(), p.end()) - p.begin());
      } else {
        double sum = 0;
        for (float& x : p) sum += (x = float(std::pow(double(x), 1.0 / temperature)));
        double u = rng.uniform_double() * sum;
        for (next = 0; next < ids - 1 && (u -= p[next]) > 0; ++next) {
        }
      }
      ctx.push_back(next);
    }
    TP_ASSIGN_OR_RETURN(std::string text, tokenizer->decode(ctx));
    std::fputs(text.c_str(), stdout);
    std::fputc('\n', stdout);
    return OkStatus();
  };
  Status s = run();
  if (!s.ok()) return report_error("sample", s);
  return kExitOk;
}

}  // namespace tightpipe::cli
