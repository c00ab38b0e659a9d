// run_world: the one entry point that starts the ranks this process hosts on the chosen backend.
#include <fmt/format.h>

#include "comm/world_internal.h"
#include "tightpipe/transport.h"
#include "tightpipe/transport_mpi.h"

namespace tightpipe {

namespace {

std::unique_ptr<Transport> wrapped(const WorldOptions& options, std::unique_ptr<Transport> t,
                                   int rank) {
  std::unique_ptr<Transport> w = options.wrap(std::move(t), rank);
  TP_CHECK(w != nullptr, "WorldOptions::wrap returned no transport for rank ", rank);
  TP_CHECK(w->rank() == rank, "WorldOptions::wrap changed rank ", rank, " into ", w->rank());
  return w;
}

}  // namespace

Result<TransportKind> parse_transport_kind(std::string_view name) {
  if (name == "threads") return TransportKind::kThreads;
  if (name == "mpi") return TransportKind::kMpi;
  return Status::invalid_argument(
      fmt::format("--transport '{}': unknown transport; choose threads or mpi", name));
}

std::string_view transport_kind_name(TransportKind kind) {
  switch (kind) {
    case TransportKind::kThreads:
      return "threads";
    case TransportKind::kMpi:
      return "mpi";
  }
  return "?";
}

bool mpi_transport_available() {
#ifdef TIGHTPIPE_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Status MpiOptions::validate() const {
  if (!(max_poll_interval_us > 0 && max_poll_interval_us <= 1e6)) {
    return Status::invalid_argument(fmt::format(
        "MpiOptions.max_poll_interval_us = {}: must be in (0, 1e6]", max_poll_interval_us));
  }
  if (!(yield_us >= 0 && yield_us <= 1e6) || !(yield_bytes_per_s > 0)) {
    return Status::invalid_argument(
        fmt::format("MpiOptions.yield_us = {}, yield_bytes_per_s = {}: need [0, 1e6] and > 0",
                    yield_us, yield_bytes_per_s));
  }
  return OkStatus();
}

Status WorldOptions::validate() const {
  if (world_size < 1 || world_size > 4096) {
    return Status::invalid_argument(
        fmt::format("world size {}: must be in [1, 4096] ranks", world_size));
  }
  if (link) TP_RETURN_IF_ERROR(link->validate().with_context("--emulate-link"));
  TP_RETURN_IF_ERROR(mpi.validate());
  if (!(stall_timeout_s >= 0 && stall_timeout_s <= 1e7)) {
    return Status::invalid_argument(
        fmt::format("WorldOptions.stall_timeout_s = {}: must be in [0, 1e7] seconds (0: no "
                    "watchdog)",
                    stall_timeout_s));
  }
  if (kind == TransportKind::kMpi && !mpi_transport_available()) {
    return Status::failed_precondition(
        "--transport mpi: this tightpipe was built without MPI; hint: apt-get install "
        "libopenmpi-dev and reconfigure with -DTIGHTPIPE_WITH_MPI=ON, or use --transport threads");
  }
  return OkStatus();
}

Result<std::vector<RankStatus>> run_world(const WorldOptions& options,
                                          const std::function<Status(Transport&)>& body) {
  TP_RETURN_IF_ERROR(options.validate());
  std::vector<RankStatus> out;
  switch (options.kind) {
    case TransportKind::kThreads: {
      std::vector<std::unique_ptr<Transport>> ts =
          make_inproc_transports(options.world_size, options.inproc);
      for (int r = 0; r < options.world_size; ++r) {
        if (options.link) ts[r] = make_link_emulator(std::move(ts[r]), *options.link);
        if (options.wrap) ts[r] = wrapped(options, std::move(ts[r]), r);
      }
      if (options.stall_timeout_s > 0) {
        return comm_internal::run_watched(std::move(ts), body, options.stall_timeout_s);
      }
      std::vector<Status> statuses = run_on_threads(ts, body);
      for (int r = 0; r < options.world_size; ++r) out.push_back({r, std::move(statuses[r])});
      return out;
    }
    case TransportKind::kMpi: {
      TP_ASSIGN_OR_RETURN(std::shared_ptr<MpiScope> scope, MpiScope::acquire());
      if (scope->world_size() != options.world_size) {
        return Status::invalid_argument(fmt::format(
            "--transport mpi: this MPI job has {} process{} but the pipeline needs {} ranks; "
            "hint: start it with mpirun -np {} ...{}",
            scope->world_size(), scope->world_size() == 1 ? "" : "es", options.world_size,
            options.world_size,
            launched_by_mpirun() ? "" : " (this process was not started by mpirun)"));
      }
      TP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> t, make_mpi_transport(scope, options.mpi));
      if (options.link) t = make_link_emulator(std::move(t), *options.link);
      if (options.wrap) {
        const int rank = t->rank();
        t = wrapped(options, std::move(t), rank);
      }
      if (options.stall_timeout_s > 0) {
        std::vector<std::unique_ptr<Transport>> one;
        one.push_back(std::move(t));
        return comm_internal::run_watched(std::move(one), body, options.stall_timeout_s);
      }
      out.push_back({t->rank(), comm_internal::run_rank_body(*t, body)});
      return out;
    }
  }
  return Status::internal("run_world: unknown transport kind");
}

}  // namespace tightpipe
