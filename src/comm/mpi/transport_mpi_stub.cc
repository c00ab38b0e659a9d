// Built instead of transport_mpi.cc when MPI is not available (TIGHTPIPE_WITH_MPI off or not
// found): every entry point says so (launched_by_mpirun and fail_launched_job are in
// launcher.cc, built either way).
#include "tightpipe/transport_mpi.h"

namespace tightpipe {

namespace {
Status not_built() {
  return Status::failed_precondition(
      "this tightpipe was built without MPI; hint: apt-get install libopenmpi-dev, then "
      "reconfigure with -DTIGHTPIPE_WITH_MPI=ON");
}
}  // namespace

Result<std::shared_ptr<MpiScope>> MpiScope::acquire() { return not_built(); }
MpiScope::~MpiScope() = default;

Result<std::unique_ptr<Transport>> make_mpi_transport(std::shared_ptr<MpiScope>, MpiOptions) {
  return not_built();
}

}  // namespace tightpipe
