// `tightpipe data preprocess`: text -> tokens -> Megatron indexed datasets (indexed_dataset.h), as
// Megatron-LM's tools/preprocess_data.py does it, with the same flags and the same output bytes.
//
// Input: a JSON-lines file (name ending .jsonl or .json: one JSON object per line, each
// --json-keys value a string, or a list of strings that become one sequence each; blank lines are
// skipped) or plain text, whose documents are split_paragraphs() of the whole file (tokenizer.h:
// the pieces between "\n\n", Megatron's tiny Shakespeare documents). Each key K gives
// `PREFIX_K_document.bin/.idx`; plain text is key "text". A document's non-empty sequences are
// written in input order, the end-of-document id appended to its last one with append_eod
// (Megatron's Encoder.encode); a document with no tokens is an empty document.
//
// Workers: the input is cut into blocks of records read by the calling thread, tokenized by
// `workers` threads and written in input order, so the output bytes do not depend on `workers`.
// preprocess() is thread-compatible; the progress callback runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tightpipe/indexed_dataset.h"
#include "tightpipe/status.h"
#include "tightpipe/tokenizer.h"

namespace tightpipe {

struct PreprocessOptions {
  std::string input;                           // .jsonl/.json lines, or plain text
  std::vector<std::string> json_keys{"text"};  // JSON input: the keys to tokenize, one dataset each
  std::string output_prefix;                   // writes OUTPUT_PREFIX_KEY_document.{bin,idx}
  TokenizerOptions tokenizer;                  // --tokenizer-type and its files
  bool append_eod = false;                     // append the tokenizer's end-of-document id
  int32_t workers = 1;                         // tokenizing threads, >= 1
  int64_t log_interval = 1000;                 // a progress report every N documents, >= 1

  // InvalidArgument naming the flag: no input or output prefix, workers or log_interval < 1, no
  // or an empty or repeated json key, --json-keys other than "text" with plain text, and what
  // TokenizerOptions::validate() refuses.
  Status validate() const;
};

// True when preprocess() reads `path` as JSON lines (it ends in .jsonl or .json).
bool is_json_lines_path(std::string_view path);
// PREFIX_KEY_document (Megatron's name: prefix, key, level).
std::string preprocess_output_prefix(std::string_view output_prefix, std::string_view key);

struct PreprocessProgress {
  int64_t documents = 0;  // records done (JSON lines or paragraphs)
  int64_t bytes = 0;      // input bytes done
  double seconds = 0;     // since the start
};

struct PreprocessSummary {
  std::vector<std::string> prefixes;  // one dataset per key, in --json-keys order
  IndexedDtype dtype = IndexedDtype::kUint16;
  int64_t documents = 0;  // records (per dataset)
  int64_t sequences = 0;  // over all datasets
  int64_t tokens = 0;     // over all datasets
  int64_t bytes = 0;      // input bytes read
  double seconds = 0;
};

// Errors: InvalidArgument (options; --append-eod with a tokenizer that has no end-of-document
// id; a JSON line that is not an object, lacks a key or holds something other than a string or a
// list of strings: naming the input, the line number and the key), NotFound (input or tokenizer
// files), Corruption (a line that is not JSON), IOError (reading the input; creating or writing
// the outputs, naming the file). On error no output file is left (only the *.tmp are written).
Result<PreprocessSummary> preprocess(
    const PreprocessOptions& options,
    const std::function<void(const PreprocessProgress&)>& progress = {});

}  // namespace tightpipe
