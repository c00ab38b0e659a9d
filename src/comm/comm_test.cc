// One parameterized suite over every Transport backend (gloo send_recv_test.cc): "threads" runs
// 4 (or 8) ranks as threads of this process; "mpi" runs when comm_test is started by
// `mpirun -np 4` (ctest label mpi), one rank per process, every process running the same tests in
// the same order. Bodies run on every rank and use EXPECT_* (thread-safe in gtest).
//
// Timing assertions are one-sided or generous (2 cores shared by many processes): lower bounds
// from physics (latency, bandwidth), upper bounds of seconds that only a hang or a spin breaks.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "tightpipe/base.h"
#include "tightpipe/transport.h"
#include "tightpipe/transport_mpi.h"

namespace tightpipe::comm_test {
extern std::shared_ptr<MpiScope> g_mpi;
namespace {

using ::testing::HasSubstr;
using Body = std::function<Status(Transport&)>;

constexpr int kThreadRanks = 4;
constexpr double kLong = 30.0;  // time-out of waits that must succeed

std::vector<std::byte> pattern(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng.next_u64() & 0xff);
  return out;
}

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

Status run_body(Transport& t, const Body& body) {
  Status s = body(t);
  if (!s.ok()) t.abort(s.to_string());
  return s;
}

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (is_mpi() && !g_mpi) GTEST_SKIP() << "mpi instances run under mpirun (ctest -L mpi)";
    if (!is_mpi() && g_mpi) GTEST_SKIP() << "threads instances do not run under mpirun";
  }
  bool is_mpi() const { return GetParam() == "mpi"; }

  // Runs body on every rank of a fresh world; returns the statuses of the ranks this process
  // hosts (threads: all; mpi: this process's). `threads` sets P for the threads backend.
  std::vector<RankStatus> run(const Body& body, std::optional<LinkOptions> link = {},
                              int threads = kThreadRanks) {
    std::vector<RankStatus> out;
    if (is_mpi()) {
      auto t = make_mpi_transport(g_mpi);
      TP_CHECK(t.ok(), t.status().to_string());
      std::unique_ptr<Transport> tr = std::move(*t);
      if (link) tr = make_link_emulator(std::move(tr), *link);
      out.push_back({tr->rank(), run_body(*tr, body)});
      return out;
    }
    auto ts = make_inproc_transports(threads);
    if (link) {
      for (auto& t : ts) t = make_link_emulator(std::move(t), *link);
    }
    std::vector<Status> st = run_on_threads(ts, [&](Transport& t) { return run_body(t, body); });
    for (int r = 0; r < threads; ++r) out.push_back({r, st[r]});
    return out;
  }
};

void expect_all_ok(const std::vector<RankStatus>& res) {
  for (const auto& rs : res)
    EXPECT_TRUE(rs.status.ok()) << "rank " << rs.rank << ": " << rs.status.to_string();
}

TEST_P(TransportTest, PingPong) {
  expect_all_ok(run([](Transport& t) -> Status {
    if (t.rank() > 1) return OkStatus();
    for (size_t n : {0, 1, 7, 4096, 4097, 65536, 1 << 20}) {
      for (int round = 0; round < 3; ++round) {
        const auto msg = pattern(n, n * 10 + round);
        std::vector<std::byte> got(n);
        if (t.rank() == 0) {
          TP_RETURN_IF_ERROR(send(t, 1, 3, msg, kLong));
          TP_RETURN_IF_ERROR(recv(t, 1, 3, got, kLong));
        } else {
          TP_RETURN_IF_ERROR(recv(t, 0, 3, got, kLong));
          TP_RETURN_IF_ERROR(send(t, 0, 3, got, kLong));
        }
        EXPECT_TRUE(got == msg) << "rank " << t.rank() << " size " << n << " round " << round;
      }
    }
    return OkStatus();
  }));
}

// 64 tags, small (eager) and large (rendezvous): received in reverse order of sending.
TEST_P(TransportTest, ManyTagsReceivedInReverse) {
  expect_all_ok(run([](Transport& t) -> Status {
    constexpr int kTags = 64;
    auto size_of = [](int tag) -> size_t { return tag % 2 ? 16 : 9000 + tag; };
    if (t.rank() == 0) {
      std::vector<std::vector<std::byte>> msgs;
      std::vector<std::unique_ptr<Request>> reqs;
      for (int tag = 0; tag < kTags; ++tag) msgs.push_back(pattern(size_of(tag), 1000 + tag));
      for (int tag = 0; tag < kTags; ++tag) reqs.push_back(t.isend(1, tag, msgs[tag]));
      for (auto& r : reqs) TP_RETURN_IF_ERROR(r->wait(kLong));
    } else if (t.rank() == 1) {
      std::vector<std::vector<std::byte>> got(kTags);
      std::vector<std::unique_ptr<Request>> reqs(kTags);
      for (int tag = kTags - 1; tag >= 0; --tag) {
        got[tag].resize(size_of(tag));
        reqs[tag] = t.irecv(0, tag, got[tag]);
      }
      for (int tag = kTags - 1; tag >= 0; --tag) {
        TP_RETURN_IF_ERROR(reqs[tag]->wait(kLong));
        EXPECT_TRUE(got[tag] == pattern(size_of(tag), 1000 + tag)) << "tag " << tag;
      }
    }
    return OkStatus();
  }));
}

// Same (pair, tag): messages match in posting order, across eager and rendezvous sizes, whether
// the sends or the receives are posted first.
TEST_P(TransportTest, SameTagMatchesInPostingOrder) {
  expect_all_ok(run([](Transport& t) -> Status {
    constexpr int kMsgs = 100;
    auto size_of = [](int i) -> size_t { return i % 3 == 0 ? 8192 : 8; };
    for (int sends_first = 0; sends_first < 2; ++sends_first) {
      if (t.rank() == 0) {
        if (!sends_first) sleep_s(0.05);
        std::vector<std::vector<std::byte>> msgs;
        std::vector<std::unique_ptr<Request>> reqs;
        for (int i = 0; i < kMsgs; ++i) msgs.push_back(pattern(size_of(i), i));
        for (int i = 0; i < kMsgs; ++i) reqs.push_back(t.isend(1, 42, msgs[i]));
        for (auto& r : reqs) TP_RETURN_IF_ERROR(r->wait(kLong));
      } else if (t.rank() == 1) {
        if (sends_first) sleep_s(0.05);
        std::vector<std::vector<std::byte>> got(kMsgs);
        std::vector<std::unique_ptr<Request>> reqs;
        for (int i = 0; i < kMsgs; ++i) {
          got[i].resize(size_of(i));
          reqs.push_back(t.irecv(0, 42, got[i]));
        }
        for (int i = kMsgs - 1; i >= 0; --i) TP_RETURN_IF_ERROR(reqs[i]->wait(kLong));
        for (int i = 0; i < kMsgs; ++i) EXPECT_TRUE(got[i] == pattern(size_of(i), i)) << i;
      }
      TP_RETURN_IF_ERROR(barrier(t, kLong));
    }
    return OkStatus();
  }));
}

// Receives posted long before the sends, sends arriving in another order than the receives.
TEST_P(TransportTest, OutOfOrderPosting) {
  expect_all_ok(run([](Transport& t) -> Status {
    const int p = t.size();
    const int to = (t.rank() + 1) % p, from = (t.rank() + p - 1) % p;
    std::vector<std::vector<std::byte>> got(3, std::vector<std::byte>(5000));
    std::vector<std::unique_ptr<Request>> recvs;
    for (int tag = 0; tag < 3; ++tag) recvs.push_back(t.irecv(from, tag, got[tag]));
    sleep_s(0.02 * t.rank());
    std::vector<std::vector<std::byte>> msgs;
    for (int tag = 0; tag < 3; ++tag) msgs.push_back(pattern(5000, 100 * t.rank() + tag));
    std::vector<std::unique_ptr<Request>> sends;
    for (int tag = 2; tag >= 0; --tag) sends.push_back(t.isend(to, tag, msgs[tag]));
    for (int tag = 0; tag < 3; ++tag) {
      TP_RETURN_IF_ERROR(recvs[tag]->wait(kLong));
      EXPECT_TRUE(got[tag] == pattern(5000, 100 * from + tag)) << "tag " << tag;
    }
    for (auto& s : sends) TP_RETURN_IF_ERROR(s->wait(kLong));
    return OkStatus();
  }));
}

TEST_P(TransportTest, LargeMessagesAroundRing) {
  expect_all_ok(run([](Transport& t) -> Status {
    constexpr size_t kBytes = 16u << 20;
    const int p = t.size();
    const int to = (t.rank() + 1) % p, from = (t.rank() + p - 1) % p;
    const auto msg = pattern(kBytes, 77 + t.rank());
    std::vector<std::byte> got(kBytes);
    auto r = t.irecv(from, 0, got);
    auto s = t.isend(to, 0, msg);
    TP_RETURN_IF_ERROR(r->wait(kLong));
    TP_RETURN_IF_ERROR(s->wait(kLong));
    EXPECT_TRUE(got == pattern(kBytes, 77 + from));
    return OkStatus();
  }));
}

TEST_P(TransportTest, AllToAll) {
  expect_all_ok(run([](Transport& t) -> Status {
    const int p = t.size(), me = t.rank();
    const size_t sizes[] = {100, 5000, 70000};
    auto seed = [](int src, int dst, int k) { return uint64_t(src) * 1000 + dst * 10 + k; };
    std::vector<std::vector<std::byte>> out, in;
    std::vector<std::unique_ptr<Request>> reqs;
    std::vector<std::pair<int, int>> expect;  // (src, k) of in[i]
    for (int q = 0; q < p; ++q) {
      if (q == me) continue;
      for (int k = 0; k < 3; ++k) {
        in.emplace_back(sizes[k]);
        expect.push_back({q, k});
        out.push_back(pattern(sizes[k], seed(me, q, k)));
      }
    }
    size_t i_in = 0, i_out = 0;
    for (int q = 0; q < p; ++q) {
      if (q == me) continue;
      for (int k = 0; k < 3; ++k) {
        reqs.push_back(t.irecv(q, k, in[i_in++]));
        reqs.push_back(t.isend(q, k, out[i_out++]));
      }
    }
    for (auto& r : reqs) TP_RETURN_IF_ERROR(r->wait(kLong));
    for (size_t i = 0; i < in.size(); ++i) {
      const auto [src, k] = expect[i];
      EXPECT_TRUE(in[i] == pattern(sizes[k], seed(src, me, k))) << "from " << src << " k " << k;
    }
    return OkStatus();
  }));
}

// Every rank gets the same bits, equal to the sum in rank order; inputs of wildly different
// magnitudes make any other order give different bits.
TEST_P(TransportTest, AllreduceIsDeterministicAndBitIdentical) {
  expect_all_ok(run([](Transport& t) -> Status {
    const int p = t.size();
    auto input = [](int rank, size_t n) {
      Rng rng(31 + rank);
      std::vector<double> v(n);
      for (auto& x : v) {
        x = (rng.uniform_double() - 0.5) * std::pow(10.0, static_cast<int>(rng.below(17)) - 8);
      }
      return v;
    };
    for (size_t n : {size_t{0}, size_t{1}, size_t{3}, size_t{1001}}) {
      for (int rep = 0; rep < 3; ++rep) {
        std::vector<double> data = input(t.rank(), n);
        TP_RETURN_IF_ERROR(allreduce_sum(t, data, kLong));
        std::vector<double> ref = input(0, n);
        for (int r = 1; r < p; ++r) {
          const auto x = input(r, n);
          for (size_t i = 0; i < n; ++i) ref[i] += x[i];
        }
        EXPECT_TRUE(n == 0 || std::memcmp(data.data(), ref.data(), n * sizeof(double)) == 0)
            << "rank " << t.rank() << " n " << n;
      }
    }
    return OkStatus();
  }));
}

// DP x PP on 4 ranks (Megatron's order): the pipeline and data-parallel views of one world
// reduce and exchange among their own members only, with their own rank numbers, even when
// every rank runs both one after the other with no barrier between.
TEST_P(TransportTest, GroupViewsOfDataParallelTimesPipeline) {
  const ParallelLayout layout{.dp = 2, .pp = 2};
  EXPECT_EQ(layout.pipeline_group(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(layout.data_parallel_group(1), (std::vector<int>{2, 3}));
  expect_all_ok(run([&](Transport& t) -> Status {
    if (t.size() != 4) return OkStatus();  // the mpi job of another size
    const int g = t.rank();
    auto pipe = make_group_view(t, layout.pipeline_group(layout.dp_rank(g)));
    auto dp = make_group_view(t, layout.data_parallel_group(layout.pp_rank(g)));
    EXPECT_EQ(pipe->rank(), layout.pp_rank(g));
    EXPECT_EQ(dp->rank(), layout.dp_rank(g));
    EXPECT_EQ(pipe->size(), 2);
    for (int rep = 0; rep < 3; ++rep) {
      double a[1] = {double(1 << g)};
      TP_RETURN_IF_ERROR(allreduce_sum(*pipe, a, kLong));
      EXPECT_EQ(a[0], double((1 << layout.dp_rank(g)) + (1 << (2 + layout.dp_rank(g)))));
      double b[1] = {double(1 << g)};
      TP_RETURN_IF_ERROR(allreduce_sum(*dp, b, kLong));
      EXPECT_EQ(b[0], double(3 << (2 * layout.pp_rank(g))));
      // Same tag in both views: the pair of parent ranks tells them apart.
      int32_t out = 100 + g, in = -1;
      auto in_bytes = std::as_writable_bytes(std::span<int32_t>(&in, 1));
      auto out_bytes = std::as_bytes(std::span<const int32_t>(&out, 1));
      auto r = pipe->irecv(1 - pipe->rank(), 7, in_bytes);
      TP_RETURN_IF_ERROR(send(*pipe, 1 - pipe->rank(), 7, out_bytes, kLong));
      TP_RETURN_IF_ERROR(r->wait(kLong));
      EXPECT_EQ(in, 100 + layout.global(1 - layout.pp_rank(g), layout.dp_rank(g)));
      r = dp->irecv(1 - dp->rank(), 7, in_bytes);
      TP_RETURN_IF_ERROR(send(*dp, 1 - dp->rank(), 7, out_bytes, kLong));
      TP_RETURN_IF_ERROR(r->wait(kLong));
      EXPECT_EQ(in, 100 + layout.global(layout.pp_rank(g), 1 - layout.dp_rank(g)));
    }
    return OkStatus();
  }));
}

// make_group (MPI: MPI_Comm_split; threads: the view) for DP x PP on 4 ranks, every rank asking
// for its pipeline, then its data-parallel group: iallreduce_sum on both, several in flight at
// once and waited in reverse order, gives the sums (2 members: exact, so bit for bit), and the
// groups' messages keep to their members with world rank numbers in errors.
TEST_P(TransportTest, GroupIallreduceSumsBucketsInFlightTogether) {
  const ParallelLayout layout{.dp = 2, .pp = 2};
  expect_all_ok(run([&](Transport& t) -> Status {
    if (t.size() != 4) return OkStatus();  // the mpi job of another size
    const int g = t.rank();
    TP_ASSIGN_OR_RETURN(auto pipe, t.make_group(layout.pipeline_group(layout.dp_rank(g))));
    TP_ASSIGN_OR_RETURN(auto dp, t.make_group(layout.data_parallel_group(layout.pp_rank(g))));
    EXPECT_EQ(pipe->rank(), layout.pp_rank(g));
    EXPECT_EQ(dp->rank(), layout.dp_rank(g));
    EXPECT_EQ(dp->size(), 2);
    // On MPI the groups are communicators of their own, not views of the world.
    if (is_mpi()) {
      EXPECT_THAT(dp->name(), HasSubstr("mpi group {"));
    }
    auto input = [](int rank, size_t n, int salt) {
      Rng rng(1000 * salt + rank);
      std::vector<double> v(n);
      for (auto& x : v) x = (rng.uniform_double() - 0.5) * std::pow(10.0, int(rng.below(9)) - 4);
      return v;
    };
    auto sum_in = [&](Transport& group, const std::vector<int>& members) -> Status {
      const std::vector<size_t> sizes = {0, 1, 3, 1001, 5000};
      std::vector<std::vector<double>> data;
      std::vector<std::unique_ptr<Request>> reqs;
      for (size_t k = 0; k < sizes.size(); ++k) data.push_back(input(g, sizes[k], int(k)));
      for (size_t k = 0; k < sizes.size(); ++k) reqs.push_back(group.iallreduce_sum(data[k]));
      for (size_t k = sizes.size(); k-- > 0;) TP_RETURN_IF_ERROR(reqs[k]->wait(kLong));
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<double> ref = input(members[0], sizes[k], int(k));
        const auto other = input(members[1], sizes[k], int(k));
        for (size_t i = 0; i < ref.size(); ++i) ref[i] += other[i];
        EXPECT_TRUE(ref.empty() ||
                    std::memcmp(ref.data(), data[k].data(), ref.size() * sizeof(double)) == 0)
            << "rank " << g << " bucket " << k;
      }
      return OkStatus();
    };
    // The data-parallel group's on a helper thread (as --overlap-grad-reduce does) while this
    // thread uses the pipeline group: under MPI_THREAD_SERIALIZED too
    // (comm_test_mpi_np4_serialized).
    Status helper;
    std::thread th([&] { helper = sum_in(*dp, layout.data_parallel_group(layout.pp_rank(g))); });
    const Status mine = sum_in(*pipe, layout.pipeline_group(layout.dp_rank(g)));
    th.join();
    TP_RETURN_IF_ERROR(mine);
    TP_RETURN_IF_ERROR(helper);
    // The default collectives still run on the groups (the loss and norm reductions).
    double b[1] = {double(1 << g)};
    TP_RETURN_IF_ERROR(allreduce_sum(*dp, b, kLong));
    EXPECT_EQ(b[0], double(3 << (2 * layout.pp_rank(g))));
    return OkStatus();
  }));
}

// A data-parallel group member that stalls: its partner's iallreduce_sum times out naming the
// group's world ranks and stays usable (it completes once the member joins); a member that
// aborts ends the pending iallreduce_sums of the others with its reason, well within the time-out.
TEST_P(TransportTest, GroupIallreduceTimesOutAndEndsOnAbort) {
  const ParallelLayout layout{.dp = 2, .pp = 2};
  expect_all_ok(run([&](Transport& t) -> Status {
    if (t.size() != 4) return OkStatus();
    const int g = t.rank();
    TP_ASSIGN_OR_RETURN(auto pipe, t.make_group(layout.pipeline_group(layout.dp_rank(g))));
    TP_ASSIGN_OR_RETURN(auto dp, t.make_group(layout.data_parallel_group(layout.pp_rank(g))));
    // 1. Rank 3 joins 1 s late: rank 2 times out at 0.3 s, then completes.
    std::vector<double> x(100, double(g));
    if (g == 3) sleep_s(1.0);
    auto r = dp->iallreduce_sum(x);
    if (g == 2) {
      Status s = r->wait(0.3);
      EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
      // MPI knows the collective, not which rank is missing; the p2p algorithm waits on rank 3.
      EXPECT_THAT(s.message(),
                  HasSubstr(is_mpi() ? "iallreduce_sum of 100 doubles among world ranks {2, 3}"
                                     : "recv from rank 3"));
    }
    TP_RETURN_IF_ERROR(r->wait(kLong));
    EXPECT_EQ(x[99], double(layout.pp_rank(g) == 0 ? 0 + 1 : 2 + 3));
    TP_RETURN_IF_ERROR(barrier(t, kLong));
    // 2. Rank 3 aborts instead of joining: rank 2 (its DP partner) and rank 1 (its pipeline
    // partner) end with its reason; ranks 0's groups need no rank 3.
    if (g == 3) {
      sleep_s(0.2);
      t.abort("replica 1 lost its GPU");
      return OkStatus();
    }
    std::vector<double> a(5000, 1.0), b(5000, 1.0);
    auto ra = dp->iallreduce_sum(a);
    auto rb = pipe->iallreduce_sum(b);
    const double start = now_seconds();
    constexpr double kTimeout = 10.0;
    const Status sa = ra->wait(kTimeout), sb = rb->wait(kTimeout);
    const double took = now_seconds() - start;
    EXPECT_LT(took, 5.0);
    const Status& pending = g == 2 ? sa : sb;  // the one that needs rank 3
    if (g != 0) {
      EXPECT_EQ(pending.code(), StatusCode::kUnavailable) << pending.to_string();
      EXPECT_THAT(pending.message(), HasSubstr("rank 3 aborted: replica 1 lost its GPU"));
      EXPECT_THAT(pending.message(), HasSubstr("allreduce_sum"));
    }
    for (const Status& s : {sa, sb})
      EXPECT_TRUE(s.ok() || s.code() == StatusCode::kUnavailable) << s.to_string();
    return OkStatus();
  }));
}

TEST_P(TransportTest, BroadcastAndBarrier) {
  expect_all_ok(run([](Transport& t) -> Status {
    const int p = t.size();
    for (int root = 0; root < p; ++root) {
      std::vector<std::byte> buf =
          t.rank() == root ? pattern(10000, 5 + root) : std::vector<std::byte>(10000);
      TP_RETURN_IF_ERROR(broadcast(t, root, buf, kLong));
      EXPECT_TRUE(buf == pattern(10000, 5 + root)) << "root " << root;
    }
    // Nobody leaves the barrier before the last rank entered it (one monotonic clock per machine).
    TP_RETURN_IF_ERROR(barrier(t, kLong));
    sleep_s(0.03 * t.rank());
    std::vector<double> enter(p, 0.0);
    enter[t.rank()] = now_seconds();
    const double my_enter = enter[t.rank()];
    TP_RETURN_IF_ERROR(barrier(t, kLong));
    const double leave = now_seconds();
    TP_RETURN_IF_ERROR(allreduce_sum(t, enter, kLong));
    EXPECT_EQ(enter[t.rank()], my_enter);
    EXPECT_GE(leave, *std::max_element(enter.begin(), enter.end())) << "rank " << t.rank();
    return OkStatus();
  }));
}

// A wait that runs out says who, whom, which tag and how many bytes; the request stays usable.
TEST_P(TransportTest, TimeoutNamesRankPeerTagBytesAndRequestStaysUsable) {
  expect_all_ok(run([](Transport& t) -> Status {
    if (t.rank() == 1) {
      std::vector<std::byte> got(16);
      auto r = t.irecv(0, 5, got);
      const double start = now_seconds();
      Status s = r->wait(0.2);
      const double took = now_seconds() - start;
      EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
      EXPECT_THAT(s.message(), HasSubstr("rank 1: recv from rank 0, tag 5, 16 bytes"));
      EXPECT_GE(took, 0.19);
      EXPECT_LT(took, 5.0);
      Result<bool> done = r->test();
      EXPECT_TRUE(done.ok() && !*done);
      TP_RETURN_IF_ERROR(barrier(t, kLong));  // now rank 0 sends
      TP_RETURN_IF_ERROR(r->wait(kLong));
      EXPECT_TRUE(got == pattern(16, 9));
    } else if (t.rank() == 0) {
      // A large send with no receive posted stays pending (rendezvous) and times out too.
      const auto big = pattern(1 << 20, 8);
      auto s2 = t.isend(2, 6, big);
      Status s = s2->wait(0.2);
      EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
      EXPECT_THAT(s.message(), HasSubstr("rank 0: send to rank 2, tag 6, 1048576 bytes"));
      TP_RETURN_IF_ERROR(barrier(t, kLong));
      const auto msg = pattern(16, 9);
      TP_RETURN_IF_ERROR(send(t, 1, 5, msg, kLong));
      TP_RETURN_IF_ERROR(s2->wait(kLong));
    } else {
      TP_RETURN_IF_ERROR(barrier(t, kLong));
      if (t.rank() == 2) {
        std::vector<std::byte> got(1 << 20);
        TP_RETURN_IF_ERROR(recv(t, 0, 6, got, kLong));
        EXPECT_TRUE(got == pattern(1 << 20, 8));
      }
    }
    return OkStatus();
  }));
}

// abort() on one rank ends every other rank's wait promptly with Unavailable naming it and why.
TEST_P(TransportTest, AbortPropagatesPromptly) {
  auto res = run([](Transport& t) -> Status {
    const int p = t.size();
    if (t.rank() == 2) {
      sleep_s(0.1);
      t.abort("disk full on /data");
    }
    std::vector<std::byte> got(64);
    auto r = t.irecv((t.rank() + 1) % p, 9, got);
    const double start = now_seconds();
    Status s = r->wait(kLong);
    const double took = now_seconds() - start;
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr("rank 2 aborted: disk full on /data"));
    EXPECT_THAT(s.message(), HasSubstr(fmt::format("rank {}: recv from rank", t.rank())));
    EXPECT_LT(took, 5.0);
    // Later posts fail at once.
    auto late = t.isend((t.rank() + 1) % p, 9, got);
    Status ls = late->wait(kLong);
    EXPECT_EQ(ls.code(), StatusCode::kUnavailable) << ls.to_string();
    EXPECT_TRUE(t.aborted().has_value());
    return OkStatus();
  });
  expect_all_ok(res);
}

// A rank whose work fails (returns an error) makes every other rank stop with its reason.
TEST_P(TransportTest, FailingRankStopsTheOthers) {
  const double start = now_seconds();
  auto res = run([](Transport& t) -> Status {
    if (t.rank() == 3) return Status::internal("stage 3 exploded");
    std::vector<std::byte> got(64);
    return recv(t, 3, 1, got, kLong);  // rank 3 never sends
  });
  EXPECT_LT(now_seconds() - start, 5.0);
  for (const auto& rs : res) {
    if (rs.rank == 3) {
      EXPECT_EQ(rs.status.code(), StatusCode::kInternal);
    } else {
      EXPECT_EQ(rs.status.code(), StatusCode::kUnavailable) << rs.status.to_string();
      EXPECT_THAT(rs.status.message(), HasSubstr("rank 3 aborted: Internal: stage 3 exploded"));
    }
  }
}

// A rank that stalls (never sends): every waiter returns DeadlineExceeded naming it, in time.
TEST_P(TransportTest, StalledRankGivesDeadlineNotHang) {
  expect_all_ok(run([](Transport& t) -> Status {
    const int stalled = t.size() - 1;
    if (t.rank() == stalled) {
      sleep_s(2.0);
      return OkStatus();
    }
    std::vector<std::byte> got(32);
    const double start = now_seconds();
    Status s = recv(t, stalled, 4, got, 0.3);
    const double took = now_seconds() - start;
    EXPECT_EQ(s.code(), StatusCode::kDeadlineExceeded) << s.to_string();
    EXPECT_THAT(s.message(), HasSubstr(fmt::format("recv from rank {}, tag 4, 32 bytes", stalled)));
    EXPECT_GE(took, 0.29);
    EXPECT_LT(took, 1.5);
    return OkStatus();
  }));
}

TEST_P(TransportTest, SizeMismatchIsAClearError) {
  expect_all_ok(run([](Transport& t) -> Status {
    if (t.rank() == 0) {
      const auto msg = pattern(100, 1);
      TP_RETURN_IF_ERROR(send(t, 1, 1, msg, kLong));  // too big for the receive
      TP_RETURN_IF_ERROR(send(t, 1, 2, msg, kLong));  // too small for the receive
      TP_RETURN_IF_ERROR(send(t, 1, 3, msg, kLong));  // right
    } else if (t.rank() == 1) {
      std::vector<std::byte> small(60), large(200), right(100);
      Status s = recv(t, 0, 1, small, kLong);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_THAT(s.message(), HasSubstr("but the receive buffer is 60 bytes"));
      s = recv(t, 0, 2, large, kLong);
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.to_string();
      EXPECT_THAT(s.message(), HasSubstr("the message is 100 bytes but the receive buffer is 200"));
      TP_RETURN_IF_ERROR(recv(t, 0, 3, right, kLong));  // the pair still works
      EXPECT_TRUE(right == pattern(100, 1));
    }
    return OkStatus();
  }));
}

// Waiters sleep: over a wait of ~1 s, a blocked receiver uses a small fraction of a core.
// threads: 8 ranks on this 2-core machine, CPU time of each waiting thread; mpi: the process.
TEST_P(TransportTest, BlockedReceiversDoNotSpin) {
  auto cpu_s = [this] {
    rusage ru{};
    getrusage(is_mpi() ? RUSAGE_SELF : RUSAGE_THREAD, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
  };
  expect_all_ok(run(
      [&](Transport& t) -> Status {
        TP_RETURN_IF_ERROR(barrier(t, kLong));
        std::vector<std::byte> buf(8);
        if (t.rank() == 0) {
          sleep_s(1.0);
          for (int q = 1; q < t.size(); ++q) TP_RETURN_IF_ERROR(send(t, q, 0, buf, kLong));
          return OkStatus();
        }
        const double wall0 = now_seconds(), cpu0 = cpu_s();
        TP_RETURN_IF_ERROR(recv(t, 0, 0, buf, kLong));
        const double wall = now_seconds() - wall0, cpu = cpu_s() - cpu0;
        EXPECT_GT(wall, 0.5);
        if (t.rank() == 1) {
          std::printf("[ cpu      ] rank 1 used %.1f%% of a core while blocked %.2f s\n",
                      100 * cpu / wall, wall);
        }
        EXPECT_LT(cpu, 0.25 * wall)
            << "rank " << t.rank() << " used " << cpu << " s CPU in " << wall << " s of waiting";
        return OkStatus();
      },
      std::nullopt, 8));
}

// Latency and bandwidth are honoured (lower bounds exact, upper bounds generous) and isend does
// not block the caller.
TEST_P(TransportTest, LinkEmulatorHonoursLatencyAndBandwidth) {
  LinkOptions link;
  link.latency_us = 20000;  // 20 ms
  link.gbps = 0.2;          // 1 MiB takes 41.9 ms
  constexpr size_t kMiB = 1 << 20;
  const double transfer = kMiB * 8.0 / 0.2e9, lat = 0.02;
  expect_all_ok(run(
      [&](Transport& t) -> Status {
        if (t.rank() > 1) return OkStatus();
        std::vector<std::byte> tiny(8);
        const auto big = pattern(kMiB, 3);
        std::vector<std::byte> got(kMiB), got2(kMiB);
        if (t.rank() == 0) {
          EXPECT_THAT(t.name(), HasSubstr("emulated("));
          // Round trip of a tiny message: two latencies.
          for (int i = 0; i < 3; ++i) {
            const double start = now_seconds();
            TP_RETURN_IF_ERROR(send(t, 1, 1, tiny, kLong));
            TP_RETURN_IF_ERROR(recv(t, 1, 1, tiny, kLong));
            const double rtt = now_seconds() - start;
            EXPECT_GE(rtt, 2 * lat * 0.99);
            EXPECT_LT(rtt, 2 * lat + 2.0);
          }
          // Two 1 MiB messages back to back, then a tiny ack: the link carries them one after the
          // other (FIFO), so the ack comes >= 2 transfers + 2 latencies after the first isend.
          const double start = now_seconds();
          auto s1 = t.isend(1, 2, big);
          auto s2 = t.isend(1, 3, big);
          // Blocking until delivery would take >= transfer + latency.
          EXPECT_LT(now_seconds() - start, transfer) << "isend blocked the caller";
          TP_RETURN_IF_ERROR(recv(t, 1, 4, tiny, kLong));
          const double took = now_seconds() - start;
          EXPECT_GE(took, (2 * transfer + 2 * lat) * 0.99);
          EXPECT_LT(took, 2 * transfer + 2 * lat + 2.0);
          TP_RETURN_IF_ERROR(s1->wait(kLong));
          TP_RETURN_IF_ERROR(s2->wait(kLong));
        } else {
          for (int i = 0; i < 3; ++i) {
            TP_RETURN_IF_ERROR(recv(t, 0, 1, tiny, kLong));
            TP_RETURN_IF_ERROR(send(t, 0, 1, tiny, kLong));
          }
          auto r2 = t.irecv(0, 3, got2);  // posted first: tags, not posting order, match
          auto r1 = t.irecv(0, 2, got);
          TP_RETURN_IF_ERROR(r2->wait(kLong));
          TP_RETURN_IF_ERROR(r1->wait(kLong));
          EXPECT_TRUE(got == big && got2 == big);
          TP_RETURN_IF_ERROR(send(t, 0, 4, tiny, kLong));
        }
        return OkStatus();
      },
      link));
}

// An abort also ends a wait on a send the emulator still holds back (not yet on the wire).
TEST_P(TransportTest, LinkEmulatorSendEndsOnAbort) {
  LinkOptions link;
  link.latency_us = 2e6;  // 2 s: the send is still held when the abort comes
  expect_all_ok(run(
      [&](Transport& t) -> Status {
        if (t.rank() > 1) return OkStatus();
        std::vector<std::byte> buf(8);
        if (t.rank() == 1) {
          sleep_s(0.1);
          t.abort("stop");
          return OkStatus();
        }
        auto s = t.isend(1, 0, buf);
        const double start = now_seconds();
        Status st = s->wait(kLong);
        EXPECT_EQ(st.code(), StatusCode::kUnavailable) << st.to_string();
        EXPECT_THAT(st.message(), HasSubstr("rank 0: send to rank 1, tag 0, 8 bytes"));
        EXPECT_THAT(st.message(), HasSubstr("rank 1 aborted: stop"));
        EXPECT_LT(now_seconds() - start, 1.5);
        return OkStatus();
      },
      link));
}

INSTANTIATE_TEST_SUITE_P(Backends, TransportTest, ::testing::Values("threads", "mpi"),
                         [](const auto& info) { return info.param; });

// ---- Not per backend -------------------------------------------------------------------------

TEST(LinkOptionsTest, Parses) {
  auto a = parse_link_options("latency_us=50,gbps=10");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(a->latency_us, 50);
  EXPECT_EQ(a->gbps, 10);
  auto b = parse_link_options(" gbps = 2.5 ");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  EXPECT_EQ(b->latency_us, 0);
  EXPECT_EQ(b->gbps, 2.5);
  EXPECT_EQ(a->to_string(), "latency_us=50,gbps=10");
}

TEST(LinkOptionsTest, BadSpecsSayWhat) {
  auto expect_error = [](std::string_view spec, std::string_view what) {
    auto r = parse_link_options(spec);
    ASSERT_FALSE(r.ok()) << spec;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr(what)) << r.status().message();
  };
  expect_error("latency=50", "unknown key 'latency'");
  expect_error("latency_us=fast", "latency_us = 'fast' is not a number");
  expect_error("latency_us=-1", "latency_us=-1: must be in");
  expect_error("gbps=10,gbps=20", "gbps given twice");
  expect_error("gbps", "has no '='");
  expect_error("", "is empty");
  expect_error("latency_us=50,bw=3", "hint: write e.g. latency_us=50,gbps=10");
}

TEST(TransportKindTest, ParsesNames) {
  EXPECT_EQ(*parse_transport_kind("threads"), TransportKind::kThreads);
  EXPECT_EQ(*parse_transport_kind("mpi"), TransportKind::kMpi);
  auto bad = parse_transport_kind("tcp");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("choose threads or mpi"));
}

TEST(RunWorldTest, ThreadsRunsEveryRankAndReportsFailures) {
  if (g_mpi) GTEST_SKIP();
  WorldOptions opt;
  opt.world_size = 3;
  auto res = run_world(opt, [](Transport& t) -> Status {
    std::vector<double> v = {double(t.rank())};
    TP_RETURN_IF_ERROR(allreduce_sum(t, v, kLong));
    if (v[0] != 3.0) return Status::internal("bad sum");
    if (t.rank() == 1) return Status::io_error("shard 7 unreadable");
    std::vector<std::byte> b(1);
    return recv(t, 1, 0, b, kLong);
  });
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  ASSERT_EQ(res->size(), 3u);
  for (int r = 0; r < 3; ++r) EXPECT_EQ((*res)[r].rank, r);
  EXPECT_EQ((*res)[1].status.code(), StatusCode::kIOError);
  EXPECT_THAT((*res)[0].status.message(), HasSubstr("rank 1 aborted: IOError: shard 7 unreadable"));
  EXPECT_THAT((*res)[2].status.message(), HasSubstr("rank 1 aborted"));

  opt.world_size = 0;
  EXPECT_EQ(run_world(opt, [](Transport&) { return OkStatus(); }).status().code(),
            StatusCode::kInvalidArgument);
}

// The run-level watchdog: a rank that stops reporting progress outside any transport wait (here
// it blocks on a condition nobody signals, as a rank spinning in a library or retrying an
// allocation would) is named, with its step and what it did, on every rank, and run_world returns
// within about the limit although that rank never returns by itself; the peers' own waits are
// much longer than the limit.
TEST(RunWorldTest, WatchdogEndsARankStuckOutsideAnyWaitNamingIt) {
  if (g_mpi) GTEST_SKIP();
  struct Gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
  };
  auto gate = std::make_shared<Gate>();
  WorldOptions opt;
  opt.world_size = 3;
  opt.stall_timeout_s = 0.5;
  const double t0 = now_seconds();
  auto res = run_world(opt, [gate](Transport& t) -> Status {
    std::vector<std::byte> b(1);
    if (t.rank() == 1) {  // stuck: no progress, no wait on a peer, never returns by itself
      report_progress(3, "action 1F2");
      for (int peer : {0, 2}) TP_RETURN_IF_ERROR(send(t, peer, 0, b, kLong));
      std::unique_lock<std::mutex> lock(gate->mu);
      gate->cv.wait(lock, [&] { return gate->open; });
      return OkStatus();
    }
    // The peers report after rank 1 did, then block on it.
    TP_RETURN_IF_ERROR(recv(t, 1, 0, b, kLong));
    report_progress(3, "waiting for rank 1");
    return recv(t, 1, 1, b, kLong);
  });
  const double elapsed = now_seconds() - t0;
  {
    std::lock_guard<std::mutex> lock(gate->mu);  // lets the abandoned thread end
    gate->open = true;
  }
  gate->cv.notify_all();
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  ASSERT_EQ(res->size(), 3u);
  EXPECT_LT(elapsed, kLong / 2) << "the peers' waits ended on their own time-out, not the watchdog";
  const RankStatus& stuck = (*res)[1];
  EXPECT_TRUE(stuck.stuck);
  EXPECT_EQ(stuck.status.code(), StatusCode::kDeadlineExceeded) << stuck.status.to_string();
  EXPECT_THAT(stuck.status.message(), HasSubstr("rank 1 is stuck: no progress for"));
  EXPECT_THAT(stuck.status.message(), HasSubstr("in step 3, action 1F2"));
  EXPECT_THAT(stuck.status.message(), HasSubstr("limit is 0.5 s"));
  for (int r : {0, 2}) {
    EXPECT_FALSE((*res)[r].stuck);
    EXPECT_EQ((*res)[r].status.code(), StatusCode::kUnavailable) << (*res)[r].status.to_string();
    EXPECT_THAT((*res)[r].status.message(), HasSubstr("rank 1 is stuck"));
    EXPECT_THAT((*res)[r].status.message(), HasSubstr("in step 3, action 1F2"));
  }
  // Ranks that report progress are not stuck, however long the run.
  opt.stall_timeout_s = 0.2;
  auto busy = run_world(opt, [](Transport& t) -> Status {
    for (int i = 0; i < 10; ++i) {
      report_progress(i, "computing");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return barrier(t, kLong);
  });
  ASSERT_TRUE(busy.ok());
  for (const RankStatus& rs : *busy) EXPECT_TRUE(rs.status.ok()) << rs.status.to_string();
}

// WorldOptions::wrap decorates every rank's transport, outside the link emulator, before the
// body runs.
TEST(RunWorldTest, ThreadsWrapDecoratesEveryRank) {
  if (g_mpi) GTEST_SKIP();
  WorldOptions opt;
  opt.world_size = 3;
  opt.link = LinkOptions{0, 0};
  std::vector<int> wrapped;
  opt.wrap = [&](std::unique_ptr<Transport> inner, int rank) {
    EXPECT_EQ(inner->rank(), rank);
    EXPECT_THAT(inner->name(), HasSubstr("emulated("));
    wrapped.push_back(rank);
    return make_link_emulator(std::move(inner), LinkOptions{1, 0});
  };
  auto res = run_world(opt, [](Transport& t) -> Status {
    if (t.name().find("emulated(emulated(") == std::string::npos) {
      return Status::internal("not wrapped: " + t.name());
    }
    return barrier(t, kLong);
  });
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  for (const auto& rs : *res) EXPECT_TRUE(rs.status.ok()) << rs.status.to_string();
  EXPECT_EQ(wrapped, (std::vector<int>{0, 1, 2}));
}

TEST(RunWorldTest, ThreadsWithEmulatedLink) {
  if (g_mpi) GTEST_SKIP();
  WorldOptions opt;
  opt.world_size = 2;
  opt.link = LinkOptions{10000, 0};
  auto res = run_world(opt, [](Transport& t) -> Status {
    std::vector<std::byte> b(4);
    const double start = now_seconds();
    const int peer = 1 - t.rank();
    if (t.rank() == 0) {  // a round trip from rank 0's clock: at least two latencies
      TP_RETURN_IF_ERROR(send(t, peer, 0, b, kLong));
      TP_RETURN_IF_ERROR(recv(t, peer, 0, b, kLong));
      if (now_seconds() - start < 0.0198) return Status::internal("faster than the link");
    } else {
      TP_RETURN_IF_ERROR(recv(t, peer, 0, b, kLong));
      TP_RETURN_IF_ERROR(send(t, peer, 0, b, kLong));
    }
    return OkStatus();
  });
  ASSERT_TRUE(res.ok());
  for (const auto& rs : *res) EXPECT_TRUE(rs.status.ok()) << rs.status.to_string();
}

// Under mpirun -np 4 only.
// comm_test_mpi_np4_serialized: MPI provides MPI_THREAD_SERIALIZED only, and the scope knows.
TEST(MpiWorldTest, ThreadLevelIsTheOneProvided) {
  if (!g_mpi) GTEST_SKIP() << "runs under mpirun";
  if (std::getenv("TP_TEST_MPI_SERIALIZED") == nullptr) GTEST_SKIP() << "the serialized job only";
  EXPECT_FALSE(g_mpi->thread_multiple());
}

TEST(MpiWorldTest, RunWorldChecksTheWorldSize) {
  if (!g_mpi) GTEST_SKIP() << "runs under mpirun";
  WorldOptions opt;
  opt.kind = TransportKind::kMpi;
  opt.world_size = g_mpi->world_size() + 1;
  auto bad = run_world(opt, [](Transport&) { return OkStatus(); });
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(),
              HasSubstr(fmt::format("this MPI job has {} processes but the pipeline needs {} ranks",
                                    g_mpi->world_size(), opt.world_size)));
  EXPECT_THAT(bad.status().message(), HasSubstr(fmt::format("mpirun -np {}", opt.world_size)));

  opt.world_size = g_mpi->world_size();
  auto good = run_world(opt, [](Transport& t) -> Status {
    std::vector<double> v = {1.0};
    TP_RETURN_IF_ERROR(allreduce_sum(t, v, kLong));
    if (v[0] != t.size()) return Status::internal("bad sum");
    return OkStatus();
  });
  ASSERT_TRUE(good.ok()) << good.status().to_string();
  ASSERT_EQ(good->size(), 1u);
  EXPECT_EQ((*good)[0].rank, g_mpi->world_rank());
  EXPECT_TRUE((*good)[0].status.ok()) << (*good)[0].status.to_string();
}

}  // namespace
}  // namespace tightpipe::comm_test
