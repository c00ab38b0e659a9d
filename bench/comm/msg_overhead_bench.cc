// What one pipeline message costs the compute threads of its two ranks with the in-process
// threads transport (the default), for the cost model's LinkCost::overhead of the `this-cpu`
// device (docs/cost_model.md, "Message overhead").
//
// The executor (src/exec/executor.cc) spends, per message between two ranks:
//   sender:   copy_to_buffer() copies the stage's output into a message buffer (it does that for a
//             hand-off on the rank too), then the SEND action's isend(); the send is completed by
//             a later test() (overlap) or wait() (blocking).
//   receiver: irecv() (at step start with overlap, at the RECV action without), then the wait()
//             of the consuming compute action.
// The transport (src/comm/inproc) moves the bytes with one memcpy, in the thread that posts
// second: with overlap the receive is posted first, so the sender copies; without it the send is
// usually first (a large one waits for its receive) and the receiver copies.
//
// This bench replays exactly those calls on two threads, each end timed on its own thread,
// separated by barriers so that neither waits for the other inside a timed region (what is left
// is compute-thread work, not the wall time of a round trip). Both orders are measured. Times are
// thread CPU time (CLOCK_THREAD_CPUTIME_ID: what the thread spent, not the time it was preempted,
// which on a loaded machine dominates the wall clock) less the clock's own cost, medians over the
// messages of a round, then the median (and range) of the rounds. Buffers rotate through a pool
// larger than the last-level cache for the large sizes, as a training step's activations do.
//
// The model charges o at each end, so o = (sender + receiver) / 2 makes the total right.
//
// --run-dir DIR measures the same in a real run instead (`tightpipe train --out-dir DIR`, the
// default overlap mode): on each rank, the gap between two consecutive compute actions of a step
// (less any data fetch in it; pairs where a receive had to wait are left out) holds the executor's
// own bookkeeping plus the message work of the first action's output and the second one's input.
// Grouped by how many of those messages cross ranks (remote_messages(), from the run's
// schedule.csv), the median gap at k ends less the median at 0 ends, over k, is o per end in situ:
// wall time, so it includes what the bench above leaves out (waking a peer, cache traffic with the
// other rank's compute, preemption).
#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "bench_cli.h"
#include "tightpipe/base.h"
#include "tightpipe/schedule.h"
#include "tightpipe/timeline_io.h"
#include "tightpipe/transport.h"

using namespace tightpipe;

namespace {

constexpr double kTimeout = 60;

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The median cost of reading the clock twice (an empty timed region).
double clock_cost() {
  std::vector<double> v;
  for (int i = 0; i < 2001; ++i) {
    const double t0 = thread_cpu_seconds();
    v.push_back(thread_cpu_seconds() - t0);
  }
  return median(std::move(v));
}

// Per-message times of one round, in seconds of thread CPU time.
struct Round {
  std::vector<double> memcpy_only;  // memcpy of the message's bytes, nothing else
  std::vector<double> copy_out;     // sender's copy_to_buffer (included in `sender`)
  std::vector<double> sender;       // copy_to_buffer + isend + completing test/wait
  std::vector<double> receiver;     // irecv + wait
};

struct Summary {
  double memcpy_only = 0, copy_out = 0, sender = 0, receiver = 0;  // medians of round medians
  double per_end_lo = 1e30, per_end_hi = 0;  // range over rounds of (sender + receiver) / 2
  double per_end() const { return (sender + receiver) / 2; }
};

// A pool of message-sized buffers of about `pool_bytes` in all (2 to 64 buffers): 64 MiB makes
// every copy of the larger sizes miss the caches; 0 keeps two buffers, warm.
std::vector<std::vector<std::byte>> pool(size_t bytes, size_t pool_bytes) {
  const size_t count = std::clamp<size_t>(pool_bytes / bytes, 2, 64);
  return std::vector<std::vector<std::byte>>(count, std::vector<std::byte>(bytes, std::byte{1}));
}

// Who comes first. kRecvFirst: the receive is posted before the send (the executor with overlap
// posts its receives at step start), and the receiver is busy when the message comes; kSendFirst:
// the receive is posted after the send (without overlap); kRecvWaiting: as kRecvFirst, but the
// receiver is already asleep in wait() (it waits for the message), so the send must wake it.
enum class Order { kRecvFirst, kSendFirst, kRecvWaiting };
constexpr Order kOrders[] = {Order::kRecvFirst, Order::kSendFirst, Order::kRecvWaiting};
const char* order_name(Order o) {
  return o == Order::kRecvFirst   ? "recv first"
         : o == Order::kSendFirst ? "send first"
                                  : "recv waits";
}

// One round of `messages` messages of `bytes` from rank 0 to rank 1 in `order`.
Status round(Transport& t, std::barrier<>& sync, size_t bytes, int messages, Order order,
             double clock, std::vector<std::vector<std::byte>>& out,
             std::vector<std::vector<std::byte>>& msg, Round& r) {
  const bool sender = t.rank() == 0;
  auto time = [&](auto&& fn) {
    const double t0 = thread_cpu_seconds();
    fn();
    return std::max(0.0, thread_cpu_seconds() - t0 - clock);
  };
  for (int k = 0; k < messages; ++k) {
    std::vector<std::byte>& src = out[k % out.size()];  // the stage's output (sender)
    std::vector<std::byte>& buf = msg[k % msg.size()];  // the message buffer (either end)
    std::unique_ptr<Request> req;
    Status st;
    double mine = 0;
    const bool waiting = order == Order::kRecvWaiting;
    if (!sender && order != Order::kSendFirst) mine += time([&] { req = t.irecv(0, 7, buf); });
    sync.arrive_and_wait();
    if (!sender && waiting) mine += time([&] { st = req->wait(kTimeout); });  // sleeps inside
    if (sender) {
      // Let the receiver fall asleep in wait() first.
      if (waiting) std::this_thread::sleep_for(std::chrono::microseconds(300));
      const double copy = time([&] { std::memcpy(buf.data(), src.data(), bytes); });
      r.copy_out.push_back(copy);
      mine += copy + time([&] { req = t.isend(1, 7, buf); });
    }
    sync.arrive_and_wait();
    if (!sender && !waiting) {
      mine += time([&] {
        if (!req) req = t.irecv(0, 7, buf);
        st = req->wait(kTimeout);
      });
    }
    sync.arrive_and_wait();
    if (sender) mine += time([&] { st = req->wait(kTimeout); });
    TP_RETURN_IF_ERROR(st);
    (sender ? r.sender : r.receiver).push_back(mine);
    if (sender) {  // the reference: memcpy alone, between buffers as long untouched
      const size_t j = k + out.size() / 2;
      r.memcpy_only.push_back(time(
          [&] { std::memcpy(msg[j % msg.size()].data(), out[j % out.size()].data(), bytes); }));
    }
    sync.arrive_and_wait();
  }
  return OkStatus();
}

Result<Summary> measure(size_t bytes, Order order, int rounds, int messages, size_t pool_bytes) {
  auto ts = make_inproc_transports(2);
  std::barrier<> sync(2);
  const double clock = clock_cost();
  std::vector<Round> halves[2];
  halves[0].resize(rounds);
  halves[1].resize(rounds);
  auto st = run_on_threads(ts, [&](Transport& t) -> Status {
    auto out = pool(bytes, pool_bytes);
    auto msg = pool(bytes, pool_bytes);
    for (int i = 0; i < rounds; ++i) {
      TP_RETURN_IF_ERROR(
          round(t, sync, bytes, messages, order, clock, out, msg, halves[t.rank()][i]));
    }
    return OkStatus();
  });
  for (const Status& s : st) TP_RETURN_IF_ERROR(s);
  Summary s;
  std::vector<double> mc, co, se, re;
  for (int i = 0; i < rounds; ++i) {
    const Round& snd = halves[0][i];
    const Round& rcv = halves[1][i];
    mc.push_back(median(snd.memcpy_only));
    co.push_back(median(snd.copy_out));
    se.push_back(median(snd.sender));
    re.push_back(median(rcv.receiver));
    const double end = (se.back() + re.back()) / 2;
    s.per_end_lo = std::min(s.per_end_lo, end);
    s.per_end_hi = std::max(s.per_end_hi, end);
  }
  s.memcpy_only = median(mc);
  s.copy_out = median(co);
  s.sender = median(se);
  s.receiver = median(re);
  return s;
}

// Least squares y = a + b x.
std::pair<double, double> fit_line(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  return {(sy - b * sx) / n, b};
}

// The in-situ estimate from a run directory (see the file comment).
int analyze_run(const std::string& dir, int64_t warmup_steps) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "msg_overhead_bench: %s\n", st.to_string().c_str());
    return 1;
  };
  auto csv = read_file(dir + "/schedule.csv");
  if (!csv.ok()) return fail(csv.status());
  auto sch = parse_csv(*csv, dir + "/schedule.csv");
  if (!sch.ok()) return fail(sch.status());
  std::map<int, std::vector<double>> gaps;  // remote message ends in the gap -> gap, seconds
  int64_t bytes = 0;
  for (int32_t r = 0; r < sch->num_ranks; ++r) {
    auto tl = read_rank_timeline(fmt::format("{}/timeline_rank{}.jsonl", dir, r), r);
    if (!tl.ok()) return fail(tl.status());
    std::vector<const TimelineEvent*> compute, other;
    for (const TimelineEvent& e : tl->events) {
      if (e.step < warmup_steps) continue;
      if (is_compute_kind(e.kind) && parse_action(e.name).ok()) compute.push_back(&e);
      if (e.kind == EventKind::kRecv || e.kind == EventKind::kData) other.push_back(&e);
      if (e.kind == EventKind::kSend) bytes = std::max(bytes, e.bytes);
    }
    auto by_time = [](const TimelineEvent* a, const TimelineEvent* b) {
      return a->step != b->step ? a->step < b->step : a->start < b->start;
    };
    std::sort(compute.begin(), compute.end(), by_time);
    for (size_t k = 0; k + 1 < compute.size(); ++k) {
      const TimelineEvent& a = *compute[k];
      const TimelineEvent& b = *compute[k + 1];
      const Action out = *parse_action(a.name), in = *parse_action(b.name);
      if (a.step != b.step || out.stage >= sch->num_stages || in.stage >= sch->num_stages) continue;
      double gap = b.start - a.end;
      bool waited = false;
      for (const TimelineEvent* o : other) {
        if (o->step != a.step || o->start < a.end || o->start >= b.start) continue;
        if (o->kind == EventKind::kData) gap -= o->end - o->start;
        if (o->kind == EventKind::kRecv && o->end - o->start > 5e-6) waited = true;
      }
      if (waited) continue;
      int ends = 0;
      if (auto m = message_route(*sch, out, MessageEnd::kOut); m && !m->local()) ++ends;
      if (auto m = message_route(*sch, in, MessageEnd::kIn); m && !m->local()) ++ends;
      gaps[ends].push_back(gap);
    }
  }
  std::printf(
      "run %s: %s, p=%d, messages of %s; steps from %lld; wall time between consecutive "
      "compute actions (less data fetches; pairs with a waiting receive left out)\n",
      dir.c_str(), sch->name.c_str(), sch->num_ranks,
      human_bytes(static_cast<double>(bytes)).c_str(), static_cast<long long>(warmup_steps));
  std::printf("%-30s %8s %14s %18s\n", "remote message ends in gap", "pairs", "median gap us",
              "o per end us");
  const double base = gaps.count(0) ? median(gaps[0]) : 0;
  for (const auto& [ends, v] : gaps) {
    std::printf("%-30d %8zu %14.1f", ends, v.size(), median(v) * 1e6);
    if (ends > 0 && gaps.count(0)) std::printf(" %18.1f", (median(v) - base) / ends * 1e6);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> sizes = {8 << 10, 64 << 10, 512 << 10, 4 << 20};
  int rounds = 7;
  int messages = 0;
  int pool_mib = 64;
  bench::Flags flags(
      "Compute-thread time of one pipeline message between two ranks on the in-process threads "
      "transport (copy_to_buffer + isend at the sender, irecv + wait at the receiver, as the "
      "executor does them), side by side with a memcpy of the same bytes; thread CPU time, "
      "medians; three posting orders; a fit time = fixed + bytes / rate. The per-end figure is "
      "LinkCost::overhead for the this-cpu device. --run-dir: the same, in situ, from a run's "
      "timelines.",
      "msg_overhead_bench");
  flags
      .option("--sizes", sizes,
              "message sizes in bytes (default 8192 65536 524288 4194304: above the "
              "transport's 4 KiB eager limit, as a pipeline's activations are)")
      .range(int64_t{1}, int64_t{1} << 28);
  flags.option("--rounds", rounds, "rounds per size and order; the median round is reported")
      .range(1, 1000);
  flags.option("--messages", messages, "messages per round (default: 200 up to 1 MiB, 50 above)")
      .range(1, 100000);
  flags
      .option("--pool-mib", pool_mib,
              "MiB of buffers each end cycles through (2 to 64 buffers); 0: two buffers, so "
              "the copies hit the caches (default 64: they miss, for the larger sizes)")
      .range(0, 4096);
  std::string run_dir;
  int64_t warmup_steps = 3;
  flags.option("--run-dir", run_dir,
               "instead: the in-situ estimate from a `tightpipe train --out-dir` run "
               "(schedule.csv, timeline_rank*.jsonl; overlap mode)");
  flags.option("--warmup-steps", warmup_steps, "with --run-dir: steps left out at the start")
      .range(int64_t{0}, int64_t{1} << 30);
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  if (!run_dir.empty()) return analyze_run(run_dir, warmup_steps);

  std::printf(
      "one message rank 0 -> rank 1, threads transport, %d cores; thread CPU time in us, median "
      "of %d rounds, buffer pool %d MiB. copy_out: the sender's copy of the stage output (a "
      "hand-off on one rank pays it too); - 2 x cp: both ends less two memcpys (locks, matching, "
      "wake-ups); o = (sender + receiver) / 2, [range over rounds]\n",
      static_cast<int>(std::thread::hardware_concurrency()), rounds, pool_mib);
  std::printf("%-12s %-10s %9s %9s %9s %9s %10s %9s %22s\n", "size", "order", "memcpy", "copy_out",
              "sender", "receiver", "both ends", "- 2 x cp", "o per end");
  std::vector<double> xs, ys[std::size(kOrders)];
  for (int64_t size : sizes) {
    const size_t n = static_cast<size_t>(size);
    const int k = messages > 0 ? messages : (n <= (size_t{1} << 20) ? 200 : 50);
    for (size_t order = 0; order < std::size(kOrders); ++order) {
      auto s = measure(n, kOrders[order], rounds, k, static_cast<size_t>(pool_mib) << 20);
      if (!s.ok()) {
        std::fprintf(stderr, "msg_overhead_bench: %s\n", s.status().to_string().c_str());
        return 1;
      }
      const double both = s->sender + s->receiver;
      std::printf("%-12s %-10s %9.2f %9.2f %9.2f %9.2f %10.2f %9.2f %8.2f [%5.2f, %5.2f]\n",
                  human_bytes(static_cast<double>(n)).c_str(), order_name(kOrders[order]),
                  s->memcpy_only * 1e6, s->copy_out * 1e6, s->sender * 1e6, s->receiver * 1e6,
                  both * 1e6, (both - 2 * s->memcpy_only) * 1e6, s->per_end() * 1e6,
                  s->per_end_lo * 1e6, s->per_end_hi * 1e6);
      ys[order].push_back(s->per_end());
    }
    xs.push_back(static_cast<double>(n));
  }
  if (xs.size() >= 2) {
    for (size_t order = 0; order < std::size(kOrders); ++order) {
      const auto [a, b] = fit_line(xs, ys[order]);
      std::printf("fit, %s: o per end = %.2f us + bytes / %.2f GB/s (%.2f us per MiB)\n",
                  order_name(kOrders[order]), a * 1e6, b > 0 ? 1e-9 / b : 0.0, b * (1 << 20) * 1e6);
    }
  }
  return 0;
}
