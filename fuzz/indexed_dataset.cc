// A Megatron indexed dataset (`--data-path PREFIX`: PREFIX.idx + PREFIX.bin). The input holds both
// files: a 4-byte little-endian length L, then L bytes of .idx (fewer when the input ends first),
// then the .bin (corpus/indexed_dataset/*). Any bytes give an error or a dataset whose every
// sequence and document reads inside the files; an accepted dataset written back by
// IndexedDatasetWriter reads back with the same tokens.
#include "tightpipe/indexed_dataset.h"

#include <algorithm>
#include <cstring>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  const std::string_view input = fuzz::as_text(data, size);
  uint32_t idx_len = 0;
  if (input.size() >= 4) std::memcpy(&idx_len, input.data(), 4);
  const std::string_view rest = input.substr(std::min<size_t>(4, input.size()));
  const std::string_view idx = rest.substr(0, std::min<size_t>(idx_len, rest.size()));
  const std::string_view bin = rest.substr(idx.size());
  (void)fuzz::write_scratch("ds.idx", idx);
  const std::string prefix = fuzz::write_scratch("ds.bin", bin);
  auto ds = IndexedDataset::open(prefix.substr(0, prefix.size() - 4));
  if (!ds.ok()) return 0;
  if (ds->num_tokens() > (1 << 22) || ds->num_sequences() > (1 << 16)) return 0;

  auto out = IndexedDatasetWriter::create(fuzz::scratch_dir() + "/copy", ds->dtype());
  if (!out.ok()) fuzz::property_failed("cannot create the copy: " + out.status().to_string());
  int64_t seen = 0;
  for (int64_t d = 0; d < ds->num_documents(); ++d) {
    const DocumentSequences seqs = ds->document(d);
    if (seqs.first > seqs.end || seqs.end > ds->num_sequences()) {
      fuzz::property_failed("document outside the sequences");
    }
    std::vector<int32_t> tokens;
    std::vector<int64_t> lengths;
    for (int64_t s = seqs.first; s < seqs.end; ++s) {
      const std::vector<int32_t> t = ds->sequence(s);
      tokens.insert(tokens.end(), t.begin(), t.end());
      lengths.push_back(static_cast<int64_t>(t.size()));
    }
    seen += seqs.end - seqs.first;
    Status added = (*out)->add_document(tokens, lengths);
    if (!added.ok()) fuzz::property_failed("write back: " + added.to_string());
  }
  if (seen != ds->num_sequences()) fuzz::property_failed("documents do not cover the sequences");
  Status done = (*out)->finish();
  if (!done.ok()) fuzz::property_failed("write back: " + done.to_string());

  auto copy = IndexedDataset::open(fuzz::scratch_dir() + "/copy");
  if (!copy.ok()) fuzz::property_failed("the copy does not read: " + copy.status().to_string());
  if (copy->num_sequences() != ds->num_sequences() ||
      copy->num_documents() != ds->num_documents() || copy->num_tokens() != ds->num_tokens()) {
    fuzz::property_failed("the copy's counts differ");
  }
  for (int64_t s = 0; s < ds->num_sequences(); ++s) {
    if (copy->sequence(s) != ds->sequence(s)) fuzz::property_failed("a copied sequence differs");
  }
  for (int64_t k = 0; k <= ds->num_documents(); ++k) {
    if (copy->document_index(k) != ds->document_index(k)) {
      fuzz::property_failed("a copied document index differs");
    }
  }
  return 0;
}
