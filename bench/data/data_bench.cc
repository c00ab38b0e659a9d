// data_bench: can the loader keep the first stage fed? Prints, from one run:
//   1. loader throughput in tokens/s for 1, 2 and 4 workers, reading shards of tinyshakespeare
//      written by write_shards (and the plain text file), B=8 T=128, shuffle buffer 1024;
//   2. the tokens/s the tiny training config (4 layers, C=128, T=128, B=8, one rank, F+B+AdamW)
//      consumes, measured with nn::train_step;
//   3. a real loop (loader.next() then train_step) with the data wait as a share of step time.
// The reader/consumer ratio is the headroom: above 1 the loader is not the bottleneck.
#include <fmt/format.h>

#include <cstdio>
#include <filesystem>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/model.h"
#include "tightpipe/shard.h"

using namespace tightpipe;

namespace {

struct ReadResult {
  double tokens_per_s = 0;
  double wait_share = 0;  // time next() blocked / total time
};

ReadResult measure_reader(const DataOptions& o, int64_t tokens_wanted) {
  auto l = DataLoader::open(o);
  TP_CHECK(l.ok(), l.status().to_string());
  TP_CHECK((*l)->next().ok());  // start-up (first shards opened) is not steady state
  const double t0 = now_seconds();
  const double w0 = (*l)->stats().wait_seconds;
  int64_t tokens = 0;
  while (tokens < tokens_wanted) {
    auto b = (*l)->next();
    TP_CHECK(b.ok(), b.status().to_string());
    tokens += static_cast<int64_t>(b->tokens.size());
  }
  const double dt = now_seconds() - t0;
  return {static_cast<double>(tokens) / dt, ((*l)->stats().wait_seconds - w0) / dt};
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags("loader tokens/s vs the tiny config's training tokens/s", "data_bench");
  std::string text = std::string(TP_SHARED_DIR) + "/data/tinyshakespeare.txt";
  int64_t read_tokens = 4'000'000;
  int train_steps = 20;
  flags.option("--text", text, "text to shard").show_default();
  flags.option("--read-tokens", read_tokens, "tokens read per reader measurement").show_default();
  flags.option("--train-steps", train_steps, "measured training steps").show_default();
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;

  const std::string dir = std::string(TP_BINARY_DIR) + "/data_bench_shards";
  std::filesystem::remove_all(dir);
  ShardWriterOptions w;
  w.inputs = {text};
  w.out_dir = dir;
  w.seq_length = 128;
  w.shard_size = 1 << 20;
  double t0 = now_seconds();
  auto written = write_shards(w);
  TP_CHECK(written.ok(), written.status().to_string());
  double write_s = now_seconds() - t0;
  std::printf("wrote %zu shards (%lld samples of <= 129 tokens, %s) in %.2f s = %.3g tokens/s\n",
              written->shards.size(), static_cast<long long>(written->samples),
              human_bytes(static_cast<double>(written->bytes)).c_str(), write_s,
              static_cast<double>(written->tokens) / write_s);

  // 2. Consumption rate of the tiny config, measured first so the table can show ratios.
  nn::GptConfig cfg;  // V=256, T=128, L=4, C=128, NH=4, B=8: the tiny config
  nn::StageSpec whole{0, cfg.num_layers, true, true};
  nn::GptStage model(cfg, whole, 1234);
  nn::AdamWConfig adam;
  DataOptions o;
  o.path = dir;
  o.split = Split::kTrain;
  o.micro_batch_size = cfg.micro_batch_size;
  o.seq_length = cfg.seq_length;
  o.shuffle_buffer = 1024;
  auto warm = DataLoader::open(o);
  TP_CHECK(warm.ok());
  auto batch = (*warm)->next();
  TP_CHECK(batch.ok());
  nn::MicroBatch mb{batch->tokens, batch->targets};
  for (int i = 0; i < 3; ++i) nn::train_step(model, {&mb, 1}, adam, 1e-3f, 1.0f);
  t0 = now_seconds();
  for (int i = 0; i < train_steps; ++i) nn::train_step(model, {&mb, 1}, adam, 1e-3f, 1.0f);
  const double step_s = (now_seconds() - t0) / train_steps;
  const double consume = static_cast<double>(cfg.tokens_per_microbatch()) / step_s;
  std::printf(
      "tiny config (L=4 C=128 T=128 B=8, one rank, F+B+AdamW): %.1f ms/step = %.0f "
      "tokens/s consumed\n\n",
      step_s * 1e3, consume);

  // 1. Reader throughput.
  std::printf("%-34s %8s %14s %12s %10s\n", "reader (B=8 T=128, shuffle 1024)", "workers",
              "tokens/s", "x consumed", "wait");
  for (const char* kind : {"shards", "text"}) {
    for (int32_t workers : {1, 2, 4}) {
      DataOptions r = o;
      r.num_workers = workers;
      if (std::string(kind) == "text") r.path = text;
      ReadResult res = measure_reader(r, read_tokens);
      std::printf("%-34s %8d %14.3g %12.0f %9.0f%%\n",
                  std::string(kind) == "text" ? "plain text file" : "tar shards (1 MiB)", workers,
                  res.tokens_per_s, res.tokens_per_s / consume, 100 * res.wait_share);
    }
  }

  // 3. The real loop: next() then a training step; the data wait as a share of step time.
  o.num_workers = 2;
  auto l = DataLoader::open(o);
  TP_CHECK(l.ok());
  double first_wait = 0, wait = 0;
  t0 = now_seconds();
  double t_first = 0;
  for (int i = 0; i <= train_steps; ++i) {
    auto b = (*l)->next();
    TP_CHECK(b.ok(), b.status().to_string());
    if (i == 0) {
      first_wait = (*l)->stats().last_wait_seconds;
    } else {
      wait += (*l)->stats().last_wait_seconds;
    }
    nn::MicroBatch m{b->tokens, b->targets};
    nn::train_step(model, {&m, 1}, adam, 1e-3f, 1.0f);
    if (i == 0) t_first = now_seconds();
  }
  const double total = now_seconds() - t_first;
  std::printf(
      "\ntraining loop (next() then train_step), 2 workers: first batch waited %.1f ms "
      "(start-up: filling the 1024-sample shuffle buffer); then %d steps: data wait "
      "%.3f ms of %.1f ms = %.3f%% of step time\n",
      first_wait * 1e3, train_steps, wait * 1e3, total * 1e3, 100 * wait / total);
  std::filesystem::remove_all(dir);
  return 0;
}
