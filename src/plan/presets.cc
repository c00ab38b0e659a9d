// Device and network presets of `tightpipe plan` (plan.h). Every figure is a datasheet number or
// a measurement on this machine; docs/plan.md, "Presets", lists them with their sources.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "plan_format.h"
#include "tightpipe/base.h"
#include "tightpipe/cpu_kernels.h"
#include "tightpipe/host.h"
#include "tightpipe/plan.h"

namespace tightpipe {
namespace {

constexpr double kGB = 1e9;
using plan_format::kMiB;

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// NVLink between the GPUs of one HGX/DGX node: per GPU and direction, half the datasheet's
// bidirectional total.
LinkSpec nvlink(double bidirectional_gb_s, std::string source) {
  return {"nvlink", 5e-6, bidirectional_gb_s / 2 * kGB, std::move(source)};
}

// What one message costs a GPU's compute lane: a NCCL P2P kernel launch and the SMs it holds
// while it copies. An estimate of the order of a kernel launch plus a short copy (docs/plan.md).
constexpr double kGpuMessageOverhead = 10e-6;

// this-cpu: the compute thread's time per message of the in-process threads transport, measured
// in training runs by bench/comm/msg_overhead_bench --run-dir (1F1B p=2, 64 KiB - 1 MiB
// messages): about 25 us + bytes / 19 GB/s per end (docs/plan.md, "this-cpu").
constexpr double kCpuMessageOverhead = 25e-6;
constexpr double kCpuMessageCopyBandwidth = 19e9;

DevicePreset this_cpu() {
  DevicePreset d;
  d.name = "this-cpu";
  const int32_t cores = usable_cores().count();  // its affinity and CPU quota
  d.description = fmt::format("one core of this machine ({} cores), FP32, threads as ranks", cores);
  // The "peak" is one core's measured SGEMM rate on the kernels this process runs (the probe of
  // cpu_kernels.h, the same one `train` reports its utilisation against), filled in by
  // find_device_preset when this preset is chosen; 0 in the list.
  d.peak_flops_fp32 = 0;
  d.peak_flops_bf16 = 0;
  d.bf16 = false;
  const AvailableMemory mem = available_memory();
  d.memory_bytes = std::isfinite(mem.bytes) ? mem.bytes / cores : 0;
  d.devices_per_node = static_cast<int32_t>(cores);
  // Ranks on threads hand activations over in memory; the copies are the per-message overhead.
  d.intra_node = {"threads", 0, 0, "in-process threads transport (src/comm/inproc)"};
  d.network = "ethernet-25g";
  d.message_overhead_s = kCpuMessageOverhead;
  d.message_overhead_bandwidth = kCpuMessageCopyBandwidth;
  d.source = fmt::format(
      "peak: SGEMM measured at start-up (512^3, one thread); memory: {} / {} cores; message "
      "overhead measured by bench/comm/msg_overhead_bench",
      mem.source, cores);
  return d;
}

// The entry of `list` called `name` (case-insensitive), or an error naming `flag` and listing
// the names.
template <typename T>
Result<T> find_named(const std::vector<T>& list, std::string_view name, std::string_view flag) {
  const std::string key = lower(name);
  std::string names;
  for (const T& item : list) {
    if (item.name == key) return item;
    names += (names.empty() ? "" : ", ") + item.name;
  }
  return Status::invalid_argument(
      fmt::format("{} '{}' is not known; hint: one of {}", flag, printable(name), names));
}

}  // namespace

const std::vector<LinkSpec>& network_presets() {
  static const std::vector<LinkSpec> kNetworks = {
      {"nvlink", 5e-6, 450 * kGB,
       "NVLink 4 (H100/H200 HGX): 900 GB/s per GPU, both directions together"},
      {"pcie", 5e-6, 64 * kGB, "PCIe 5.0 x16: 64 GB/s per direction"},
      {"infiniband", 5e-6, 50 * kGB,
       "InfiniBand NDR, one 400 Gbit/s ConnectX-7 port per GPU: 50 GB/s per direction"},
      {"ethernet-25g", 30e-6, 25e9 / 8,
       "a 25 Gbit/s cloud network: 3.125 GB/s per node, shared by its devices", true},
  };
  return kNetworks;
}

Result<LinkSpec> find_network(std::string_view name) {
  return find_named(network_presets(), name, "--network");
}

const std::vector<DevicePreset>& device_presets() {
  static const std::vector<DevicePreset> kPresets = [] {
    std::vector<DevicePreset> v;
    DevicePreset h100;
    h100.name = "h100-sxm";
    h100.description = "NVIDIA H100 SXM5 80 GB";
    h100.peak_flops_bf16 = 989.4e12;
    h100.peak_flops_fp32 = 66.9e12;
    h100.memory_bytes = 81559 * kMiB;
    h100.intra_node = nvlink(900, "NVLink 4: 900 GB/s per GPU");
    h100.message_overhead_s = kGpuMessageOverhead;
    h100.source =
        "NVIDIA H100 Tensor Core GPU datasheet (SXM5: BF16 989.4 TFLOPS dense, FP32 "
        "66.9 TFLOPS, 80 GB HBM3, NVLink 900 GB/s); memory as nvidia-smi reports it";
    v.push_back(h100);

    DevicePreset h200 = h100;
    h200.name = "h200";
    h200.description = "NVIDIA H200 SXM 141 GB";
    h200.memory_bytes = 143771 * kMiB;
    h200.source =
        "NVIDIA H200 Tensor Core GPU datasheet (SXM: BF16 989 TFLOPS dense, FP32 67 "
        "TFLOPS, 141 GB HBM3e, NVLink 900 GB/s); memory as nvidia-smi reports it";
    v.push_back(h200);

    DevicePreset a100;
    a100.name = "a100-80g";
    a100.description = "NVIDIA A100 SXM4 80 GB";
    a100.peak_flops_bf16 = 312e12;
    a100.peak_flops_fp32 = 19.5e12;
    a100.memory_bytes = 81920 * kMiB;
    a100.intra_node = nvlink(600, "NVLink 3: 600 GB/s per GPU");
    a100.message_overhead_s = kGpuMessageOverhead;
    a100.source =
        "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80 GB: BF16 312 TFLOPS dense, FP32 "
        "19.5 TFLOPS, NVLink 600 GB/s); memory as nvidia-smi reports it";
    v.push_back(a100);

    DevicePreset l40s;
    l40s.name = "l40s";
    l40s.description = "NVIDIA L40S 48 GB (PCIe)";
    l40s.peak_flops_bf16 = 362.05e12;
    l40s.peak_flops_fp32 = 91.6e12;
    l40s.memory_bytes = 46068 * kMiB;
    l40s.intra_node = {"pcie", 5e-6, 32 * kGB, "PCIe 4.0 x16: 32 GB/s per direction"};
    l40s.network = "ethernet-25g";
    l40s.message_overhead_s = kGpuMessageOverhead;
    l40s.source =
        "NVIDIA L40S datasheet (BF16 362.05 TFLOPS dense, FP32 91.6 TFLOPS, 48 GB "
        "GDDR6, PCIe 4.0 x16, no NVLink); memory as nvidia-smi reports it";
    v.push_back(l40s);
    v.push_back(this_cpu());
    return v;
  }();
  return kPresets;
}

Result<DevicePreset> find_device_preset(std::string_view name) {
  TP_ASSIGN_OR_RETURN(DevicePreset d, find_named(device_presets(), name, "--device"));
  if (d.name == "this-cpu") {
    d.peak_flops_fp32 = nn::measured_matmul_flops(false);
    d.description += fmt::format(", SGEMM {:.0f} GFLOP/s measured ({})", d.peak_flops_fp32 / 1e9,
                                 nn::blas_core_choice().core);
  }
  return d;
}

}  // namespace tightpipe
