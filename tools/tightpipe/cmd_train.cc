// tightpipe train / tightpipe sample.
//
// train --pp 1: single-rank training of the GPT model on a text file (byte tokenizer, vocab 256),
// Megatron flag spelling, one JSON object per step in --out-dir/metrics.jsonl. Pipeline sizes other
// than 1 are validated (layout, layers vs stages) and then refused until the executor lands.
// sample: next-token sampling from a checkpoint written by train --save.
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "train_pipeline.h"
#include "tightpipe/base.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/kernels.h"
#include "tightpipe/model.h"
#include "tightpipe/optimizer.h"

namespace tightpipe::cli {
namespace {
using nn::GptConfig;
using nn::GptStage;

// ---- data: the one function to swap for the DataLoader (include/tightpipe/data.h) -------------
// A text file as bytes; train = the first 90%, validation = the last 10%. Training windows are
// drawn uniformly at random with a seeded Rng (its state goes into checkpoints); validation
// windows are fixed and evenly spaced, so evaluations are comparable across steps.
struct TextBatches {
  std::string text;
  size_t train_end = 0;
  Rng rng{0};
  int T = 0;
  int B = 0;

  void fill(std::string_view split, size_t start, std::vector<int32_t>& tokens,
            std::vector<int32_t>& targets, int row) const {
    for (int t = 0; t < T; ++t) {
      tokens[size_t(row) * T + t] = static_cast<unsigned char>(split[start + t]);
      targets[size_t(row) * T + t] = static_cast<unsigned char>(split[start + t + 1]);
    }
  }
  // One microbatch (B*T tokens and targets) from the training split.
  void next_train(std::vector<int32_t>& tokens, std::vector<int32_t>& targets) {
    const std::string_view train = std::string_view(text).substr(0, train_end);
    tokens.resize(size_t(B) * T);
    targets.resize(size_t(B) * T);
    for (int b = 0; b < B; ++b) fill(train, rng.below(train.size() - T), tokens, targets, b);
  }
  // Microbatch i of n fixed validation microbatches.
  void val(int i, int n, std::vector<int32_t>& tokens, std::vector<int32_t>& targets) const {
    const std::string_view v = std::string_view(text).substr(train_end);
    tokens.resize(size_t(B) * T);
    targets.resize(size_t(B) * T);
    const size_t windows = size_t(n) * B, span = v.size() - T - 1;
    for (int b = 0; b < B; ++b) {
      const size_t k = size_t(i) * B + b;
      fill(v, windows > 1 ? span * k / (windows - 1) : 0, tokens, targets, b);
    }
  }
};

Result<TextBatches> open_text_batches(const std::string& path, int B, int T, uint64_t seed) {
  if (path.empty()) {
    return Status::invalid_argument(
        "--data-path is required; hint: e.g. --data-path ../shared/data/tinyshakespeare.txt");
  }
  auto read = read_file(path);
  if (!read.ok()) {
    return Status(read.status().code(),
                  fmt::format("--data-path: {}; hint: pass a text file, e.g. "
                              "../shared/data/tinyshakespeare.txt",
                              read.status().message()));
  }
  TextBatches d;
  d.text = std::move(*read);
  if (d.text.empty()) {
    return Status::invalid_argument(fmt::format(
        "--data-path '{}' is empty; hint: pass a text file with at least {} bytes", path,
        10 * (T + 2)));
  }
  d.train_end = d.text.size() - d.text.size() / 10;
  const size_t val_size = d.text.size() - d.train_end;
  if (d.train_end < size_t(T) + 1 || val_size < size_t(T) + 1) {
    return Status::invalid_argument(fmt::format(
        "--data-path '{}' has {} bytes; its validation split (the last 10%, {} bytes) needs at "
        "least --seq-length + 1 = {}; hint: use a file of at least {} bytes or a smaller "
        "--seq-length",
        path, d.text.size(), val_size, T + 1, 10 * (T + 2)));
  }
  d.rng = Rng(seed).fork(0xda7a);
  d.B = B;
  d.T = T;
  return d;
}

struct TrainFlags {
  GptConfig model;
  int num_microbatches = 1;
  int64_t train_iters = 100;
  nn::LrSchedule lr;
  float min_lr = -1;  // < 0: lr / 10
  nn::AdamWConfig adam;
  float clip_grad = 1.0f;
  uint64_t seed = 1234;
  std::string data_path;
  int64_t eval_interval = 0;  // 0: only at the end
  int eval_iters = 8;
  int64_t log_interval = 10;
  std::string out_dir, save, load;
  int64_t save_interval = 0;  // 0: only at the end
  int64_t exit_interval = 0;  // > 0: stop (and save) once the step count is a multiple of it
  int pp = 1;
  std::string pipeline_layout;
  nn::RecomputeOptions recompute;
  int blas_threads = 1;
};

void add_model_flags(CLI::App& app, GptConfig& m) {
  app.add_option("--num-layers", m.num_layers, "transformer layers L")->capture_default_str();
  app.add_option("--hidden-size", m.hidden_size, "hidden size C")->capture_default_str();
  app.add_option("--num-attention-heads", m.num_heads, "attention heads NH")->capture_default_str();
  app.add_option("--seq-length", m.seq_length, "sequence length T")->capture_default_str();
  app.add_option("--micro-batch-size", m.micro_batch_size, "microbatch size B")
      ->capture_default_str();
}

Status run_train(TrainFlags f) {
  TP_RETURN_IF_ERROR(f.model.validate());
  TP_RETURN_IF_ERROR(f.recompute.validate());
  if (f.pp < 1) return Status::invalid_argument(fmt::format("--pp must be >= 1, got {}", f.pp));
  TP_ASSIGN_OR_RETURN(auto specs, nn::partition_layers(f.model, f.pp, f.pipeline_layout));
  if (f.pp != 1) {
    return Status::failed_precondition(fmt::format(
        "--pp {} (layout '{}') is not supported by this build yet; hint: use --pp 1 for "
        "single-rank training",
        f.pp, nn::format_layout(specs)));
  }
  if (f.num_microbatches < 1)
    return Status::invalid_argument(
        fmt::format("--num-microbatches must be >= 1, got {}", f.num_microbatches));
  if (f.eval_iters < 1)
    return Status::invalid_argument(fmt::format("--eval-iters must be >= 1, got {}", f.eval_iters));
  f.lr.total_iters = f.train_iters;
  f.lr.min_lr = f.min_lr < 0 ? f.lr.lr / 10 : f.min_lr;
  TP_RETURN_IF_ERROR(f.lr.validate());
  TP_RETURN_IF_ERROR(f.adam.validate());
  nn::set_blas_threads(f.blas_threads);

  TP_ASSIGN_OR_RETURN(TextBatches data, open_text_batches(f.data_path, f.model.micro_batch_size,
                                                          f.model.seq_length, f.seed));
  GptStage model(f.model, specs[0], f.seed, f.recompute);
  GptStage* const stages[] = {&model};
  int64_t start = 0;
  if (!f.load.empty()) {
    TP_ASSIGN_OR_RETURN(nn::CheckpointState st, nn::load_checkpoint(f.load, stages));
    start = st.step;
    data.rng.set_state(st.rng_state);
    std::printf("loaded %s at step %lld\n", f.load.c_str(), static_cast<long long>(start));
  }
  std::FILE* metrics = nullptr;
  if (!f.out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(f.out_dir, ec);
    const std::string path = (std::filesystem::path(f.out_dir) / "metrics.jsonl").string();
    metrics = std::fopen(path.c_str(), start > 0 ? "a" : "w");
    if (metrics == nullptr)
      return Status::io_error(fmt::format("--out-dir: cannot write '{}'", path));
  }
  struct Closer {
    std::FILE* f;
    ~Closer() {
      if (f) std::fclose(f);
    }
  } closer{metrics};

  const int B = f.model.micro_batch_size, T = f.model.seq_length, M = f.num_microbatches;
  std::printf("model: %d layers, hidden %d, %d heads, T=%d, vocab %d, %zu parameters; B=%d, "
              "M=%d (%lld tokens/step); %s\n",
              f.model.num_layers, f.model.hidden_size, f.model.num_heads, T,
              f.model.vocab_size, model.num_params(), B, M, static_cast<long long>(int64_t(B) * T * M),
              f.recompute.enabled() ? fmt::format("recompute full/uniform/{}", f.recompute.num_layers).c_str() : "no recompute");
  std::vector<std::vector<int32_t>> tok(M), tgt(M);
  std::vector<nn::MicroBatch> mbs(M);
  auto evaluate = [&] {
    std::vector<int32_t> vt, vy;
    std::vector<std::vector<int32_t>> et(f.eval_iters), ey(f.eval_iters);
    std::vector<nn::MicroBatch> ev(f.eval_iters);
    for (int i = 0; i < f.eval_iters; ++i) {
      data.val(i, f.eval_iters, et[i], ey[i]);
      ev[i] = {et[i], ey[i]};
    }
    return nn::evaluate_loss(model, ev);
  };
  auto save = [&](int64_t step) -> Status {
    TP_RETURN_IF_ERROR(nn::save_checkpoint(f.save, stages, {step, data.rng.state()}));
    std::printf("saved %s at step %lld\n", f.save.c_str(), static_cast<long long>(step));
    return OkStatus();
  };
  double val_loss = NAN;
  for (int64_t step = start + 1; step <= f.train_iters; ++step) {
    for (int i = 0; i < M; ++i) {
      data.next_train(tok[i], tgt[i]);
      mbs[i] = {tok[i], tgt[i]};
    }
    const float lr = nn::lr_at(f.lr, step - 1);
    const double t0 = now_seconds();
    const nn::TrainStepResult r = nn::train_step(model, mbs, f.adam, lr, f.clip_grad);
    const double dt = now_seconds() - t0;
    if (!std::isfinite(r.loss)) {
      return Status::failed_precondition(fmt::format(
          "the loss became {} at step {}; hint: lower --lr or set --clip-grad", r.loss, step));
    }
    nlohmann::json j = {{"step", step},      {"loss", r.loss},        {"tokens_per_s", double(B) * T * M / dt},
                        {"lr", lr},          {"grad_norm", r.grad_norm}, {"step_ms", dt * 1e3},
                        {"peak_stash_bytes", model.peak_stash_bytes()}};
    const bool eval_now =
        step == f.train_iters || (f.eval_interval > 0 && step % f.eval_interval == 0);
    if (eval_now) {
      val_loss = evaluate();
      j["val_loss"] = val_loss;
    }
    if (metrics) std::fprintf(metrics, "%s\n", j.dump().c_str());
    if (step == start + 1 || step % f.log_interval == 0 || eval_now) {
      std::printf("step %5lld | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tokens/s%s\n",
                  static_cast<long long>(step), r.loss, lr, r.grad_norm, double(B) * T * M / dt,
                  eval_now ? fmt::format(" | val_loss {:.4f}", val_loss).c_str() : "");
      std::fflush(stdout);
    }
    if (f.exit_interval > 0 && step % f.exit_interval == 0 && step != f.train_iters) {
      if (!f.save.empty()) TP_RETURN_IF_ERROR(save(step));
      std::printf("exit at step %lld (--exit-interval)\n", static_cast<long long>(step));
      return OkStatus();
    }
    if (!f.save.empty() && f.save_interval > 0 && step % f.save_interval == 0 && step != f.train_iters)
      TP_RETURN_IF_ERROR(save(step));
  }
  if (!f.save.empty()) TP_RETURN_IF_ERROR(save(std::max(start, f.train_iters)));
  return OkStatus();
}

}  // namespace

int cmd_train(int argc, char** argv) {
  CLI::App app{"train the GPT model (byte-level, vocab 256) on a text file", "tightpipe train"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // last one wins
  TrainFlags f;
  add_model_flags(app, f.model);
  app.add_option("--num-microbatches", f.num_microbatches, "microbatches per optimizer step M")
      ->capture_default_str();
  app.add_option("--train-iters", f.train_iters, "optimizer steps")->capture_default_str();
  app.add_option("--lr", f.lr.lr, "peak learning rate")->capture_default_str();
  app.add_option("--min-lr", f.min_lr, "final learning rate of the cosine decay (default lr/10)");
  app.add_option("--lr-warmup-iters", f.lr.warmup_iters, "linear warm-up steps")
      ->capture_default_str();
  app.add_option("--weight-decay", f.adam.weight_decay, "AdamW decoupled weight decay")
      ->capture_default_str();
  app.add_option("--clip-grad", f.clip_grad, "global gradient-norm clip (0: off)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "seed of the initial weights and the data sampler")
      ->capture_default_str();
  app.add_option("--data-path", f.data_path, "text file (train: first 90%, validation: last 10%)");
  app.add_option("--eval-interval", f.eval_interval, "validation every N steps (0: at the end)")
      ->capture_default_str();
  app.add_option("--eval-iters", f.eval_iters, "validation microbatches")->capture_default_str();
  app.add_option("--log-interval", f.log_interval, "print every N steps")->capture_default_str();
  app.add_option("--out-dir", f.out_dir, "directory for metrics.jsonl");
  app.add_option("--save", f.save, "checkpoint directory to write");
  app.add_option("--save-interval", f.save_interval, "checkpoint every N steps (0: at the end)");
  app.add_option("--exit-interval", f.exit_interval, "stop (saving with --save) at a multiple of N");
  app.add_option("--load", f.load, "checkpoint directory to resume from");
  app.add_option("--pp,--pipeline-model-parallel-size", f.pp, "pipeline stages")
      ->capture_default_str();
  app.add_option("--pipeline-layout", f.pipeline_layout,
                 "explicit split, e.g. \"E,t*3|t*3|t*3|t*2,L\" (default: balanced)");
  app.add_option("--recompute-granularity", f.recompute.granularity, "'full' to recompute");
  app.add_option("--recompute-method", f.recompute.method, "'uniform'")->capture_default_str();
  app.add_option("--recompute-num-layers", f.recompute.num_layers, "layers per recompute group")
      ->capture_default_str();
  app.add_option("--blas-threads", f.blas_threads, "OpenBLAS threads")->capture_default_str();
  PipelineFlags pf;
  add_pipeline_flags(app, pf);
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  if (wants_pipeline(pf, f.pp, f.data_path)) {  // any schedule on P ranks: the executor (src/exec)
    TrainOptions o;
    o.model = f.model;
    o.pipeline_layout = f.pipeline_layout;
    o.recompute = f.recompute;
    o.pp = f.pp;
    o.microbatches = f.num_microbatches;
    o.train_iters = f.train_iters;
    o.lr = f.lr;
    o.lr.min_lr = f.min_lr < 0 ? f.lr.lr / 10 : f.min_lr;
    o.adamw = f.adam;
    o.clip_grad = f.clip_grad;
    o.seed = f.seed;
    o.data.path = f.data_path;
    o.eval_interval = f.eval_interval;
    o.eval_iters = f.eval_iters;
    o.out_dir = f.out_dir;
    o.save_dir = f.save;
    o.load_dir = f.load;
    o.save_interval = f.save_interval;
    o.exit_interval = f.exit_interval;
    Status s = run_pipeline(o, pf);
    if (!s.ok()) return report_error("train", s);
    return kExitOk;
  }
  Status s = run_train(f);
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
  app.add_option("--load", load, "checkpoint directory")->required();
  app.add_option("--prompt", prompt, "text to continue")->capture_default_str();
  app.add_option("--tokens", num_tokens, "bytes to generate")->capture_default_str();
  app.add_option("--temperature", temperature, "softmax temperature (0: greedy)")
      ->capture_default_str();
  app.add_option("--seed", seed, "sampling seed")->capture_default_str();
  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;
  auto run = [&]() -> Status {
    if (prompt.empty()) return Status::invalid_argument("--prompt must not be empty");
    nn::set_blas_threads(1);
    TP_ASSIGN_OR_RETURN(nn::Manifest m, nn::load_manifest(load));
    GptConfig c = m.config;
    c.micro_batch_size = 1;
    std::vector<GptStage> stages;
    for (const nn::StageSpec& s : m.stages) stages.emplace_back(c, s, 0);
    for (size_t s = 0; s < stages.size(); ++s) {
      TP_ASSIGN_OR_RETURN(auto st, nn::load_stage_checkpoint(nn::stage_checkpoint_path(load, int(s)),
                                                             stages[s]));
      (void)st;
    }
    std::vector<int32_t> ctx;
    for (unsigned char ch : prompt) ctx.push_back(ch);
    Rng rng(seed);
    std::fputs(prompt.c_str(), stdout);
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
      int next = 0;
      if (temperature <= 0) {
        next = int(std::max_element(p.begin(), p.end()) - p.begin());
      } else {
        double sum = 0;
        for (float& x : p) sum += (x = float(std::pow(double(x), 1.0 / temperature)));
        double u = rng.uniform_double() * sum;
        for (next = 0; next < c.vocab_size - 1 && (u -= p[next]) > 0; ++next) {
        }
      }
      ctx.push_back(next);
      std::fputc(next, stdout);
    }
    std::fputc('\n', stdout);
    return OkStatus();
  };
  Status s = run();
  if (!s.ok()) return report_error("sample", s);
  return kExitOk;
}

}  // namespace tightpipe::cli
