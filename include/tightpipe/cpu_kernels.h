// Which matmul kernels this CPU runs, and why (docs/cpu_kernels.md).
//
// Debian's OpenBLAS picks its kernels ("core type") from the CPU model when it loads; for a model
// it does not know it falls back to old SSE3 kernels (Prescott) that run SGEMM 4-5x slower than
// the CPU allows. The rule here (choose_blas_core) compares that choice with the instruction sets
// the CPU has (cpuid) and, before any matmul, makes the process run the best kernels the CPU can
// (apply_blas_core_rule, run once per process by the kernels' library). The rule reads only the
// machine: the BLAS's core name, OPENBLAS_CORETYPE, TIGHTPIPE_BLAS_CORE and cpuid, never a timing,
// so every rank and every run on a machine computes the same arithmetic.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "tightpipe/status.h"

namespace tightpipe::nn {

// What cpuid says, with the OS's support for the registers (XGETBV) folded in: a feature whose
// state the OS does not save reads as absent.
struct CpuFeatures {
  std::string vendor;         // cpuid's vendor string: "GenuineIntel", "AuthenticAMD", ...
  int family = 0, model = 0;  // with the extended fields, as lscpu and /proc/cpuinfo print them
  bool avx = false, avx2 = false, fma = false;
  bool avx512f = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false;
  bool amx_bf16 = false;  // AMX tiles with bf16 (Sapphire Rapids and later)
  bool is_amd() const { return vendor == "AuthenticAMD" || vendor == "HygonGenuine"; }
  bool is_intel() const { return vendor == "GenuineIntel"; }
  // "Intel family 6 model 207: AVX-512 (BF16, no AMX)" / "AMD family 25 model 1: AVX2 FMA".
  std::string describe() const;
};
CpuFeatures detect_cpu_features();

// The instruction sets OpenBLAS's x86 kernels are written for, oldest first.
enum class IsaLevel { kSse = 1, kAvx = 2, kAvx2 = 3, kAvx512 = 4 };
std::string_view isa_level_name(IsaLevel level);  // "SSE3", "AVX", "AVX2", "AVX-512"
IsaLevel cpu_isa_level(const CpuFeatures& cpu);
// What the kernels of an OpenBLAS x86-64 core type need (names as openblas_get_corename() and
// OPENBLAS_CORETYPE spell them, any case); nullopt for a name OpenBLAS does not list.
std::optional<IsaLevel> openblas_core_isa(std::string_view core);
// The core type with the best kernels this CPU runs: Cooperlake / SkylakeX with AVX-512 (with /
// without AVX512-BF16), Zen (AMD) / Haswell with AVX2, Sandybridge with AVX, else Prescott.
std::string best_openblas_core(const CpuFeatures& cpu);

// The rule's verdict.
struct BlasCoreChoice {
  enum class Action {
    kKeep,    // the BLAS runs `core` (its own choice, or the user's) and keeps it
    kSwitch,  // the BLAS fell back to an older core than the CPU runs: `core` instead
    kRefuse,  // the user forced kernels the CPU cannot run: `error` (the process runs `core`)
  };
  Action action = Action::kKeep;
  std::string core;   // the core type the process runs
  std::string line;   // the header line: which core, and why
  std::string error;  // kRefuse: names the variable, its value and the CPU's features
};
// `reported`: what the BLAS chose at load (openblas_get_corename()). `user_coretype`:
// OPENBLAS_CORETYPE as the user set it (nullopt: unset). `auto_over_user`:
// TIGHTPIPE_BLAS_CORE=auto, which applies the rule even over the user's OPENBLAS_CORETYPE (how a
// fallback is reproduced on a machine whose OpenBLAS knows its CPU: OPENBLAS_CORETYPE=Prescott
// TIGHTPIPE_BLAS_CORE=auto).
//   - A user's core that needs instructions the CPU lacks: kRefuse (and the best core runs, so
//     no kernel ever hits SIGILL).
//   - A user's core the CPU runs: kKeep, the line names what the CPU could run.
//   - Otherwise a core older than the CPU's level: kSwitch to best_openblas_core; else kKeep.
BlasCoreChoice choose_blas_core(std::string_view reported,
                                const std::optional<std::string>& user_coretype,
                                bool auto_over_user, const CpuFeatures& cpu);

// The choice this process made (apply_blas_core_rule runs it once, before main, after OpenBLAS
// initialised itself): later calls return the same object.
const BlasCoreChoice& blas_core_choice();
// Runs the rule on this machine and, for kSwitch / kRefuse, re-initialises OpenBLAS on the chosen
// core (OPENBLAS_CORETYPE set for this process and its children, gotoblas_dynamic_init).
// Idempotent.
const BlasCoreChoice& apply_blas_core_rule();
// OK, or InvalidArgument with the kRefuse error (train refuses to start on it).
Status check_blas_core();
// For benches that measure cores side by side in one run: re-initialises OpenBLAS on `core` (the
// environment is left as it was). InvalidArgument for a core OpenBLAS does not list or one whose
// kernels this CPU cannot run; FailedPrecondition where OpenBLAS cannot be re-initialised.
Status run_openblas_core(std::string_view core);

// The matmul backends, per precision (the rule in matmul_backend; evidence in docs/cpu_kernels.md).
enum class MatmulBackend { kOpenBlas, kOneDnnBf16, kOneDnnAmx, kBf16AsFp32 };
std::string_view matmul_backend_name(MatmulBackend backend);
// FP32: OpenBLAS on the rule's core (ahead of oneDNN FP32 on every machine measured). BF16: oneDNN
// on AMX where the CPU has it, on AVX512-BF16 where it has that, else bf16 values widened to FP32
// (emulated: slower than FP32 itself).
MatmulBackend matmul_backend(bool bf16, const CpuFeatures& cpu);
// Whether bf16 matmuls run faster than FP32 here, from the CPU's features alone: AMX, or
// AVX512-BF16 on AMD (Zen 4/5: 1.8x FP32 measured). Intel's AVX512-BF16 without AMX measured slower
// than OpenBLAS FP32 (family 6 model 207); without bf16 instructions bf16 is emulated.
bool bf16_faster_than_fp32(const CpuFeatures& cpu);

// A short single-thread matmul probe (n x n x n, best of a few calls on the calling thread):
// FLOP/s of OpenBLAS SGEMM (bf16 = false) or of the bf16 backend. Measured once per process and
// precision, then cached; the first call takes about 0.1 s.
double measured_matmul_flops(bool bf16);
// The kernel header line of a run: the BLAS core and why, the FP32 (and with bf16 the bf16)
// backend and their measured FLOP/s; with bf16 that does not pay here, what it costs.
std::string kernel_header(bool bf16);

}  // namespace tightpipe::nn
