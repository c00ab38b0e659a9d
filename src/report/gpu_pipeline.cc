// The pipeline analysis of GPU traces: fitted costs, the simulated schedule, what-ifs.
#include "report/gpu_internal.h"

namespace tightpipe {

Status GpuPipelineSpec::validate() const { return Status::Ok(); }

namespace report_internal {

GpuPipelineReport analyze_gpu_pipeline(const std::vector<GpuTraceRank>&,
                                       const std::vector<GpuRankReport>&, const GpuPipelineSpec&) {
  GpuPipelineReport r;
  r.error = "not implemented yet";
  return r;
}

}  // namespace report_internal
}  // namespace tightpipe
