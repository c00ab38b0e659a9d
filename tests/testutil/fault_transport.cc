#include "fault_transport.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "tightpipe/base.h"

namespace tightpipe::testutil {
namespace {

class FaultTransport final : public Transport {
 public:
  // `members`: the world ranks of a group's ranks (empty: this is the world), for messages.
  FaultTransport(std::unique_ptr<Transport> inner, FaultOptions options,
                 std::shared_ptr<std::atomic<int64_t>> sends, std::vector<int> members = {})
      : inner_(std::move(inner)),
        options_(options),
        sends_(std::move(sends)),
        group_(std::move(members)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string name() const override { return "fault(" + inner_->name() + ")"; }

  std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) override {
    if (tag < kMaxUserTag && sends_->fetch_add(1) == options_.after_sends) fail(dst);
    return inner_->isend(dst, tag, data);
  }
  std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) override {
    return inner_->irecv(src, tag, data);
  }
  void abort(std::string_view reason) override { inner_->abort(reason); }
  std::optional<Status> aborted() const override { return inner_->aborted(); }
  // Only the failing rank is wrapped, so make_group must take the inner transport's path as the
  // other ranks do (collective on MPI); the group's sends count with this rank's.
  Result<std::unique_ptr<Transport>> make_group(std::vector<int> members) override {
    std::vector<int> world;
    for (int m : members) world.push_back(world_rank(m));
    TP_ASSIGN_OR_RETURN(std::unique_ptr<Transport> group, inner_->make_group(std::move(members)));
    return std::unique_ptr<Transport>(
        std::make_unique<FaultTransport>(std::move(group), options_, sends_, std::move(world)));
  }
  std::unique_ptr<Request> iallreduce_sum(std::span<double> data) override {
    return inner_->iallreduce_sum(data);
  }

 private:
  int world_rank(int r) const { return group_.empty() ? r : group_[r]; }

  void fail(int group_dst) {
    const int r = world_rank(inner_->rank()), dst = world_rank(group_dst);
    const long long n = static_cast<long long>(options_.after_sends);
    switch (options_.kind) {
      case FaultKind::kStall:
        std::fprintf(stderr, "rank %d: stalling %.3g s after %lld sends (fault injection)\n", r,
                     options_.stall_s, n);
        std::this_thread::sleep_for(std::chrono::duration<double>(options_.stall_s));
        return;
      case FaultKind::kKill:
      case FaultKind::kSigkill: {
        const bool sigkill = options_.kind == FaultKind::kSigkill;
        std::fprintf(stderr,
                     "rank %d: %s after %lld sends, before a send to rank %d (fault injection)\n",
                     r, sigkill ? "SIGKILL" : "killed", n, dst);
        std::fflush(stderr);
        std::fflush(stdout);
        if (sigkill) std::raise(SIGKILL);
        std::_Exit(options_.exit_code);
      }
    }
  }

  std::unique_ptr<Transport> inner_;
  const FaultOptions options_;
  std::shared_ptr<std::atomic<int64_t>> sends_;  // shared with the groups made from it
  const std::vector<int> group_;                 // [rank]: world rank (empty: the world)
};

}  // namespace

Result<FaultOptions> parse_fault(std::string_view spec) {
  auto bad = [&] {
    return Status::invalid_argument(
        fmt::format("fault '{}': expected stall:RANK:SENDS:SECONDS, kill:RANK:SENDS[:EXIT_CODE] or "
                    "sigkill:RANK:SENDS; hint: "
                    "stall:1:18:8 stalls rank 1 for 8 s when it posts its 19th send",
                    spec));
  };
  const std::vector<std::string> parts = split(spec, ':');
  if (parts.size() < 3 || parts.size() > 4) return bad();
  FaultOptions o;
  if (parts[0] == "stall") {
    o.kind = FaultKind::kStall;
  } else if (parts[0] == "kill") {
    o.kind = FaultKind::kKill;
  } else if (parts[0] == "sigkill" && parts.size() == 3) {
    o.kind = FaultKind::kSigkill;
  } else {
    return bad();
  }
  auto rank = parse_int(parts[1]);
  auto sends = parse_int(parts[2]);
  if (!rank.ok() || !sends.ok() || *rank < 0 || *sends < 0) return bad();
  o.rank = static_cast<int>(*rank);
  o.after_sends = *sends;
  if (o.kind == FaultKind::kStall) {
    if (parts.size() != 4) return bad();
    auto secs = parse_double(parts[3]);
    if (!secs.ok() || !(*secs >= 0)) return bad();
    o.stall_s = *secs;
  } else if (parts.size() == 4) {
    auto code = parse_int(parts[3]);
    if (!code.ok() || *code < 0 || *code > 255) return bad();
    o.exit_code = static_cast<int>(*code);
  }
  return o;
}

std::unique_ptr<Transport> make_fault_transport(std::unique_ptr<Transport> inner, int rank,
                                                FaultOptions options) {
  if (rank != options.rank) return inner;
  return std::make_unique<FaultTransport>(std::move(inner), options,
                                          std::make_shared<std::atomic<int64_t>>(0));
}

TransportWrapper fault_wrapper(FaultOptions options) {
  return [options](std::unique_ptr<Transport> inner, int rank) {
    return make_fault_transport(std::move(inner), rank, options);
  };
}

}  // namespace tightpipe::testutil
