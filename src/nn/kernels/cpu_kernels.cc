// The CPU's instruction sets, the OpenBLAS core rule, the matmul backends and the matmul probe.
#include "tightpipe/cpu_kernels.h"

#include <cblas.h>
#include <cpuid.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "tightpipe/base.h"
#include "tightpipe/kernels.h"
#include "tightpipe/kernels_bf16.h"

namespace tightpipe::nn {
namespace {

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

bool bit(uint32_t reg, int b) { return (reg >> b) & 1u; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// OpenBLAS 0.3.21's x86-64 core types (driver/others/dynamic.c's corename list, plus the
// SapphireRapids of later releases) and the instruction set their kernels are compiled for.
struct CoreIsa {
  std::string_view name;
  IsaLevel isa;
};
constexpr std::array<CoreIsa, 26> kCores{{
    {"Katmai", IsaLevel::kSse},        {"Coppermine", IsaLevel::kSse},
    {"Northwood", IsaLevel::kSse},     {"Prescott", IsaLevel::kSse},
    {"Banias", IsaLevel::kSse},        {"Atom", IsaLevel::kSse},
    {"Core2", IsaLevel::kSse},         {"Penryn", IsaLevel::kSse},
    {"Dunnington", IsaLevel::kSse},    {"Nehalem", IsaLevel::kSse},
    {"Athlon", IsaLevel::kSse},        {"Opteron", IsaLevel::kSse},
    {"Opteron_SSE3", IsaLevel::kSse},  {"Barcelona", IsaLevel::kSse},
    {"Nano", IsaLevel::kSse},          {"Bobcat", IsaLevel::kSse},
    {"Sandybridge", IsaLevel::kAvx},   {"Bulldozer", IsaLevel::kAvx},
    {"Piledriver", IsaLevel::kAvx},    {"Steamroller", IsaLevel::kAvx},
    {"Haswell", IsaLevel::kAvx2},      {"Excavator", IsaLevel::kAvx2},
    {"Zen", IsaLevel::kAvx2},          {"SkylakeX", IsaLevel::kAvx512},
    {"Cooperlake", IsaLevel::kAvx512}, {"SapphireRapids", IsaLevel::kAvx512},
}};

std::string features_text(const CpuFeatures& c) {
  std::string s;
  if (cpu_isa_level(c) == IsaLevel::kAvx512) {
    s = fmt::format("AVX-512 ({}, {})", c.avx512_bf16 ? "BF16" : "no BF16",
                    c.amx_bf16 ? "AMX" : "no AMX");
  } else if (c.avx2 && c.fma) {
    s = "AVX2 FMA, no AVX-512";
  } else if (c.avx) {
    s = "AVX, no AVX2";
  } else {
    s = "SSE only";
  }
  return s;
}

std::string vendor_short(const CpuFeatures& c) {
  if (c.is_intel()) return "Intel";
  if (c.is_amd()) return "AMD";
  return c.vendor.empty() ? "unknown vendor" : c.vendor;
}

// The cores of `level` and below a CPU could be told to run, best first (for hints).
std::string runnable_hint(const CpuFeatures& cpu) {
  std::string best = best_openblas_core(cpu);  // not const: returned by move
  switch (cpu_isa_level(cpu)) {
    case IsaLevel::kAvx512:
      return best + ", SkylakeX, Haswell";
    case IsaLevel::kAvx2:
      return best == "Zen" ? "Zen, Haswell" : "Haswell";
    case IsaLevel::kAvx:
      return "Sandybridge";
    case IsaLevel::kSse:
      return "Prescott";
  }
  return best;
}

}  // namespace

std::string CpuFeatures::describe() const {
  return fmt::format("{} family {} model {}: {}", vendor_short(*this), family, model,
                     features_text(*this));
}

CpuFeatures detect_cpu_features() {
  CpuFeatures c;
  unsigned a = 0, b = 0, cx = 0, d = 0;
  if (__get_cpuid(0, &a, &b, &cx, &d) == 0) return c;
  const unsigned max_leaf = a;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &cx, 4);
  c.vendor = vendor;
  __get_cpuid(1, &a, &b, &cx, &d);
  const int base_family = (a >> 8) & 0xf, ext_family = (a >> 20) & 0xff;
  const int base_model = (a >> 4) & 0xf, ext_model = (a >> 16) & 0xf;
  c.family = base_family == 0xf ? base_family + ext_family : base_family;
  c.model = base_family == 0x6 || base_family == 0xf ? (ext_model << 4) + base_model : base_model;
  const bool osxsave = bit(cx, 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // SSE and AVX state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM_Hi256, Hi16_ZMM
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;         // XTILECFG, XTILEDATA
  c.avx = bit(cx, 28) && os_avx;
  c.fma = bit(cx, 12) && os_avx;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, cx, d);
    c.avx2 = bit(b, 5) && os_avx;
    c.avx512f = bit(b, 16) && os_avx512;
    c.avx512dq = bit(b, 17) && os_avx512;
    c.avx512bw = bit(b, 30) && os_avx512;
    c.avx512vl = bit(b, 31) && os_avx512;
    c.amx_bf16 = bit(d, 22) && bit(d, 24) && os_amx;
    const unsigned sub_leaves = a;
    if (sub_leaves >= 1) {
      __cpuid_count(7, 1, a, b, cx, d);
      c.avx512_bf16 = bit(a, 5) && os_avx512;
    }
  }
  return c;
}

std::string_view isa_level_name(IsaLevel level) {
  switch (level) {
    case IsaLevel::kSse:
      return "SSE3";
    case IsaLevel::kAvx:
      return "AVX";
    case IsaLevel::kAvx2:
      return "AVX2";
    case IsaLevel::kAvx512:
      return "AVX-512";
  }
  return "?";
}

IsaLevel cpu_isa_level(const CpuFeatures& c) {
  // OpenBLAS's SkylakeX kernels use AVX-512 F, BW, DQ and VL (its support_avx512 tests F and BW).
  if (c.avx512f && c.avx512bw && c.avx512dq && c.avx512vl) return IsaLevel::kAvx512;
  if (c.avx2 && c.fma) return IsaLevel::kAvx2;
  if (c.avx) return IsaLevel::kAvx;
  return IsaLevel::kSse;
}

std::optional<IsaLevel> openblas_core_isa(std::string_view core) {
  const std::string key = lower(core);
  for (const CoreIsa& k : kCores)
    if (lower(k.name) == key) return k.isa;
  return std::nullopt;
}

std::string best_openblas_core(const CpuFeatures& c) {
  switch (cpu_isa_level(c)) {
    case IsaLevel::kAvx512:
      return c.avx512_bf16 ? "Cooperlake" : "SkylakeX";
    case IsaLevel::kAvx2:
      return c.is_amd() ? "Zen" : "Haswell";
    case IsaLevel::kAvx:
      return "Sandybridge";
    case IsaLevel::kSse:
      return "Prescott";
  }
  return "Prescott";
}

BlasCoreChoice choose_blas_core(std::string_view reported,
                                const std::optional<std::string>& user_coretype,
                                bool auto_over_user, const CpuFeatures& cpu) {
  BlasCoreChoice out;
  const IsaLevel have = cpu_isa_level(cpu);
  const std::string best = best_openblas_core(cpu);
  const std::string cpu_text = cpu.describe();
  if (user_coretype && !auto_over_user) {
    const std::optional<IsaLevel> need = openblas_core_isa(*user_coretype);
    if (need && *need > have) {
      out.action = BlasCoreChoice::Action::kRefuse;
      out.core = best;
      out.error = fmt::format(
          "OPENBLAS_CORETYPE={}: its kernels need {} and this CPU ({}) has none; hint: unset "
          "OPENBLAS_CORETYPE (tightpipe then runs {}) or set it to one this CPU runs ({})",
          printable(*user_coretype), isa_level_name(*need), cpu_text, best, runnable_hint(cpu));
      out.line = "BLAS: " + out.error;
      return out;
    }
    if (lower(reported) != lower(*user_coretype)) {
      // OpenBLAS ignores a name it has no kernels for and runs its own pick: not "kept".
      out.action = BlasCoreChoice::Action::kRefuse;
      out.core = best;
      out.error = fmt::format(
          "OPENBLAS_CORETYPE={}: this OpenBLAS has no core of that name (it ignored it and "
          "picked {}); hint: unset OPENBLAS_CORETYPE (tightpipe then runs {}) or set it to one "
          "this CPU runs ({})",
          printable(*user_coretype), printable(reported), best, runnable_hint(cpu));
      out.line = "BLAS: " + out.error;
      return out;
    }
    out.action = BlasCoreChoice::Action::kKeep;
    out.core = std::string(reported);
    const bool older = need && *need < have;
    out.line = fmt::format(
        "BLAS: OpenBLAS core {} (OPENBLAS_CORETYPE={} set in the environment: "
        "kept){}; CPU {}",
        reported, printable(*user_coretype),
        older ? fmt::format(", this CPU could run {} ({} kernels): unset "
                            "OPENBLAS_CORETYPE for them",
                            best, isa_level_name(have))
              : std::string(),
        cpu_text);
    return out;
  }
  const std::optional<IsaLevel> got = openblas_core_isa(reported);
  if (!got || *got != have) {  // older kernels (a fallback), or newer ones the CPU cannot run
    out.action = BlasCoreChoice::Action::kSwitch;
    out.core = best;
    out.line = fmt::format(
        "BLAS: OpenBLAS picked core {} ({} kernels) on a CPU with {} ({}): running {} instead "
        "(the rule in cpu_kernels.h; OPENBLAS_CORETYPE chooses one by hand)",
        reported, got ? isa_level_name(*got) : "unknown", isa_level_name(have), cpu_text, best);
    return out;
  }
  out.action = BlasCoreChoice::Action::kKeep;
  out.core = std::string(reported);
  out.line = fmt::format(
      "BLAS: OpenBLAS core {} ({} kernels, detected: the best this CPU runs); "
      "CPU {}",
      reported, isa_level_name(*got), cpu_text);
  return out;
}

namespace {

// Set by the first process that switched, so that its children (a PyTorch peer, a CLI a test
// starts) read OPENBLAS_CORETYPE as the rule's choice, not the user's: "PICKED:SET", the core
// OpenBLAS had picked before the switch and the one the rule set.
constexpr const char* kSwitchedFrom = "TIGHTPIPE_OPENBLAS_PICKED";

BlasCoreChoice run_rule() {
  const CpuFeatures cpu = detect_cpu_features();
  const char* env = std::getenv("OPENBLAS_CORETYPE");
  const char* from = std::getenv(kSwitchedFrom);
  const char* mode = std::getenv("TIGHTPIPE_BLAS_CORE");
  const bool auto_over_user = mode != nullptr && std::string_view(mode) == "auto";
  std::string reported = openblas_get_corename();
  std::optional<std::string> user;
  if (env != nullptr && *env != '\0') user = env;
  if (from != nullptr && user) {
    // "Prescott:Cooperlake": a parent process switched from Prescott to Cooperlake. While
    // OPENBLAS_CORETYPE is still what it set, judge what OpenBLAS had picked there.
    const std::string_view f = from;
    const size_t colon = f.find(':');
    if (colon != f.npos && lower(f.substr(colon + 1)) == lower(*user)) {
      reported = std::string(f.substr(0, colon));
      user.reset();
    }
  }
  BlasCoreChoice c = choose_blas_core(reported, user, auto_over_user, cpu);
  if (mode != nullptr && !auto_over_user && *mode != '\0') {
    c.action = BlasCoreChoice::Action::kRefuse;
    c.error = fmt::format(
        "TIGHTPIPE_BLAS_CORE={}: the only value is 'auto' (the rule's core even over "
        "OPENBLAS_CORETYPE); hint: unset it, or choose a core with OPENBLAS_CORETYPE",
        printable(mode));
    c.core = openblas_get_corename();
    c.line = "BLAS: " + c.error;
  }
  return c;
}

// OpenBLAS with DYNAMIC_ARCH (Debian's) reads OPENBLAS_CORETYPE in gotoblas_dynamic_init, which
// returns at once while a core is set: quit, then init again. Both are exported; looked up at run
// time so that a BLAS without them (a build for one core) only keeps its kernels.
bool reinit_openblas(const std::string& core) {
  using Fn = void (*)();
  auto quit = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_quit"));
  auto init = reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, "gotoblas_dynamic_init"));
  if (quit == nullptr || init == nullptr) return false;
  quit();
  init();
  return lower(openblas_get_corename()) == lower(core);
}

BlasCoreChoice apply() {
  BlasCoreChoice c = run_rule();
  if (c.action == BlasCoreChoice::Action::kKeep) return c;
  if (lower(openblas_get_corename()) == lower(c.core)) return c;  // a parent switched already
  const std::string was = openblas_get_corename();
  setenv("OPENBLAS_CORETYPE", c.core.c_str(), 1);
  setenv(kSwitchedFrom, (was + ":" + c.core).c_str(), 1);
  if (!reinit_openblas(c.core)) {
    c.line += fmt::format(" (could not: this OpenBLAS has no gotoblas_dynamic_init; it runs {})",
                          openblas_get_corename());
    c.core = openblas_get_corename();
  }
  return c;
}

}  // namespace

const BlasCoreChoice& apply_blas_core_rule() {
  static const BlasCoreChoice choice = apply();
  return choice;
}

const BlasCoreChoice& blas_core_choice() { return apply_blas_core_rule(); }

Status check_blas_core() {
  const BlasCoreChoice& c = blas_core_choice();
  if (c.action == BlasCoreChoice::Action::kRefuse) return Status::invalid_argument(c.error);
  return OkStatus();
}

Status run_openblas_core(std::string_view core) {
  const CpuFeatures cpu = detect_cpu_features();
  const std::optional<IsaLevel> need = openblas_core_isa(core);
  if (!need) {
    return Status::invalid_argument(fmt::format(
        "OpenBLAS core '{}': not one OpenBLAS lists; hint: e.g. {}", core, runnable_hint(cpu)));
  }
  if (*need > cpu_isa_level(cpu)) {
    return Status::invalid_argument(fmt::format("OpenBLAS core {}: needs {}, this CPU is {}", core,
                                                isa_level_name(*need), cpu.describe()));
  }
  const char* old = std::getenv("OPENBLAS_CORETYPE");
  const std::optional<std::string> was = old ? std::optional<std::string>(old) : std::nullopt;
  setenv("OPENBLAS_CORETYPE", std::string(core).c_str(), 1);
  const bool ok = reinit_openblas(std::string(core));
  if (was) {
    setenv("OPENBLAS_CORETYPE", was->c_str(), 1);
  } else {
    unsetenv("OPENBLAS_CORETYPE");
  }
  if (!ok) {
    return Status::failed_precondition(
        fmt::format("OpenBLAS core {}: this OpenBLAS cannot be re-initialised (it runs {})", core,
                    openblas_get_corename()));
  }
  return OkStatus();
}

std::string_view matmul_backend_name(MatmulBackend backend) {
  switch (backend) {
    case MatmulBackend::kOpenBlas:
      return "OpenBLAS SGEMM";
    case MatmulBackend::kOneDnnBf16:
      return "oneDNN bf16 (AVX512-BF16)";
    case MatmulBackend::kOneDnnAmx:
      return "oneDNN bf16 (AMX)";
    case MatmulBackend::kBf16AsFp32:
      return "bf16 widened to FP32 (emulated)";
  }
  return "?";
}

MatmulBackend matmul_backend(bool bf16, const CpuFeatures& cpu) {
  if (!bf16) return MatmulBackend::kOpenBlas;
  if (cpu.amx_bf16) return MatmulBackend::kOneDnnAmx;
  if (cpu.avx512_bf16) return MatmulBackend::kOneDnnBf16;
  return MatmulBackend::kBf16AsFp32;
}

bool bf16_faster_than_fp32(const CpuFeatures& cpu) {
  if (cpu.amx_bf16) return true;
  return cpu.avx512_bf16 && cpu.is_amd();
}

namespace {

double probe(bool bf16) {
  constexpr int n = 512;
  constexpr int calls = 12;
  std::vector<float> a(size_t(n) * n), w(size_t(n) * n), out(size_t(n) * n);
  for (size_t i = 0; i < a.size(); ++i) {  // deterministic, small values
    a[i] = float(int(i % 17) - 8) * 0.01f;
    w[i] = float(int(i % 13) - 6) * 0.01f;
  }
  std::vector<Bf16> ab(a.size()), wb(w.size());
  if (bf16) {
    float_to_bf16(ab, a);
    float_to_bf16(wb, w);
  }
  double best = 0;
  for (int c = 0; c < calls; ++c) {
    const auto t0 = std::chrono::steady_clock::now();
    if (bf16) {
      matmul_forward_bf16(out, ab, wb, {}, n, n, n);
    } else {
      matmul_forward(out, a, w, {}, n, n, n);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) best = std::max(best, 2.0 * n * n * n / s);
  }
  return best;
}

}  // namespace

double measured_matmul_flops(bool bf16) {
  static std::once_flag once[2];
  static double rate[2] = {0, 0};
  const int k = bf16 ? 1 : 0;
  std::call_once(once[k], [&] { rate[k] = probe(bf16); });
  return rate[k];
}

std::string kernel_header(bool bf16) {
  const CpuFeatures cpu = detect_cpu_features();
  std::string out = blas_core_choice().line;
  const double fp32 = measured_matmul_flops(false);
  out += fmt::format("\nmatmuls: FP32 on {} at {:.0f} GFLOP/s (512^3, one thread)",
                     matmul_backend_name(matmul_backend(false, cpu)), fp32 / 1e9);
  if (bf16) {
    const double b = measured_matmul_flops(true);
    // What oneDNN really runs (DNNL_MAX_CPU_ISA may hold it below the CPU's bf16 instructions).
    const MatmulBackend be = bf16_native() ? matmul_backend(true, cpu) : MatmulBackend::kBf16AsFp32;
    out += fmt::format("; bf16 on {} at {:.0f} GFLOP/s", matmul_backend_name(be), b / 1e9);
    if (be == MatmulBackend::kBf16AsFp32) {
      out += fmt::format(
          "\nbf16: no bf16 instructions in use here ({}{}): bf16 matmuls are emulated, {:.1f}x "
          "the time of FP32; bf16 halves activation memory, not time",
          cpu.describe(), cpu.avx512_bf16 ? "; oneDNN is held below AVX512-BF16" : "",
          b > 0 ? fp32 / b : 0.0);
    } else if (!bf16_faster_than_fp32(cpu)) {
      out += fmt::format(
          "\nbf16 matmuls here: {:.0f} GFLOP/s vs fp32 {:.0f} GFLOP/s: bf16 halves activation "
          "memory, not time",
          b / 1e9, fp32 / 1e9);
    }
  }
  return out;
}

}  // namespace tightpipe::nn
