// A stage checkpoint file (`train --load DIR`) read into a tiny stage: any bytes give the state
// or an error naming the file, never a crash or an allocation sized by the file's header.
#include "fuzz_util.h"
#include "tightpipe/checkpoint.h"
#include "tightpipe/model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tightpipe;
  // The model of the seed corpus (corpus/checkpoint_stage/): 2 layers, width 8, 2 heads, T 4,
  // the first of 2 stages.
  static nn::GptStage* stage = [] {
    nn::GptConfig c;
    c.vocab_size = 256;
    c.seq_length = 4;
    c.num_layers = 2;
    c.hidden_size = 8;
    c.num_heads = 2;
    c.micro_batch_size = 1;
    return new nn::GptStage(c, nn::StageSpec{0, 1, true, false}, 1);
  }();
  const std::string path = fuzz::write_scratch("stage-0.ckpt", fuzz::as_text(data, size));
  (void)nn::load_stage_checkpoint(path, *stage);
  return 0;
}
