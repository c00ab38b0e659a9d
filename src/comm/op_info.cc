#include "comm/op_info.h"

#include <fmt/format.h>

#include "tightpipe/check.h"
#include "tightpipe/transport.h"

namespace tightpipe::comm_internal {

std::string OpInfo::describe() const {
  if (!collective.empty()) return fmt::format("rank {}: {}", rank, collective);
  return fmt::format("rank {}: {} rank {}, tag {}, {} bytes", rank,
                     is_send ? "send to" : "recv from", peer, tag, bytes);
}

Status OpInfo::timeout_error(double timeout_s) const {
  if (!collective.empty()) {
    return Status::deadline_exceeded(fmt::format(
        "{}: not complete after {:.3f} s; hint: one of those ranks may have stalled or died, or "
        "the ranks' programs disagree on this collective",
        describe(), timeout_s));
  }
  return Status::deadline_exceeded(fmt::format(
      "{}: not complete after {:.3f} s; hint: rank {} may have stalled or died, or the two ranks' "
      "programs disagree on this message",
      describe(), timeout_s, peer));
}

Status OpInfo::with_op(const Status& cause) const {
  if (cause.ok()) return cause;
  return cause.with_context(describe());
}

Status OpInfo::size_mismatch(size_t message_bytes) const {
  return Status::invalid_argument(fmt::format(
      "{}: the message is {} bytes but the receive buffer is {} bytes; hint: both ranks must agree "
      "on the shape of what is sent under this tag",
      describe(), message_bytes, bytes));
}

Status abort_status(int aborting_rank, std::string_view reason) {
  return Status::unavailable(fmt::format("rank {} aborted: {}", aborting_rank, reason));
}

void check_peer_and_tag(const char* what, int rank, int size, int peer, int tag) {
  TP_CHECK(peer >= 0 && peer < size && peer != rank, what, ": bad peer ", peer, " (rank ", rank,
           " of ", size, ")");
  TP_CHECK(tag >= 0 && tag < kMaxTag, what, ": tag ", tag, " outside [0, ", kMaxTag, ")");
}

}  // namespace tightpipe::comm_internal
