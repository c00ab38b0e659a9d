// tokenize_bench: GPT-2 BPE encode speed on a corpus (default tiny Shakespeare, its blank-line
// paragraphs as documents, as `data preprocess` reads plain text): MB/s with 1 thread, then with
// 2 threads each encoding the whole corpus at the same time (per thread and in all). Each thread
// starts with an empty word cache; --repeat passes per thread.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <thread>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/tokenizer.h"

using namespace tightpipe;

int main(int argc, char** argv) {
  CLI::App app("GPT-2 BPE encode MB/s for 1 and 2 threads", "tokenize_bench");
  std::string data = std::string(TP_SHARED_DIR) + "/data";
  std::string text_file = data + "/tinyshakespeare.txt";
  TokenizerOptions options;
  options.type = TokenizerType::kGpt2Bpe;
  options.vocab_file = data + "/gpt2/vocab.json";
  options.merge_file = data + "/gpt2/merges.txt";
  int repeat = 3;
  app.add_option("--text", text_file, "corpus to encode")->capture_default_str();
  app.add_option("--vocab-file", options.vocab_file, "GPT-2 vocab.json")->capture_default_str();
  app.add_option("--merge-file", options.merge_file, "GPT-2 merges.txt")->capture_default_str();
  app.add_option("--repeat", repeat, "passes over the corpus per thread")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  if (int rc = bench::parse_bench_flags(app, argc, argv); rc >= 0) return rc;

  auto text = read_file(text_file);
  if (!text.ok()) {
    fmt::print(stderr, "tokenize_bench: {}\n", text.status().to_string());
    return 1;
  }
  auto tokenizer = make_tokenizer(options);
  if (!tokenizer.ok()) {
    fmt::print(stderr, "tokenize_bench: {}\n", tokenizer.status().to_string());
    return 1;
  }
  const std::vector<std::string_view> docs = split_paragraphs(*text);
  const double mb = static_cast<double>(text->size()) * repeat / 1e6;
  fmt::print("corpus {} ({} bytes, {} documents), {} passes per thread\n", text_file, text->size(),
             docs.size(), repeat);
  for (int threads : {1, 2}) {
    std::vector<double> seconds(threads);
    std::vector<int64_t> tokens(threads, 0);
    std::vector<std::thread> pool;
    const double start = now_seconds();
    for (int k = 0; k < threads; ++k) {
      pool.emplace_back([&, k] {
        const double t0 = now_seconds();
        for (int r = 0; r < repeat; ++r) {
          for (std::string_view doc : docs) {
            tokens[k] += static_cast<int64_t>((*tokenizer)->encode(doc).size());
          }
        }
        seconds[k] = now_seconds() - t0;
      });
    }
    for (auto& t : pool) t.join();
    const double wall = now_seconds() - start;
    for (int k = 0; k < threads; ++k) {
      fmt::print("threads {}: thread {} {:.1f} MB/s ({} tokens in {:.2f} s)\n", threads, k,
                 mb / seconds[k], tokens[k], seconds[k]);
    }
    fmt::print("threads {}: all {:.1f} MB/s\n", threads, mb * threads / wall);
  }
  return 0;
}
