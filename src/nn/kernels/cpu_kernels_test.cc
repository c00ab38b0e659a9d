// The OpenBLAS core rule on the machines the project has run on, the backends per precision, and
// what this process chose.
#include "tightpipe/cpu_kernels.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cstdlib>

namespace tightpipe::nn {
namespace {

using Action = BlasCoreChoice::Action;

CpuFeatures avx512(std::string vendor, int family, int model, bool bf16, bool amx) {
  CpuFeatures c;
  c.vendor = std::move(vendor);
  c.family = family;
  c.model = model;
  c.avx = c.avx2 = c.fma = true;
  c.avx512f = c.avx512bw = c.avx512dq = c.avx512vl = true;
  c.avx512_bf16 = bf16;
  c.amx_bf16 = amx;
  return c;
}
// The newer Intel Xeon of issue 30 (lscpu: family 6 model 207, AVX-512 with BF16 and VNNI, AMX
// not exposed): OpenBLAS 0.3.21 does not know the model and falls back to Prescott.
CpuFeatures xeon_207() { return avx512("GenuineIntel", 6, 207, true, false); }
// The AMD EPYC Zen 5 (family 26) the project was developed on: AVX-512 with BF16.
CpuFeatures zen5() { return avx512("AuthenticAMD", 26, 2, true, false); }
// The AMD EPYC with AVX2 only (Zen 2/3, family 25 model 1 here).
CpuFeatures epyc_avx2() {
  CpuFeatures c;
  c.vendor = "AuthenticAMD";
  c.family = 25;
  c.model = 1;
  c.avx = c.avx2 = c.fma = true;
  return c;
}

TEST(BlasCoreRule, AFallbackToPrescottOnTheXeonIsReplacedByItsAvx512Kernels) {
  const BlasCoreChoice c = choose_blas_core("Prescott", std::nullopt, false, xeon_207());
  EXPECT_EQ(c.action, Action::kSwitch);
  EXPECT_EQ(c.core, "Cooperlake");  // AVX-512 with BF16: OpenBLAS's newest kernels for it
  EXPECT_NE(c.line.find("picked core Prescott (SSE3 kernels)"), std::string::npos) << c.line;
  EXPECT_NE(c.line.find("Intel family 6 model 207"), std::string::npos) << c.line;
  EXPECT_NE(c.line.find("running Cooperlake instead"), std::string::npos) << c.line;
  // Without BF16 the same CPU class runs SkylakeX; an AVX-512 CPU given Haswell is a fallback too.
  CpuFeatures no_bf16 = xeon_207();
  no_bf16.avx512_bf16 = false;
  EXPECT_EQ(choose_blas_core("Haswell", std::nullopt, false, no_bf16).core, "SkylakeX");
  EXPECT_EQ(choose_blas_core("Haswell", std::nullopt, false, no_bf16).action, Action::kSwitch);
}

TEST(BlasCoreRule, AUserSettingIsKeptAndNamedWithWhatTheCpuCouldRun) {
  // The Zen 5 of this project, whose environment sets OPENBLAS_CORETYPE=Haswell on purpose.
  const BlasCoreChoice c = choose_blas_core("Haswell", std::string("Haswell"), false, zen5());
  EXPECT_EQ(c.action, Action::kKeep);
  EXPECT_EQ(c.core, "Haswell");
  EXPECT_NE(c.line.find("OPENBLAS_CORETYPE=Haswell set in the environment: kept"),
            std::string::npos)
      << c.line;
  EXPECT_NE(c.line.find("could run Cooperlake (AVX-512 kernels)"), std::string::npos) << c.line;
  // The Xeon with a Prescott the user chose: kept (the user may know why), named.
  const BlasCoreChoice x = choose_blas_core("Prescott", std::string("prescott"), false, xeon_207());
  EXPECT_EQ(x.action, Action::kKeep);
  // TIGHTPIPE_BLAS_CORE=auto applies the rule over it: the fallback reproduced and corrected.
  const BlasCoreChoice a = choose_blas_core("Prescott", std::string("Prescott"), true, xeon_207());
  EXPECT_EQ(a.action, Action::kSwitch);
  EXPECT_EQ(a.core, "Cooperlake");
}

TEST(BlasCoreRule, WhatOpenBlasDetectedIsKeptWhenItIsTheCpusBest) {
  // Zen 5 with nothing set: OpenBLAS 0.3.21 picks its AVX-512 kernels.
  for (const char* core : {"SkylakeX", "Cooperlake"}) {
    const BlasCoreChoice c = choose_blas_core(core, std::nullopt, false, zen5());
    EXPECT_EQ(c.action, Action::kKeep) << core;
    EXPECT_EQ(c.core, core);
    EXPECT_NE(c.line.find("the best this CPU runs"), std::string::npos) << c.line;
  }
  // The AVX2 EPYC: Zen (AVX2) is its best.
  EXPECT_EQ(choose_blas_core("Zen", std::nullopt, false, epyc_avx2()).action, Action::kKeep);
  EXPECT_EQ(best_openblas_core(epyc_avx2()), "Zen");
  // An unknown name reported is treated as a fallback.
  EXPECT_EQ(choose_blas_core("Unknown", std::nullopt, false, epyc_avx2()).action, Action::kSwitch);
}

TEST(BlasCoreRule, ForcedKernelsTheCpuCannotRunAreRefusedNamingTheVariableAndTheFeatures) {
  const BlasCoreChoice c =
      choose_blas_core("SkylakeX", std::string("SkylakeX"), false, epyc_avx2());
  EXPECT_EQ(c.action, Action::kRefuse);
  EXPECT_EQ(c.core, "Zen");  // what runs meanwhile: never a kernel that traps
  EXPECT_NE(c.error.find("OPENBLAS_CORETYPE=SkylakeX"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("need AVX-512"), std::string::npos) << c.error;
  EXPECT_NE(c.error.find("AMD family 25 model 1: AVX2 FMA, no AVX-512"), std::string::npos)
      << c.error;
  EXPECT_NE(c.error.find("hint:"), std::string::npos) << c.error;
  // The same with auto: the rule's core, no refusal.
  EXPECT_EQ(choose_blas_core("SkylakeX", std::string("SkylakeX"), true, epyc_avx2()).action,
            Action::kSwitch);
}

TEST(BlasCoreRule, CoreNamesAndLevels) {
  EXPECT_EQ(openblas_core_isa("prescott"), IsaLevel::kSse);
  EXPECT_EQ(openblas_core_isa("SANDYBRIDGE"), IsaLevel::kAvx);
  EXPECT_EQ(openblas_core_isa("Haswell"), IsaLevel::kAvx2);
  EXPECT_EQ(openblas_core_isa("Zen"), IsaLevel::kAvx2);
  EXPECT_EQ(openblas_core_isa("SkylakeX"), IsaLevel::kAvx512);
  EXPECT_FALSE(openblas_core_isa("Pentium9").has_value());
  CpuFeatures avx_only;
  avx_only.vendor = "GenuineIntel";
  avx_only.avx = true;
  EXPECT_EQ(best_openblas_core(avx_only), "Sandybridge");
  EXPECT_EQ(best_openblas_core(CpuFeatures{}), "Prescott");
  // AVX-512 F without BW/DQ/VL (Knights Landing) is not SkylakeX's level.
  CpuFeatures knl = epyc_avx2();
  knl.avx512f = true;
  EXPECT_EQ(cpu_isa_level(knl), IsaLevel::kAvx2);
}

TEST(MatmulBackendRule, PerPrecisionOnTheThreeMachines) {
  EXPECT_EQ(matmul_backend(false, xeon_207()), MatmulBackend::kOpenBlas);
  EXPECT_EQ(matmul_backend(false, zen5()), MatmulBackend::kOpenBlas);
  EXPECT_EQ(matmul_backend(false, epyc_avx2()), MatmulBackend::kOpenBlas);
  EXPECT_EQ(matmul_backend(true, zen5()), MatmulBackend::kOneDnnBf16);
  EXPECT_EQ(matmul_backend(true, xeon_207()), MatmulBackend::kOneDnnBf16);
  EXPECT_EQ(matmul_backend(true, epyc_avx2()), MatmulBackend::kBf16AsFp32);
  EXPECT_EQ(matmul_backend(true, avx512("GenuineIntel", 6, 143, true, true)),
            MatmulBackend::kOneDnnAmx);
  // bf16 pays on Zen 5 (1.8x measured) and with AMX; not on the Xeon without AMX, nor emulated.
  EXPECT_TRUE(bf16_faster_than_fp32(zen5()));
  EXPECT_TRUE(bf16_faster_than_fp32(avx512("GenuineIntel", 6, 143, true, true)));
  EXPECT_FALSE(bf16_faster_than_fp32(xeon_207()));
  EXPECT_FALSE(bf16_faster_than_fp32(epyc_avx2()));
}

TEST(BlasCoreRule, ThisProcessRunsTheCoreTheRuleChose) {
  const BlasCoreChoice& c = blas_core_choice();
  SCOPED_TRACE(c.line);
  EXPECT_EQ(c.core, openblas_get_corename());
  EXPECT_EQ(c.line.rfind("BLAS: ", 0), 0u);
  const CpuFeatures cpu = detect_cpu_features();
  EXPECT_FALSE(cpu.vendor.empty());
  // The kernels run are never newer than the CPU's instruction sets.
  const auto isa = openblas_core_isa(openblas_get_corename());
  ASSERT_TRUE(isa.has_value());
  EXPECT_LE(int(*isa), int(cpu_isa_level(cpu)));
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  if (env == nullptr) {  // nothing set: the best the CPU runs
    EXPECT_EQ(int(*isa), int(cpu_isa_level(cpu)));
  }
  EXPECT_GT(measured_matmul_flops(false), 1e9);
  const std::string header = kernel_header(false);
  EXPECT_NE(header.find("FP32 on OpenBLAS SGEMM at "), std::string::npos) << header;
}

}  // namespace
}  // namespace tightpipe::nn
