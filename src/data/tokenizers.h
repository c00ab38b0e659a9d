// The tokenizers behind make_tokenizer() (tokenizer.h), one file each: GPT-2's byte-level BPE
// (tokenizer_gpt2.cc) and SentencePiece (tokenizer_sentencepiece.cc). Internal to the data module.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "tightpipe/status.h"
#include "tightpipe/tokenizer.h"

namespace tightpipe {

// The decode error of every tokenizer: the id at `position` is outside [0, vocab_size).
Status id_outside_vocabulary(int32_t id, size_t position, int32_t vocab_size,
                             std::string_view vocabulary);

// GPT-2's byte-level BPE from vocab.json (token -> id) and merges.txt (merge ranks, an optional
// "#version" first line). Errors name the file and what disagrees. Words longer than
// long_word_bytes are merged with a heap (O(n log n)) instead of the passes over the word (O(n) per
// merge); both give the same ids (tests set it to check that).
Result<std::unique_ptr<Tokenizer>> make_gpt2_bpe_tokenizer(const std::string& vocab_file,
                                                           const std::string& merge_file,
                                                           size_t long_word_bytes = 48);

// A SentencePiece model file (.model). Errors name the file and libsentencepiece's reason.
Result<std::unique_ptr<Tokenizer>> make_sentencepiece_tokenizer(const std::string& model_file);

}  // namespace tightpipe
