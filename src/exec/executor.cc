#include "tightpipe/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <deque>
#include <thread>
#include <unordered_map>

#include "tightpipe/base.h"

namespace tightpipe {

Result<EmulatedCompute> EmulatedCompute::parse(std::string_view text) {
  EmulatedCompute c;
  for (const std::string& item : split(text, ',')) {
    const auto kv = split(item, '=');
    if (kv.size() != 2) {
      return Status::invalid_argument(fmt::format(
          "--cost '{}': item '{}' is not key=value; hint: --cost f=1,i=1,w=1 (milliseconds)", text,
          item));
    }
    const std::string key(trim(kv[0]));
    auto v = parse_double(kv[1]);
    if (!v.ok() || *v < 0) {
      return Status::invalid_argument(fmt::format(
          "--cost {}={}: expected a non-negative number of milliseconds", key, trim(kv[1])));
    }
    if (key == "f") {
      c.f_ms = *v;
    } else if (key == "i") {
      c.i_ms = *v;
    } else if (key == "w") {
      c.w_ms = *v;
    } else if (key == "b") {
      c.b_ms = *v;
    } else {
      return Status::invalid_argument(
          fmt::format("--cost: unknown key '{}'; hint: keys are f, i, w, b (milliseconds)", key));
    }
  }
  if (c.b_ms < 0) c.b_ms = c.i_ms + c.w_ms;
  return c;
}

int message_tag(const Schedule& s, bool gradient, int32_t stage, int32_t mb) {
  const int64_t tag =
      (static_cast<int64_t>(gradient ? 1 : 0) * s.num_stages + stage) * s.num_microbatches + mb;
  TP_CHECK(tag < kMaxUserTag, "schedule too large for the tag space: ", tag);
  return static_cast<int>(tag);
}

Executor::Executor(const Schedule& schedule, int32_t rank, Transport& transport,
                   std::map<int32_t, nn::GptStage*> stages, ExecutorOptions options)
    : schedule_(schedule),
      rank_(rank),
      transport_(transport),
      stages_(std::move(stages)),
      options_(options) {
  TP_CHECK(schedule.lowered, "the executor runs lowered schedules");
  TP_CHECK(transport.size() == schedule.num_ranks, "transport size ", transport.size(),
           " != ranks ", schedule.num_ranks);
  if (!options_.emulated) {
    for (int32_t s : schedule.stages_of(rank))
      TP_CHECK(stages_.contains(s), "rank ", rank, " has no model for its stage ", s);
  }
}

namespace {

using Buffer = std::vector<float>;

struct PendingRecv {
  Buffer buf;
  std::unique_ptr<Request> req;
};

struct PendingSend {
  Buffer buf;
  std::unique_ptr<Request> req;
  size_t event = 0;         // index of its SEND event, whose end is set when the send completes
  double completed = -1;    // when a test() first saw it complete (step-relative seconds)
};

std::span<std::byte> bytes_of(Buffer& b) { return std::as_writable_bytes(std::span<float>(b)); }

}  // namespace

Result<RankStepResult> Executor::run_step(int32_t step, double origin, const BatchFetcher& fetch,
                                          float loss_scale) {
  const Schedule& sch = schedule_;
  const auto& prog = sch.programs[rank_];
  const int32_t S = sch.num_stages, M = sch.num_microbatches, v = sch.chunks();
  const double timeout = options_.timeout_s;
  const size_t msg_floats = static_cast<size_t>(options_.message_floats);
  auto key = [M](int32_t stage, int32_t mb) { return static_cast<int64_t>(stage) * M + mb; };
  auto now = [origin] { return now_seconds() - origin; };

  RankStepResult res;
  res.timeline.rank = rank_;
  auto& events = res.timeline.events;
  auto record = [&](const Action* a, std::string name, EventKind kind, Lane lane, double t0,
                    double t1, int32_t peer = -1, int64_t bytes = 0) {
    TimelineEvent e;
    e.name = std::move(name);
    e.kind = kind;
    e.lane = lane;
    if (a) {
      e.stage = a->stage;
      e.microbatch = a->microbatch;
    }
    e.step = step;
    e.start = t0;
    e.end = t1;
    e.peer = peer;
    e.bytes = bytes;
    events.push_back(std::move(e));
    return events.size() - 1;
  };

  std::unordered_map<int64_t, PendingRecv> recv_act, recv_grad;  // posted early (overlap)
  std::unordered_map<int64_t, Buffer> act_in, grad_in;           // inputs ready for compute
  std::unordered_map<int64_t, Buffer> act_out, grad_out;         // outputs waiting for a SEND
  // Posted sends, oldest first. With options_.progress_thread a helper thread tests them while
  // this thread computes: MPI moves a large message only while the sender calls into MPI.
  std::deque<PendingSend> sends;
  std::mutex sends_mu;
  std::atomic<bool> stop_progress{false};
  std::thread progress;
  std::condition_variable sends_cv;
  size_t sends_posted = 0;  // guarded by sends_mu
  if (options_.overlap_p2p && options_.progress_thread) {
    progress = std::thread([&] {
      // Tests incomplete sends at an interval that starts at 200 us when a send is posted or
      // completes and doubles while none completes, up to 1.6 ms: a send whose receiver is busy
      // computing (with Open MPI's single-copy transfer on one machine the receiver pulls the
      // data, and the send completes only after that) costs a few wake-ups instead of one
      // every 200 us, which took a few percent of the cores from compute (docs/design.md).
      constexpr double max_interval_us = 1600;
      std::unique_lock<std::mutex> lock(sends_mu);
      double interval_us = 200;
      size_t seen = 0;  // sends posted so far, to notice new ones
      while (!stop_progress.load()) {
        auto pending = [&] {
          for (auto& p : sends)
            if (p.completed < 0) return true;
          return false;
        };
        if (!pending()) {
          sends_cv.wait_for(lock, std::chrono::milliseconds(5));
          continue;
        }
        if (sends_posted != seen) {
          seen = sends_posted;
          interval_us = 200;
        }
        bool any = false;
        for (auto& p : sends) {
          if (p.completed >= 0) continue;
          auto done = p.req->test();
          if (!done.ok() || !*done) break;  // errors surface on the executor thread
          p.completed = now();
          any = true;
        }
        interval_us = any ? 200 : std::min(max_interval_us, 2 * interval_us);
        sends_cv.wait_for(lock, std::chrono::duration<double, std::micro>(interval_us));
      }
    });
  }
  struct JoinProgress {
    std::atomic<bool>& stop;
    std::thread& t;
    ~JoinProgress() {
      stop = true;
      if (t.joinable()) t.join();
    }
  } join_progress{stop_progress, progress};

  for (auto& [s, stage] : stages_) stage->reset_peak();
  auto stash_total = [&] {
    size_t total = 0;
    for (auto& [s, stage] : stages_) total += stage->stash_bytes();
    return total;
  };
  // After a compute event: the peak, and the stash growth (F) or release (I, W, B) on the event.
  auto track_stash = [&](int64_t before) {
    const size_t total = stash_total();
    res.peak_stash_bytes = std::max(res.peak_stash_bytes, total);
    events.back().bytes = static_cast<int64_t>(total) - before;
  };
  res.peak_stash_bytes = stash_total();

  // Message buffers come from free_buffers_ and go back once consumed or sent.
  auto take_buffer = [&] {
    if (free_buffers_.empty()) return Buffer(msg_floats);
    Buffer b = std::move(free_buffers_.back());
    free_buffers_.pop_back();
    return b;
  };
  auto give_buffer = [&](Buffer& b) {
    if (b.size() == msg_floats) free_buffers_.push_back(std::move(b));
    b = Buffer();
  };
  auto copy_to_buffer = [&](std::span<const float> data) {
    if (data.size() != msg_floats) return Buffer(data.begin(), data.end());
    Buffer b = take_buffer();
    std::copy(data.begin(), data.end(), b.begin());
    return b;
  };
  auto post_recv = [&](const Action& a) {
    const bool grad = a.type == ActionType::kRecvGrad;
    const int32_t src = sch.rank_of(grad ? a.stage + 1 : a.stage - 1);
    PendingRecv p;
    p.buf = take_buffer();
    p.req = transport_.irecv(src, message_tag(sch, grad, a.stage, a.microbatch), bytes_of(p.buf));
    return p;
  };
  if (options_.overlap_p2p) {
    for (const Action& a : prog) {
      if (a.type == ActionType::kRecvAct) recv_act.emplace(key(a.stage, a.microbatch), post_recv(a));
      if (a.type == ActionType::kRecvGrad) recv_grad.emplace(key(a.stage, a.microbatch), post_recv(a));
    }
  }

  auto emulate = [&](double ms) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms / v));
  };
  auto poll_sends = [&]() -> Status {
    std::lock_guard<std::mutex> lock(sends_mu);
    while (!sends.empty()) {
      auto done = sends.front().req->test();
      if (!done.ok()) return done.status();
      if (!*done) break;
      const double c = sends.front().completed;
      events[sends.front().event].end = c >= 0 ? c : now();
      give_buffer(sends.front().buf);  // reusable once the send has completed
      sends.pop_front();
    }
    return OkStatus();
  };
  auto get_batch = [&](const Action& a) -> Result<const Batch*> {
    if (!fetch) return static_cast<const Batch*>(nullptr);
    const double t0 = now();
    auto b = fetch(a.microbatch);
    const double t1 = now();
    record(&a, "data", EventKind::kData, Lane::kData, t0, t1);
    return b;
  };

  // Waits for the message feeding (stage, mb) and moves it into the compute inputs; the wait is
  // the RECV's event on the comm lane.
  auto await_input = [&](bool grad, const Action& consumer) -> Status {
    const Action recv_action{grad ? ActionType::kRecvGrad : ActionType::kRecvAct, consumer.stage,
                             consumer.microbatch};
    const int64_t k = key(consumer.stage, consumer.microbatch);
    auto& posted = grad ? recv_grad : recv_act;
    auto it = posted.find(k);
    TP_CHECK(it != posted.end(), "no receive posted for ", to_string(recv_action));
    const double t0 = now();
    const int32_t src = sch.rank_of(grad ? consumer.stage + 1 : consumer.stage - 1);
    TP_RETURN_IF_ERROR(it->second.req->wait(timeout).with_context(
        fmt::format("waiting for {} from rank {}", to_string(recv_action), src)));
    record(&recv_action, to_string(recv_action), EventKind::kRecv, Lane::kComm, t0, now(), src,
           static_cast<int64_t>(it->second.buf.size() * sizeof(float)));
    (grad ? grad_in : act_in)[k] = std::move(it->second.buf);
    posted.erase(it);
    return OkStatus();
  };

  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const Action& a = prog[pc];
    if (step == options_.fail_step && pc == prog.size() / 2) {
      if (options_.fail_stall_s <= 0) {
        std::fprintf(stderr, "rank %d: exiting in step %d before %s (failure injection)\n", rank_,
                     step, to_string(a).c_str());
        std::fflush(stderr);
        std::_Exit(3);
      }
      std::this_thread::sleep_for(std::chrono::duration<double>(options_.fail_stall_s));
    }
    auto fail = [&](const Status& st) {
      return Status(st.code(), fmt::format("rank {} step {} action {} ({}): {}\n{}", rank_, step,
                                           to_string(a), pc, st.message(),
                                           format_grid(sch, {rank_, static_cast<int32_t>(pc)})));
    };
    const int64_t k = key(a.stage, a.microbatch);
    const int64_t stash_before = static_cast<int64_t>(stash_total());
    nn::GptStage* model = options_.emulated ? nullptr : stages_.at(a.stage);
    switch (a.type) {
      case ActionType::kForward: {
        const Batch* batch = nullptr;
        if (a.stage == 0 || a.stage == S - 1) {  // emulated runs fetch too: loader waits count
          auto b = get_batch(a);
          if (!b.ok()) return fail(b.status());
          batch = *b;
        }
        Buffer input;
        if (a.stage > 0 && sch.rank_of(a.stage - 1) != rank_) {
          if (Status st = await_input(false, a); !st.ok()) return fail(st);
        }
        if (a.stage > 0) {
          auto it = act_in.find(k);
          TP_CHECK(it != act_in.end(), "no input for ", to_string(a));
          input = std::move(it->second);
          act_in.erase(it);
        }
        const double t0 = now();
        std::span<const float> out;
        Buffer emulated_out;
        if (options_.emulated) {
          emulate(options_.costs.f_ms);
          emulated_out.assign(msg_floats, 0.0f);
          out = emulated_out;
        } else {
          nn::StageInput in = a.stage == 0 ? nn::StageInput(std::span<const int32_t>(batch->tokens))
                                           : nn::StageInput(std::span<const float>(input));
          std::span<const int32_t> targets;
          if (a.stage == S - 1) targets = batch->targets;
          auto o = model->forward(a.microbatch, in, targets, loss_scale);
          out = o.activations;
          if (a.stage == S - 1) {
            res.loss += o.loss;
            res.has_loss = true;
          }
        }
        record(&a, to_string(a), EventKind::kForward, Lane::kCompute, t0, now());
        track_stash(stash_before);
        give_buffer(input);  // the stage copied it
        if (a.stage + 1 < S) {
          Buffer copy = copy_to_buffer(out);
          if (sch.rank_of(a.stage + 1) == rank_) {
            act_in[key(a.stage + 1, a.microbatch)] = std::move(copy);  // local hand-off
          } else {
            act_out[k] = std::move(copy);
          }
        }
        break;
      }
      case ActionType::kBackwardInput:
      case ActionType::kBackward: {
        Buffer grad;
        if (a.stage < S - 1 && sch.rank_of(a.stage + 1) != rank_) {
          if (Status st = await_input(true, a); !st.ok()) return fail(st);
        }
        if (a.stage < S - 1) {
          auto it = grad_in.find(k);
          TP_CHECK(it != grad_in.end(), "no output gradient for ", to_string(a));
          grad = std::move(it->second);
          grad_in.erase(it);
        }
        const bool fused = a.type == ActionType::kBackward;
        const double t0 = now();
        std::span<const float> g;
        Buffer emulated_g;
        if (options_.emulated) {
          emulate(fused ? options_.costs.b_ms : options_.costs.i_ms);
          if (a.stage > 0) emulated_g.assign(msg_floats, 0.0f);
          g = emulated_g;
        } else {
          g = fused ? model->backward(a.microbatch, grad) : model->backward_input(a.microbatch, grad);
        }
        record(&a, to_string(a), fused ? EventKind::kBackward : EventKind::kBackwardInput,
               Lane::kCompute, t0, now());
        track_stash(stash_before);
        give_buffer(grad);
        if (a.stage > 0) {
          Buffer copy = copy_to_buffer(g);
          if (sch.rank_of(a.stage - 1) == rank_) {
            grad_in[key(a.stage - 1, a.microbatch)] = std::move(copy);  // local hand-off
          } else {
            grad_out[k] = std::move(copy);
          }
        }
        break;
      }
      case ActionType::kBackwardWeight: {
        const double t0 = now();
        if (options_.emulated) {
          emulate(options_.costs.w_ms);
        } else {
          model->backward_weight(a.microbatch);
        }
        record(&a, to_string(a), EventKind::kBackwardWeight, Lane::kCompute, t0, now());
        track_stash(stash_before);
        break;
      }
      case ActionType::kSendAct:
      case ActionType::kSendGrad: {
        const bool grad = a.type == ActionType::kSendGrad;
        auto& outbox = grad ? grad_out : act_out;
        auto it = outbox.find(k);
        TP_CHECK(it != outbox.end(), "nothing to send for ", to_string(a));
        PendingSend p;
        p.buf = std::move(it->second);
        outbox.erase(it);
        const int32_t dst_stage = grad ? a.stage - 1 : a.stage + 1;
        const int32_t dst = sch.rank_of(dst_stage);
        const int64_t nbytes = static_cast<int64_t>(p.buf.size() * sizeof(float));
        const double t0 = now();
        p.req = transport_.isend(dst, message_tag(sch, grad, dst_stage, a.microbatch),
                                 std::as_bytes(std::span<const float>(p.buf)));
        p.event = record(&a, to_string(a), EventKind::kSend, Lane::kComm, t0, t0, dst, nbytes);
        if (!options_.overlap_p2p) {
          if (Status st = p.req->wait(timeout); !st.ok()) return fail(st);
          events[p.event].end = now();
        } else {
          std::lock_guard<std::mutex> lock(sends_mu);
          sends.push_back(std::move(p));
          ++sends_posted;
          sends_cv.notify_one();
        }
        break;
      }
      case ActionType::kRecvAct:
      case ActionType::kRecvGrad: {
        // Never waits here: the receive is posted (at step start with overlap, else now) and its
        // consumer waits for it just before use.
        auto& posted = a.type == ActionType::kRecvGrad ? recv_grad : recv_act;
        if (!posted.contains(k)) posted.emplace(k, post_recv(a));
        break;
      }
    }
    if (Status st = poll_sends(); !st.ok()) return fail(st);
  }
  // Drain the sends: their buffers must outlive them.
  stop_progress = true;
  sends_cv.notify_one();
  if (progress.joinable()) progress.join();
  for (auto& p : sends) {
    if (Status st = p.req->wait(timeout); !st.ok()) {
      return Status(st.code(), fmt::format("rank {} step {}: draining sends: {}", rank_, step,
                                           st.message()));
    }
    events[p.event].end = p.completed >= 0 ? p.completed : now();
    give_buffer(p.buf);
  }
  sends.clear();
  TP_CHECK(act_in.empty() && grad_in.empty() && act_out.empty() && grad_out.empty() &&
               recv_act.empty() && recv_grad.empty(),
           "rank ", rank_, " ended step ", step, " with unconsumed buffers");
  for (auto& [s, stage] : stages_) res.grad_sq_norm += stage->grad_sq_norm();
  return res;
}

Result<double> Executor::run_forward_only(int32_t n, const BatchFetcher& fetch, float loss_scale) {
  const Schedule& sch = schedule_;
  const int32_t S = sch.num_stages;
  const size_t msg_floats = static_cast<size_t>(options_.message_floats);
  // Evaluation tags sit above the training ones: (2 * S + stage) * n + mb.
  auto tag = [&](int32_t stage, int32_t mb) {
    const int64_t t = (static_cast<int64_t>(2) * S * sch.num_microbatches) + int64_t(stage) * n + mb;
    TP_CHECK(t < kMaxUserTag, "evaluation tag space exhausted");
    return static_cast<int>(t);
  };
  double loss = 0;
  const auto local = sch.stages_of(rank_);
  for (int32_t mb = 0; mb < n; ++mb) {
    std::vector<float> act;
    const Batch* batch = nullptr;
    for (int32_t s : local) {
      nn::GptStage* model = stages_.at(s);
      if (s == 0 || s == S - 1) {
        TP_ASSIGN_OR_RETURN(batch, fetch(mb));
      }
      if (s > 0 && sch.rank_of(s - 1) != rank_) {
        act.assign(msg_floats, 0.0f);
        TP_RETURN_IF_ERROR(recv(transport_, sch.rank_of(s - 1), tag(s, mb),
                                std::as_writable_bytes(std::span<float>(act)), options_.timeout_s)
                               .with_context(fmt::format("rank {} evaluation {}F{}", rank_, s, mb)));
      }
      const int eval_mb = -1 - mb;  // never collides with a training microbatch in flight
      nn::StageInput in = s == 0 ? nn::StageInput(std::span<const int32_t>(batch->tokens))
                                 : nn::StageInput(std::span<const float>(act));
      std::span<const int32_t> targets;
      if (s == S - 1) targets = batch->targets;
      auto out = model->forward(eval_mb, in, targets, loss_scale);
      if (s == S - 1) loss += out.loss;
      std::vector<float> next(out.activations.begin(), out.activations.end());
      model->discard(eval_mb);
      if (s + 1 < S && sch.rank_of(s + 1) != rank_) {
        TP_RETURN_IF_ERROR(send(transport_, sch.rank_of(s + 1), tag(s + 1, mb),
                                std::as_bytes(std::span<const float>(next)), options_.timeout_s)
                               .with_context(fmt::format("rank {} evaluation {}SEND_F{}", rank_, s, mb)));
      }
      act = std::move(next);
    }
  }
  return loss;
}

}  // namespace tightpipe
