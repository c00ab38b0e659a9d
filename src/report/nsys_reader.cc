// Nsight Systems SQLite export reader (gpu_trace.h).
#include "tightpipe/gpu_trace.h"

namespace tightpipe {

Result<GpuTraceRank> read_nsys_sqlite(const std::string& path) {
  return Status::failed_precondition("'" + path + "': Nsight Systems exports are not read yet");
}

}  // namespace tightpipe
