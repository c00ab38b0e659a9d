// A Transport decorator that injects one failure on one rank, for tests of how the other ranks
// react to a stalled or dead peer. It goes into a run through the generic WorldOptions::wrap hook
// (transport.h), so nothing in src/ knows about it.
//
// The failing rank counts its point-to-point sends (its groups' too) with user tags (tag <
// kMaxUserTag: the pipeline's messages; collectives such as barriers are not counted, so the count
// per training step is the number of SEND actions in the rank's program). When it is about to post
// send number `after_sends + 1`, it either stalls that call for `stall_s` seconds (once) or ends
// the process after one line on stderr, with std::_Exit(exit_code) or as `kill -9` does (SIGKILL):
// no MPI_Finalize, no goodbye to the peers.
//
// Thread safety: as the wrapped transport; the send count is atomic.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "tightpipe/status.h"
#include "tightpipe/transport.h"

namespace tightpipe::testutil {

enum class FaultKind { kStall, kKill, kSigkill };

struct FaultOptions {
  int rank = -1;                       // the rank that fails; -1: none
  int64_t after_sends = 0;             // it fails when posting the send after this many
  FaultKind kind = FaultKind::kStall;  // stall the send, or end the process (exit or SIGKILL)
  double stall_s = 1;                  // kStall: seconds the send blocks its caller
  int exit_code = 3;                   // kKill: the process's exit status
};

// Parses "stall:RANK:SENDS:SECONDS", "kill:RANK:SENDS[:EXIT_CODE]" or "sigkill:RANK:SENDS".
Result<FaultOptions> parse_fault(std::string_view spec);

// Wraps `inner` (rank `rank`); ranks other than options.rank pass straight through.
std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, int rank,
                                                FaultOptions options);

// The decorator for WorldOptions::wrap: wraps the failing rank's transport, leaves the others.
TransportWrapper fault_wrapper(FaultOptions options);

}  // namespace tightpipe::testutil
