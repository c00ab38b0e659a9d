// The tokenizers behind make_tokenizer() (tokenizer.h), one file each: GPT-2's byte-level BPE
// (tokenizer_gpt2.cc) and SentencePiece (tokenizer_sentencepiece.cc). Internal to the data module.
#pragma once

#include <memory>
#include <string>

#include "tightpipe/status.h"
#include "tightpipe/tokenizer.h"

namespace tightpipe {

// GPT-2's byte-level BPE from vocab.json (token -> id) and merges.txt (merge ranks, an optional
// "#version" first line). Errors name the file and what disagrees.
Result<std::unique_ptr<Tokenizer>> make_gpt2_bpe_tokenizer(const std::string& vocab_file,
                                                           const std::string& merge_file);

// A SentencePiece model file (.model). Errors name the file and libsentencepiece's reason.
Result<std::unique_ptr<Tokenizer>> make_sentencepiece_tokenizer(const std::string& model_file);

}  // namespace tightpipe
