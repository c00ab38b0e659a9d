// The unit roundoffs the bf16 tests derive their error bounds from (matmul_bf16_test.cc,
// attention_bf16_test.cc, model_bf16_test.cc), defined once.
#pragma once

namespace tightpipe::nn::bf16_testing {

inline constexpr double kU16 = 1.0 / 256;       // bf16 unit roundoff, 2^-8
inline constexpr double kU32 = 1.0 / 16777216;  // FP32 unit roundoff, 2^-24

}  // namespace tightpipe::nn::bf16_testing
