// The run-level watchdog of run_world (WorldOptions::stall_timeout_s): each hosted rank's body
// runs on its own thread and reports where it is (report_progress); the thread that called
// run_world watches them. A rank silent for longer than the limit is stuck: the watchdog aborts
// the world with a message naming it, and returns without waiting for it any longer.
//
// A time-out on every transport wait cannot see a rank that never waits: one spinning in a
// library (OpenBLAS retries a failed buffer allocation forever), computing, or blocked in a call
// that ignores its time-out. Its peers time out and return, but a join on its thread never would.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/world_internal.h"
#include "tightpipe/base.h"
#include "tightpipe/transport.h"

namespace tightpipe {

namespace {

// One rank's last report.
struct Progress {
  std::mutex mu;
  int64_t step = -1;
  std::string what = "starting";
  double at = 0;  // now_seconds() of the last report
};

thread_local Progress* current_progress = nullptr;
std::atomic<bool> left_running{false};

// What the rank threads and the watcher share; a stuck thread keeps it (and the body copy and
// its transport) alive after run_world returned.
struct Watch {
  explicit Watch(std::vector<std::unique_ptr<Transport>> ts,
                 const std::function<Status(Transport&)>& b)
      : transports(std::move(ts)),
        body(b),
        progress(transports.size()),
        statuses(transports.size()),
        done(transports.size(), false) {}
  std::vector<std::unique_ptr<Transport>> transports;
  const std::function<Status(Transport&)> body;
  std::vector<Progress> progress;
  std::mutex mu;  // guards statuses and done
  std::condition_variable cv;
  std::vector<Status> statuses;
  std::vector<bool> done;
};

std::string where(Progress& p) {
  std::lock_guard<std::mutex> lock(p.mu);
  return p.step >= 0 ? fmt::format("in step {}, {}", p.step, p.what) : fmt::format("{}", p.what);
}

}  // namespace

bool ranks_left_running() { return left_running.load(); }

void report_progress(int64_t step, std::string_view what) {
  Progress* p = current_progress;
  if (p == nullptr) return;
  const double now = now_seconds();
  std::lock_guard<std::mutex> lock(p->mu);
  p->step = step;
  p->what.assign(what);
  p->at = now;
}

namespace comm_internal {

std::vector<RankStatus> run_watched(std::vector<std::unique_ptr<Transport>> transports,
                                    const std::function<Status(Transport&)>& body,
                                    double stall_timeout_s) {
  const size_t n = transports.size();
  auto w = std::make_shared<Watch>(std::move(transports), body);
  const double start = now_seconds();
  for (Progress& p : w->progress) p.at = start;
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([w, i] {
      current_progress = &w->progress[i];
      Status s = run_rank_body(*w->transports[i], w->body);
      current_progress = nullptr;
      std::lock_guard<std::mutex> lock(w->mu);
      w->statuses[i] = std::move(s);
      w->done[i] = true;
      w->cv.notify_all();
    });
  }
  // The rank silent the longest is the stuck one: its peers, blocked on it, reported later (and
  // their waits end on their own time-outs, which are shorter than the limit). After the abort
  // the others get `grace` to end; one that does not is stuck too.
  std::vector<bool> stuck(n, false);
  const double grace = std::clamp(stall_timeout_s / 4, 0.5, stall_timeout_s);
  const auto poll = std::chrono::duration<double>(std::clamp(stall_timeout_s / 8, 0.01, 0.5));
  double fired_at = -1;
  int fired_rank = -1;
  auto last_report = [&](size_t i) {
    std::lock_guard<std::mutex> plock(w->progress[i].mu);
    return w->progress[i].at;
  };
  std::unique_lock<std::mutex> lock(w->mu);
  for (;;) {
    size_t open = 0;
    for (size_t i = 0; i < n; ++i) open += !w->done[i] && !stuck[i];
    if (open == 0) break;
    w->cv.wait_for(lock, poll);
    const double now = now_seconds();
    if (fired_at < 0) {
      size_t oldest = n;
      for (size_t i = 0; i < n; ++i) {
        if (w->done[i]) continue;
        if (oldest == n || last_report(i) < last_report(oldest)) oldest = i;
      }
      if (oldest == n || now - last_report(oldest) <= stall_timeout_s) continue;
      const int rank = w->transports[oldest]->rank();
      stuck[oldest] = true;
      fired_at = now;
      fired_rank = rank;
      w->statuses[oldest] = Status::deadline_exceeded(fmt::format(
          "rank {} is stuck: no progress for {:.1f} s (the watchdog's limit is {:g} s) {}; the "
          "run is stopped; hint: the rank is busy in a computation, an allocation that retries "
          "or a call that ignores its time-out (its threads' stacks: gdb -p PID -batch -ex "
          "'thread apply all bt'); under a memory limit, fewer ranks per process",
          rank, now - last_report(oldest), stall_timeout_s, where(w->progress[oldest])));
      w->transports[oldest]->abort(w->statuses[oldest].to_string());
    } else if (now - fired_at > grace) {
      for (size_t i = 0; i < n; ++i) {
        if (w->done[i] || stuck[i]) continue;
        stuck[i] = true;
        w->statuses[i] = Status::deadline_exceeded(fmt::format(
            "rank {} is stuck too: it did not stop within {:g} s of the abort for stuck rank {} "
            "(its last progress {:.1f} s ago, {})",
            w->transports[i]->rank(), grace, fired_rank, now - last_report(i),
            where(w->progress[i])));
      }
    }
  }
  std::vector<RankStatus> out;
  for (size_t i = 0; i < n; ++i) {
    out.push_back({w->transports[i]->rank(), w->statuses[i], static_cast<bool>(stuck[i])});
  }
  lock.unlock();
  for (size_t i = 0; i < n; ++i) {
    if (stuck[i]) {
      left_running = true;
      threads[i].detach();
    } else {
      threads[i].join();
    }
  }
  return out;
}

}  // namespace comm_internal

}  // namespace tightpipe
