// Internal to src/comm: what every backend says about a posted operation, so that error messages
// read the same on every transport ("rank 0: recv from rank 1, tag 7, 4096 bytes: ...").
#pragma once

#include <cstddef>
#include <string>

#include "tightpipe/status.h"

namespace tightpipe::comm_internal {

struct OpInfo {
  bool is_send = false;
  int rank = 0;  // the rank that posted the operation
  int peer = 0;  // destination of a send, source of a receive
  int tag = 0;
  size_t bytes = 0;
  // Non-empty for a collective: what it is, e.g. "iallreduce_sum of 8 doubles among ranks
  // {0, 1}" (peer and tag unused).
  std::string collective;

  // "rank 0: send to rank 1, tag 7, 4096 bytes"; a collective: "rank 0: <collective>"
  std::string describe() const;
  // DeadlineExceeded "<describe>: not complete after 0.50 s; hint: ..."
  Status timeout_error(double timeout_s) const;
  // `cause` with the operation prepended as context.
  Status with_op(const Status& cause) const;
  // InvalidArgument: the message size differs from the receive buffer.
  Status size_mismatch(size_t message_bytes) const;
};

// Unavailable "rank R aborted: <reason>" (the status every rank sees after abort()).
Status abort_status(int aborting_rank, std::string_view reason);

// REQUIRES-style checks shared by the backends' isend/irecv.
void check_peer_and_tag(const char* what, int rank, int size, int peer, int tag);

}  // namespace tightpipe::comm_internal
