// Between run_world (world.cc) and its watchdog (watchdog.cc): one rank's body with its errors
// caught, and the watched run of all the hosted ranks (WorldOptions::stall_timeout_s).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "tightpipe/transport.h"

namespace tightpipe::comm_internal {

// Runs `body` on `t`, turning an escaped exception into a Status and aborting the world on error.
Status run_rank_body(Transport& t, const std::function<Status(Transport&)>& body);

// Runs `body` once per transport, each on its own thread, and ends the run when one rank reports
// no progress for `stall_timeout_s` (watchdog.cc).
std::vector<RankStatus> run_watched(std::vector<std::unique_ptr<Transport>> transports,
                                    const std::function<Status(Transport&)>& body,
                                    double stall_timeout_s);

}  // namespace tightpipe::comm_internal
