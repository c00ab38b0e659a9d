// tightpipe data: write WebDataset-style tar shards from text (shard), tokenize text into Megatron
// indexed datasets (preprocess), and read a data path through the loader to check it and measure
// its throughput (check).
#include <fmt/format.h>

#include <cstdio>

#include "commands.h"
#include "tightpipe/base.h"
#include "tightpipe/data.h"
#include "tightpipe/preprocess.h"
#include "tightpipe/shard.h"

namespace tightpipe::cli {

namespace {

int run_shard(const ShardWriterOptions& w) {
  auto summary = write_shards(w);
  if (!summary.ok()) return report_error("data shard", summary.status());
  std::printf("wrote %zu shards to %s: %lld samples, %lld tokens (%s), %s\n",
              summary->shards.size(), w.out_dir.c_str(), static_cast<long long>(summary->samples),
              static_cast<long long>(summary->tokens), summary->dtype.c_str(),
              human_bytes(static_cast<double>(summary->bytes)).c_str());
  if (!summary->shards.empty()) {
    std::printf("read them with --data-path '%s/shard-{000000..%06zu}.tar'\n", w.out_dir.c_str(),
                summary->shards.size() - 1);
  }
  return kExitOk;
}

int run_preprocess(const PreprocessOptions& p) {
  // Megatron's progress line, on stderr like its tools/preprocess_data.py.
  auto report = [](const PreprocessProgress& pr) {
    const double dt = pr.seconds > 0 ? pr.seconds : 1e-9;
    std::fprintf(stderr, "processed %lld documents (%.0f docs/s, %.2f MB/s)\n",
                 static_cast<long long>(pr.documents), static_cast<double>(pr.documents) / dt,
                 static_cast<double>(pr.bytes) / dt / (1 << 20));
  };
  auto summary = preprocess(p, report);
  if (!summary.ok()) return report_error("data preprocess", summary.status());
  const PreprocessSummary& s = *summary;
  report({s.documents, s.bytes, s.seconds});
  for (const std::string& prefix : s.prefixes) {
    std::printf("wrote %s.bin and %s.idx\n", prefix.c_str(), prefix.c_str());
  }
  std::printf(
      "%lld documents, %lld sequences, %lld tokens (%s) from %s in %.2f s with %d workers "
      "(Megatron-LM's --data-path %s)\n",
      static_cast<long long>(s.documents), static_cast<long long>(s.sequences),
      static_cast<long long>(s.tokens), std::string(indexed_dtype_name(s.dtype)).c_str(),
      human_bytes(static_cast<double>(s.bytes)).c_str(), s.seconds, p.workers,
      s.prefixes.empty() ? "" : s.prefixes.front().c_str());
  return kExitOk;
}

int run_check(const DataOptions& o, int64_t max_batches) {
  if (max_batches < 0) {
    return report_error("data check", Status::invalid_argument(fmt::format(
                                          "--max-batches {}: must be >= 0; hint: 0 reads one "
                                          "epoch, N stops after N batches",
                                          max_batches)));
  }
  auto opened = DataLoader::open(o);
  if (!opened.ok()) return report_error("data check", opened.status());
  DataLoader& loader = **opened;
  double t0 = now_seconds();
  int64_t batches = 0;
  Status error;
  // One epoch: the stream's (text, shards), or until a dataset of an indexed blend has given all
  // its samples once (its stream has no epochs of its own: DataPosition::epoch stays 0).
  while ((max_batches <= 0 || batches < max_batches) && loader.position().epoch == 0 &&
         loader.stats().epochs_completed == 0) {
    auto b = loader.next();
    if (!b.ok()) {
      error = b.status();
      break;
    }
    ++batches;
  }
  double dt = now_seconds() - t0;
  DataStats st = loader.stats();
  std::printf(
      "%s: %zu sources (split %s), %lld batches of %dx%d, %lld samples, %lld tokens in "
      "%.3f s = %.3g tokens/s (%d workers, waited %.3f s)\n",
      o.path.c_str(), loader.sources().size(), std::string(split_name(o.split)).c_str(),
      static_cast<long long>(batches), o.micro_batch_size, o.seq_length,
      static_cast<long long>(st.samples), static_cast<long long>(st.tokens), dt,
      dt > 0 ? static_cast<double>(st.tokens) / dt : 0.0, o.num_workers, st.wait_seconds);
  if (st.corrupt_skipped > 0) {
    std::printf("skipped %lld corrupt shards/samples (--on-corrupt skip):\n",
                static_cast<long long>(st.corrupt_skipped));
    for (const std::string& m : st.corrupt_messages) std::printf("  %s\n", m.c_str());
  }
  if (!error.ok()) return report_error("data check", error);
  return kExitOk;
}

}  // namespace

int cmd_data(int argc, char** argv) {
  CLI::App app(
      "Write WebDataset-style tar shards from text, tokenize text into Megatron-LM indexed "
      "datasets (.bin/.idx), or check a data path by reading it through the loader.",
      "tightpipe data");
  app.require_subcommand(1);

  ShardWriterOptions w;
  std::string shard_size;
  CLI::App* shard = app.add_subcommand(
      "shard",
      "tokenize text files into POSIX tar shards DIR/shard-000000.tar... ({key}.tokens "
      "little-endian uint16 + {key}.json)");
  shard->add_option("--input", w.inputs, "text file or directory (repeatable)")
      ->required()
      ->expected(1, -1);
  shard->add_option("--out", w.out_dir, "output directory")->required();
  auto* per = shard->add_option("--samples-per-shard", w.samples_per_shard,
                                "start a new shard after N samples");
  shard
      ->add_option("--shard-size", shard_size, "start a new shard before this size (default 64MiB)")
      ->excludes(per);
  shard->add_option("--tokenizer", w.tokenizer, "tokenizer")
      ->check(CLI::IsMember({"byte"}))
      ->capture_default_str();
  shard
      ->add_option("--seq-length", w.seq_length,
                   "T: each sample is T+1 tokens (0: one sample per input file)")
      ->capture_default_str();

  PreprocessOptions p;
  TokenizerFlags tokenizer;
  CLI::App* pre = app.add_subcommand(
      "preprocess",
      "tokenize .jsonl lines or plain text (one document per blank-line-separated paragraph) into "
      "PREFIX_KEY_document.bin/.idx, as Megatron-LM's tools/preprocess_data.py does");
  pre->add_option("--input", p.input,
                  "JSON lines (.jsonl/.json, one object per line) or plain text")
      ->required();
  pre->add_option("--json-keys", p.json_keys, "JSON keys to tokenize, one dataset each")
      ->expected(1, -1)
      ->capture_default_str();
  pre->add_option("--output-prefix", p.output_prefix,
                  "writes OUTPUT_PREFIX_KEY_document.bin/.idx (directory must exist)")
      ->required();
  add_tokenizer_flags(*pre, tokenizer);
  pre->get_option("--tokenizer-type")->required();
  pre->add_flag("--append-eod", p.append_eod, "append the end-of-document token to each document");
  pre->add_option("--workers", p.workers,
                  "tokenizing threads (the output is the same for any number)")
      ->capture_default_str();
  pre->add_option("--log-interval", p.log_interval, "documents between progress lines")
      ->capture_default_str();

  DataOptions o;
  o.split = Split::kAll;
  o.shuffle_buffer = 0;
  o.seq_length = 1023;
  int64_t max_batches = 0;
  std::string split = "all", on_corrupt = "fail";
  CLI::App* check =
      app.add_subcommand("check",
                         "read one epoch of a data path through the loader: validates every shard, "
                         "reports tokens/s and what --on-corrupt skip skipped");
  check
      ->add_option("--data-path", o.path,
                   "text file, shard, directory of shards, 'DIR/shard-{000000..000009}.tar' or an "
                   "indexed dataset PREFIX (with the --tokenizer-type that wrote it)")
      ->required();
  check->add_option("--num-workers", o.num_workers, "decoding threads")->capture_default_str();
  check->add_option("--prefetch", o.prefetch, "batches each worker decodes ahead")
      ->capture_default_str();
  check->add_option("--batch-size", o.micro_batch_size, "B")->capture_default_str();
  check->add_option("--seq-length", o.seq_length, "T")->capture_default_str();
  check->add_option("--split", split, "train, val or all")->capture_default_str();
  check->add_option("--on-corrupt", on_corrupt, "fail or skip")->capture_default_str();
  check->add_option("--max-batches", max_batches, "stop after N batches (0: one epoch)");
  TokenizerFlags check_tokenizer;  // every id must be below its vocabulary (bytes: 256)
  add_tokenizer_flags(*check, check_tokenizer);

  if (int rc = parse_or_exit(app, argc, argv); rc >= 0) return rc;

  if (shard->parsed()) {
    if (!shard_size.empty()) {
      auto bytes = parse_byte_size(shard_size);
      if (!bytes.ok())
        return report_error("data shard", bytes.status().with_context("--shard-size"));
      w.shard_size = *bytes;
    }
    return run_shard(w);
  }
  if (pre->parsed()) {
    auto options = tokenizer.resolve();
    if (!options.ok()) return report_error("data preprocess", options.status());
    p.tokenizer = *options;
    return run_preprocess(p);
  }
  auto sp = parse_split(split);
  if (!sp.ok()) return report_error("data check", sp.status());
  o.split = *sp;
  auto oc = parse_on_corrupt(on_corrupt);
  if (!oc.ok()) return report_error("data check", oc.status());
  o.on_corrupt = *oc;
  auto options = check_tokenizer.resolve();
  if (!options.ok()) return report_error("data check", options.status());
  auto check_tok = make_tokenizer(*options);
  if (!check_tok.ok()) return report_error("data check", check_tok.status());
  o.vocab_size = (*check_tok)->vocab_size();
  return run_check(o, max_batches);
}

}  // namespace tightpipe::cli
