// The executor (executor.h): Executor::run_step runs a StepRun, which walks the rank's lowered
// program with one switch over ActionType; what each action waits for comes from dependencies()
// and where its message goes from message_route() (both in the schedule module).
#include "tightpipe/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
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

int message_tag(const Schedule& s, const MessageRoute& m) {
  const int64_t tag =
      (static_cast<int64_t>(m.gradient ? 1 : 0) * s.num_stages + m.dst_stage) * s.num_microbatches +
      m.microbatch;
  TP_CHECK(tag < kMaxUserTag, "schedule too large for the tag space: ", tag);
  return static_cast<int>(tag);
}

Status check_executable(const Schedule& schedule) {
  // More than one direction: every model stage has one copy per direction, and the trainer sums
  // the copies' gradients over the ranks holding them (trainer.h sum_stage_copies), which needs
  // them on distinct ranks (DualPipe: model stage k on ranks k and p-1-k).
  const int32_t per = schedule.stages_per_direction();
  for (int32_t k = 0; schedule.directions > 1 && k < per; ++k) {
    for (int32_t d = 1; d < schedule.directions; ++d) {
      for (int32_t e = 0; e < d; ++e) {
        if (schedule.rank_of(k + d * per) != schedule.rank_of(k + e * per)) continue;
        return Status::failed_precondition(fmt::format(
            "schedule '{}': not executed: the copies of model stage {} in directions {} and {} "
            "(stage ids {} and {}) are both on rank {}; hint: place each direction's copy of a "
            "model stage on its own rank (DualPipe: ranks k and p-1-k)",
            schedule.name, k, e, d, k + e * per, k + d * per, schedule.rank_of(k + d * per)));
      }
    }
  }
  return OkStatus();
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
using Wire = std::vector<nn::Bf16>;  // a bf16 message as it travels (bf16_messages)

bool is_recv(ActionType t) { return t == ActionType::kRecvAct || t == ActionType::kRecvGrad; }

std::span<std::byte> bytes_of(Buffer& b) { return std::as_writable_bytes(std::span<float>(b)); }

// REQUIRES: wire.size() >= in.size(). Debug builds check the model's contract (model.h): in bf16
// mode a value crossing a stage boundary is exactly a bf16, so the conversion loses nothing.
void to_wire(Wire& wire, std::span<const float> in) {
  nn::float_to_bf16(wire, in);
#ifndef NDEBUG
  for (size_t i = 0; i < in.size(); ++i) {
    const float back = nn::bf16_to_float(wire[i]);
    TP_CHECK(
        std::memcmp(&back, &in[i], sizeof(float)) == 0 || (std::isnan(back) && std::isnan(in[i])),
        "bf16 message: value ", i, " = ", in[i], " is not a bf16 (it would travel as ", back,
        "); the model must round stage-boundary values to bf16 in bf16 mode");
  }
#endif
}

// A message entering one of this rank's stages: a posted receive (req set) or, once received or
// handed off locally by another stage of this rank, a ready buffer (req null).
struct Incoming {
  Buffer buf;
  Wire wire;                     // bf16_messages: what the posted receive fills
  std::unique_ptr<Request> req;  // destroyed before buf and wire
};

// An output waiting for its SEND: FP32, or with bf16_messages already converted for the wire.
struct Outgoing {
  Buffer buf;
  Wire wire;
};

struct PendingSend {
  Buffer buf;
  Wire wire;                     // bf16_messages: the bytes sent (buf is then empty)
  std::unique_ptr<Request> req;  // destroyed before buf and wire
  size_t event = 0;              // index of its SEND event, whose end is set when it completes
  double completed = -1;         // when a test() first saw it complete (step-relative seconds)
};

// The posted sends of one step, oldest first. With a progress thread, a helper tests them while
// the rank computes: MPI moves a large message only while the sender calls into MPI.
class SendQueue {
 public:
  SendQueue(bool progress_thread, std::function<double()> now) : now_(std::move(now)) {
    if (progress_thread) thread_ = std::thread([this] { progress_loop(); });
  }
  ~SendQueue() { stop(); }
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  void push(PendingSend p) {
    std::lock_guard<std::mutex> lock(mu_);
    sends_.push_back(std::move(p));
    ++posted_;
    cv_.notify_one();
  }
  // Hands the completed sends at the front, oldest first, to `retire` and drops them.
  Status poll(const std::function<void(PendingSend&)>& retire) {
    std::lock_guard<std::mutex> lock(mu_);
    while (!sends_.empty()) {
      auto done = sends_.front().req->test();
      if (!done.ok()) return done.status();
      if (!*done) break;
      retire(sends_.front());
      sends_.pop_front();
    }
    return OkStatus();
  }
  // Stops the helper thread; the sends still queued are then the caller's (remaining()).
  void stop() {
    stop_ = true;
    cv_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  // REQUIRES: stop() was called.
  std::deque<PendingSend>& remaining() { return sends_; }

 private:
  // Tests incomplete sends at an interval that starts at 200 us when a send is posted or
  // completes and doubles while none completes, up to 1.6 ms: a send whose receiver is busy
  // computing (with Open MPI's single-copy transfer on one machine the receiver pulls the data,
  // and the send completes only after that) costs a few wake-ups instead of one every 200 us,
  // which took a few percent of the cores from compute (docs/design.md).
  void progress_loop() {
    constexpr double kMaxIntervalUs = 1600;
    std::unique_lock<std::mutex> lock(mu_);
    double interval_us = 200;
    size_t seen = 0;  // sends posted so far, to notice new ones
    while (!stop_.load()) {
      const bool pending =
          std::any_of(sends_.begin(), sends_.end(), [](const auto& p) { return p.completed < 0; });
      if (!pending) {
        cv_.wait_for(lock, std::chrono::milliseconds(5));
        continue;
      }
      if (posted_ != seen) {
        seen = posted_;
        interval_us = 200;
      }
      bool any = false;
      for (auto& p : sends_) {
        if (p.completed >= 0) continue;
        auto done = p.req->test();
        if (!done.ok() || !*done) break;  // errors surface on the executor thread
        p.completed = now_();
        any = true;
      }
      interval_us = any ? 200 : std::min(kMaxIntervalUs, 2 * interval_us);
      cv_.wait_for(lock, std::chrono::duration<double, std::micro>(interval_us));
    }
  }

  const std::function<double()> now_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PendingSend> sends_;  // guarded by mu_
  size_t posted_ = 0;              // guarded by mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

// The state of one run_step: the messages in flight, the posted sends and the timeline. Each
// action of the program goes through execute(); what a compute action waits for is what
// dependencies() names, and where a message comes from or goes to is message_route().
class Executor::StepRun {
 public:
  StepRun(Executor& ex, int32_t step, double origin, const BatchFetcher& fetch, float loss_scale)
      : ex_(ex),
        sch_(ex.schedule_),
        step_(step),
        origin_(origin),
        fetch_(fetch),
        loss_scale_(loss_scale),
        msg_floats_(static_cast<size_t>(ex.options_.message_floats)),
        done_(ex.schedule_),
        sends_(ex.options_.overlap_p2p && ex.options_.progress_thread,
               [origin] { return now_seconds() - origin; }) {
    res_.timeline.rank = ex.rank_;
  }

  Result<RankStepResult> run(const std::function<void(int32_t stage)>& grads_done);

 private:
  double now() const { return now_seconds() - origin_; }
  int64_t key(const MessageRoute& m) const { return message_tag(sch_, m); }
  nn::GptStage* model(const Action& a) const {
    return ex_.options_.emulated ? nullptr : ex_.stages_.at(a.stage);
  }

  // The one switch over the action types.
  Status execute(const Action& a);
  Status forward(const Action& a);
  Status backward_input(const Action& a, bool fused);
  Status backward_weight(const Action& a);
  Status send(const Action& a);
  void post_recv(const Action& recv);

  // Inputs and outputs of compute actions.
  Result<const Batch*> fetch_batch(const Action& a);
  Status await_dependencies(const Action& a);
  Status await_recv(const Action& recv);
  Buffer take_input(const Action& a);
  void hand_over_output(const Action& a, std::span<const float> out);

  // Message buffers come from the executor's free list and go back once consumed or sent.
  Buffer take_buffer();
  void give_buffer(Buffer& b);
  Buffer copy_to_buffer(std::span<const float> data);
  Wire take_wire();
  void give_wire(Wire& w);
  // Returns a completed send's buffers to their free lists.
  void give_send(PendingSend& p);
  Status poll_sends();
  Status drain_sends();

  size_t record(const Action* a, std::string name, EventKind kind, Lane lane, double t0, double t1,
                int32_t peer = -1, int64_t bytes = 0);
  double cpu_wait_since_mark() const;
  void note_cpu_wait(double wait);
  int64_t stash_total() const;
  void track_stash(int64_t before);
  void emulate(double ms) const;
  Status fail(size_t pc, const Action& a, const Status& st) const;

  Executor& ex_;
  const Schedule& sch_;
  const int32_t step_;
  const double origin_;
  const BatchFetcher& fetch_;
  const float loss_scale_;
  const size_t msg_floats_;
  RankStepResult res_;
  double cpu_mark_ = -1;  // the thread's run-queue delay when its last compute action ended
  CompletionSet done_;    // this rank's completed actions; a RECV counts once its message arrived
  std::unordered_map<int64_t, Incoming> incoming_;  // by message key (message_tag)
  std::unordered_map<int64_t, Outgoing> outgoing_;  // outputs waiting for their SEND
  SendQueue sends_;
};

Result<RankStepResult> Executor::StepRun::run(
    const std::function<void(int32_t stage)>& grads_done) {
  const auto& prog = sch_.programs[ex_.rank_];
  // Per stage, the program index of its last W, B or OVERLAP_F_B pair's B: its gradients are
  // final after it. Inverted: the stages whose gradients an index finishes.
  std::map<int32_t, size_t> last_grad;
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const Action& a = prog[pc];
    if (a.type == ActionType::kBackward || a.type == ActionType::kBackwardWeight)
      last_grad[a.stage] = pc;
    if (a.type == ActionType::kOverlapFB) last_grad[a.b_stage] = pc;
  }
  std::multimap<size_t, int32_t> grads_final;
  for (const auto& [s, pc] : last_grad) grads_final.emplace(pc, s);
  for (auto& [s, stage] : ex_.stages_) stage->reset_peak();
  res_.peak_stash_bytes = static_cast<size_t>(stash_total());
  cpu_mark_ = res_.cpu_wait_mark = thread_cpu_wait_seconds();
  if (ex_.options_.overlap_p2p) {
    for (const Action& a : prog)
      if (is_recv(a.type)) post_recv(a);
  }
  for (size_t pc = 0; pc < prog.size(); ++pc) {
    const Action& a = prog[pc];
    report_progress(step_, fmt::format("action {} ({} of {} in rank {}'s program)", to_string(a),
                                       pc, prog.size(), ex_.rank_));
    Status st = execute(a);
    if (st.ok() && !is_recv(a.type)) done_.mark(a);
    if (st.ok()) st = poll_sends();
    if (!st.ok()) return fail(pc, a, st);
    if (grads_done) {
      const auto [first, last] = grads_final.equal_range(pc);
      for (auto it = first; it != last; ++it) grads_done(it->second);
    }
  }
  TP_RETURN_IF_ERROR(drain_sends());
  TP_CHECK(incoming_.empty() && outgoing_.empty(), "rank ", ex_.rank_, " ended step ", step_,
           " with unconsumed buffers");
  for (auto& [s, stage] : ex_.stages_) res_.grad_sq_norm += stage->grad_sq_norm();
  return std::move(res_);
}

Status Executor::StepRun::execute(const Action& a) {
  switch (a.type) {
    case ActionType::kForward:
      return forward(a);
    case ActionType::kBackwardInput:
      return backward_input(a, /*fused=*/false);
    case ActionType::kBackward:
      return backward_input(a, /*fused=*/true);
    case ActionType::kBackwardWeight:
      return backward_weight(a);
    case ActionType::kSendAct:
    case ActionType::kSendGrad:
      return send(a);
    case ActionType::kOverlapFB:
      // DualPipe(V)'s pair: its F, then its B, each through the lone action's own path (lowering
      // posted both receives before the pair and puts both sends after it). The F is marked done
      // before the B runs so the B's dependency check sees it; the timeline shows an F and a B.
      for (const Action& sub : sub_actions(a)) {
        TP_RETURN_IF_ERROR(execute(sub));
        done_.mark(sub);
      }
      return OkStatus();
    case ActionType::kRecvAct:
    case ActionType::kRecvGrad:
      // Never waits here: the receive is posted (at step start with overlap, else now) and its
      // consumer waits for it just before use.
      post_recv(a);
      return OkStatus();
  }
  return Status::internal(fmt::format("unknown action type {}", static_cast<int>(a.type)));
}

Status Executor::StepRun::forward(const Action& a) {
  const int64_t stash_before = stash_total();
  const std::optional<MessageRoute> in = message_route(sch_, a, MessageEnd::kIn);
  const std::optional<MessageRoute> out_msg = message_route(sch_, a, MessageEnd::kOut);
  const Batch* batch = nullptr;
  if (!in || !out_msg) {  // tokens (first stage) or targets (last); emulated runs fetch too
    TP_ASSIGN_OR_RETURN(batch, fetch_batch(a));
  }
  TP_RETURN_IF_ERROR(await_dependencies(a));
  Buffer input = take_input(a);
  const double t0 = now();
  const double cpu_wait = cpu_wait_since_mark();
  std::span<const float> out;
  Buffer emulated_out;
  if (ex_.options_.emulated) {
    emulate(ex_.options_.costs.f_ms);
    emulated_out.assign(msg_floats_, 0.0f);
    out = emulated_out;
  } else {
    nn::StageInput stage_in = !in ? nn::StageInput(std::span<const int32_t>(batch->tokens))
                                  : nn::StageInput(std::span<const float>(input));
    std::span<const int32_t> targets;
    if (!out_msg) targets = batch->targets;
    auto o = model(a)->forward(a.microbatch, stage_in, targets, loss_scale_);
    out = o.activations;
    if (!out_msg) {
      res_.loss += o.loss;
      res_.has_loss = true;
      if (!std::isfinite(o.loss) && res_.first_nonfinite_loss_microbatch < 0) {
        res_.first_nonfinite_loss_microbatch = a.microbatch;
      }
    }
  }
  record(&a, to_string(a), EventKind::kForward, Lane::kCompute, t0, now());
  note_cpu_wait(cpu_wait);
  track_stash(stash_before);
  give_buffer(input);  // the stage copied it
  hand_over_output(a, out);
  return OkStatus();
}

// I, or with `fused` B (I then W).
Status Executor::StepRun::backward_input(const Action& a, bool fused) {
  const int64_t stash_before = stash_total();
  TP_RETURN_IF_ERROR(await_dependencies(a));
  Buffer grad = take_input(a);
  const double t0 = now();
  const double cpu_wait = cpu_wait_since_mark();
  std::span<const float> g;
  Buffer emulated_g;
  if (ex_.options_.emulated) {
    emulate(fused ? ex_.options_.costs.b_ms : ex_.options_.costs.i_ms);
    if (message_route(sch_, a, MessageEnd::kOut)) emulated_g.assign(msg_floats_, 0.0f);
    g = emulated_g;
  } else {
    nn::GptStage* m = model(a);
    g = fused ? m->backward(a.microbatch, grad) : m->backward_input(a.microbatch, grad);
  }
  record(&a, to_string(a), fused ? EventKind::kBackward : EventKind::kBackwardInput, Lane::kCompute,
         t0, now());
  note_cpu_wait(cpu_wait);
  track_stash(stash_before);
  give_buffer(grad);
  hand_over_output(a, g);
  return OkStatus();
}

Status Executor::StepRun::backward_weight(const Action& a) {
  const int64_t stash_before = stash_total();
  TP_RETURN_IF_ERROR(await_dependencies(a));
  const double t0 = now();
  const double cpu_wait = cpu_wait_since_mark();
  if (ex_.options_.emulated) {
    emulate(ex_.options_.costs.w_ms);
  } else {
    model(a)->backward_weight(a.microbatch);
  }
  record(&a, to_string(a), EventKind::kBackwardWeight, Lane::kCompute, t0, now());
  note_cpu_wait(cpu_wait);
  track_stash(stash_before);
  return OkStatus();
}

// Posts the send of the output `a` names; without overlap waits for it right away.
Status Executor::StepRun::send(const Action& a) {
  TP_RETURN_IF_ERROR(await_dependencies(a));
  const std::optional<MessageRoute> m = message_route(sch_, a, MessageEnd::kOut);
  TP_CHECK(m.has_value(), "no receiver for ", to_string(a));
  auto it = outgoing_.find(key(*m));
  TP_CHECK(it != outgoing_.end(), "nothing to send for ", to_string(a));
  PendingSend p;
  p.buf = std::move(it->second.buf);
  p.wire = std::move(it->second.wire);
  outgoing_.erase(it);
  const std::span<const std::byte> bytes = ex_.options_.bf16_messages
                                               ? std::as_bytes(std::span<const nn::Bf16>(p.wire))
                                               : std::as_bytes(std::span<const float>(p.buf));
  const int64_t nbytes = static_cast<int64_t>(bytes.size());
  const double t0 = now();
  p.req = ex_.transport_.isend(m->dst_rank, message_tag(sch_, *m), bytes);
  p.event = record(&a, to_string(a), EventKind::kSend, Lane::kComm, t0, t0, m->dst_rank, nbytes);
  if (ex_.options_.overlap_p2p) {
    sends_.push(std::move(p));
    return OkStatus();
  }
  TP_RETURN_IF_ERROR(p.req->wait(ex_.options_.timeout_s));
  res_.timeline.events[p.event].end = now();
  give_send(p);
  return OkStatus();
}

// Posts the receive of a RECV action unless it is posted already (at step start with overlap).
void Executor::StepRun::post_recv(const Action& recv) {
  const std::optional<MessageRoute> m = message_route(sch_, recv, MessageEnd::kIn);
  TP_CHECK(m.has_value(), "no sender for ", to_string(recv));
  const int64_t k = key(*m);
  if (incoming_.contains(k)) return;
  Incoming in;
  std::span<std::byte> into;
  if (ex_.options_.bf16_messages) {
    in.wire = take_wire();
    into = std::as_writable_bytes(std::span<nn::Bf16>(in.wire));
  } else {
    in.buf = take_buffer();
    into = bytes_of(in.buf);
  }
  in.req = ex_.transport_.irecv(m->src_rank, message_tag(sch_, *m), into);
  incoming_.emplace(k, std::move(in));
}

Result<const Batch*> Executor::StepRun::fetch_batch(const Action& a) {
  if (!fetch_) return static_cast<const Batch*>(nullptr);
  const double t0 = now();
  auto b = fetch_(a.microbatch);
  const double t1 = now();
  record(&a, "data", EventKind::kData, Lane::kData, t0, t1);
  return b;
}

// Waits for the messages `a` consumes from other ranks (the RECVs among its dependencies); every
// other dependency is an earlier action of this rank's program.
Status Executor::StepRun::await_dependencies(const Action& a) {
  for (const Action& d : dependencies(sch_, a)) {
    if (is_recv(d.type)) {
      TP_RETURN_IF_ERROR(await_recv(d));
    } else {
      TP_CHECK(done_.has(d), to_string(a), " runs before its dependency ", to_string(d));
    }
  }
  return OkStatus();
}

// Waits for the message of a posted RECV; the wait is the RECV's event on the comm lane.
Status Executor::StepRun::await_recv(const Action& recv) {
  const MessageRoute m = *message_route(sch_, recv, MessageEnd::kIn);
  auto it = incoming_.find(key(m));
  TP_CHECK(it != incoming_.end() && it->second.req, "no receive posted for ", to_string(recv));
  const double t0 = now();
  TP_RETURN_IF_ERROR(
      it->second.req->wait(ex_.options_.timeout_s)
          .with_context(fmt::format("waiting for {} from rank {}", to_string(recv), m.src_rank)));
  Incoming& in = it->second;
  const size_t nbytes = ex_.options_.bf16_messages ? in.wire.size() * sizeof(nn::Bf16)
                                                   : in.buf.size() * sizeof(float);
  record(&recv, to_string(recv), EventKind::kRecv, Lane::kComm, t0, now(), m.src_rank,
         static_cast<int64_t>(nbytes));
  in.req.reset();
  if (ex_.options_.bf16_messages) {  // back to FP32 for the stage (exact)
    in.buf = take_buffer();
    nn::bf16_to_float(in.buf, in.wire);
    give_wire(in.wire);
  }
  done_.mark(recv);
  return OkStatus();
}

// The message compute action `a` consumes, received or handed off locally; empty if none.
Buffer Executor::StepRun::take_input(const Action& a) {
  const std::optional<MessageRoute> m = message_route(sch_, a, MessageEnd::kIn);
  if (!m) return Buffer();
  auto it = incoming_.find(key(*m));
  TP_CHECK(it != incoming_.end() && !it->second.req, "no input for ", to_string(a));
  Buffer b = std::move(it->second.buf);
  incoming_.erase(it);
  return b;
}

// Copies the output of compute action `a` into a message buffer: straight to the consuming stage
// when it lives on this rank (local hand-off), else to wait for the SEND.
void Executor::StepRun::hand_over_output(const Action& a, std::span<const float> out) {
  const std::optional<MessageRoute> m = message_route(sch_, a, MessageEnd::kOut);
  if (!m) return;
  if (m->local()) {
    incoming_[key(*m)] = Incoming{copy_to_buffer(out), Wire(), nullptr};
  } else if (ex_.options_.bf16_messages) {
    TP_CHECK(out.size() == msg_floats_, to_string(a), " output has ", out.size(),
             " values, messages ", msg_floats_);
    Outgoing o;
    o.wire = take_wire();
    to_wire(o.wire, out);
    outgoing_[key(*m)] = std::move(o);
  } else {
    outgoing_[key(*m)] = Outgoing{copy_to_buffer(out), Wire()};
  }
}

Buffer Executor::StepRun::take_buffer() {
  auto& free = ex_.free_buffers_;
  if (free.empty()) return Buffer(msg_floats_);
  Buffer b = std::move(free.back());
  free.pop_back();
  return b;
}

void Executor::StepRun::give_buffer(Buffer& b) {
  if (b.size() == msg_floats_) ex_.free_buffers_.push_back(std::move(b));
  b = Buffer();
}

Buffer Executor::StepRun::copy_to_buffer(std::span<const float> data) {
  if (data.size() != msg_floats_) return Buffer(data.begin(), data.end());
  Buffer b = take_buffer();
  std::copy(data.begin(), data.end(), b.begin());
  return b;
}

Wire Executor::StepRun::take_wire() {
  auto& free = ex_.free_wires_;
  if (free.empty()) return Wire(msg_floats_);
  Wire w = std::move(free.back());
  free.pop_back();
  return w;
}

void Executor::StepRun::give_wire(Wire& w) {
  if (w.size() == msg_floats_) ex_.free_wires_.push_back(std::move(w));
  w = Wire();
}

void Executor::StepRun::give_send(PendingSend& p) {
  p.req.reset();
  give_buffer(p.buf);  // reusable once the send has completed
  give_wire(p.wire);
}

Status Executor::StepRun::poll_sends() {
  auto& events = res_.timeline.events;
  return sends_.poll([&](PendingSend& p) {
    events[p.event].end = p.completed >= 0 ? p.completed : now();
    give_send(p);
  });
}

// Waits for the sends still in flight: their buffers must outlive them.
Status Executor::StepRun::drain_sends() {
  sends_.stop();
  auto& events = res_.timeline.events;
  for (PendingSend& p : sends_.remaining()) {
    if (Status st = p.req->wait(ex_.options_.timeout_s); !st.ok()) {
      return Status(st.code(), fmt::format("rank {} step {}: draining sends: {}", ex_.rank_, step_,
                                           st.message()));
    }
    events[p.event].end = p.completed >= 0 ? p.completed : now();
    give_send(p);
  }
  sends_.remaining().clear();
  return OkStatus();
}

// The run-queue delay of this rank's thread since its previous compute action ended (or the step
// began): time it was ready but waited for a core (timeline.h, TimelineEvent::cpu_wait).
double Executor::StepRun::cpu_wait_since_mark() const {
  const double w = thread_cpu_wait_seconds();
  return w >= 0 && cpu_mark_ >= 0 ? std::max(0.0, w - cpu_mark_) : 0.0;
}

void Executor::StepRun::note_cpu_wait(double wait) {
  res_.timeline.events.back().cpu_wait = wait;
  cpu_mark_ = thread_cpu_wait_seconds();
  res_.cpu_wait_mark = cpu_mark_;
}

size_t Executor::StepRun::record(const Action* a, std::string name, EventKind kind, Lane lane,
                                 double t0, double t1, int32_t peer, int64_t bytes) {
  auto& events = res_.timeline.events;
  TimelineEvent& e = events.emplace_back();
  e.name = std::move(name);
  e.kind = kind;
  e.lane = lane;
  if (a) {
    e.stage = a->stage;
    e.microbatch = a->microbatch;
  }
  e.step = step_;
  e.start = t0;
  e.end = t1;
  e.peer = peer;
  e.bytes = bytes;
  return events.size() - 1;
}

int64_t Executor::StepRun::stash_total() const {
  size_t total = 0;
  for (auto& [s, stage] : ex_.stages_) total += stage->stash_bytes();
  return static_cast<int64_t>(total);
}

// After a compute event: the peak, and the stash growth (F) or release (I, W, B) on the event.
void Executor::StepRun::track_stash(int64_t before) {
  const int64_t total = stash_total();
  res_.peak_stash_bytes = std::max(res_.peak_stash_bytes, static_cast<size_t>(total));
  res_.timeline.events.back().bytes = total - before;
}

// `ms` is a whole rank's share of the model; a stage id is a 1/v part of it (v chunks per rank),
// or a whole share for DualPipe's (a rank's two copies: each microbatch passes through one).
void Executor::StepRun::emulate(double ms) const {
  const double parts = double(sch_.stages_per_direction()) / sch_.num_ranks;
  std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms / parts));
}

Status Executor::StepRun::fail(size_t pc, const Action& a, const Status& st) const {
  return Status(st.code(), fmt::format("rank {} step {} action {} ({}): {}\n{}", ex_.rank_, step_,
                                       to_string(a), pc, st.message(),
                                       format_grid(sch_, {ex_.rank_, static_cast<int32_t>(pc)})));
}

Result<RankStepResult> Executor::run_step(int32_t step, double origin, const BatchFetcher& fetch,
                                          float loss_scale,
                                          const std::function<void(int32_t stage)>& grads_done) {
  StepRun run(*this, step, origin, fetch, loss_scale);
  return run.run(grads_done);
}

Result<double> Executor::run_forward_only(int32_t n, const BatchFetcher& fetch, float loss_scale) {
  const Schedule& sch = schedule_;
  const int32_t S = sch.num_stages;
  const size_t msg_floats = static_cast<size_t>(options_.message_floats);
  // Evaluation tags sit above the training ones: (2 * S + stage) * n + mb.
  auto tag = [&](int32_t stage, int32_t mb) {
    const int64_t t =
        (static_cast<int64_t>(2) * S * sch.num_microbatches) + int64_t(stage) * n + mb;
    TP_CHECK(t < kMaxUserTag, "evaluation tag space exhausted");
    return static_cast<int>(t);
  };
  double loss = 0;
  const auto local = sch.stages_of(rank_);
  Wire wire(options_.bf16_messages ? msg_floats : 0);  // bf16_messages: the bytes on the wire
  for (int32_t mb = 0; mb < n; ++mb) {
    report_progress(-1, fmt::format("evaluation microbatch {} of {}", mb, n));
    std::vector<float> act;
    const Batch* batch = nullptr;
    for (int32_t s : local) {
      // One copy of each model stage evaluates: direction 0's (the others hold the same weights).
      if (sch.direction_of_stage(s) != 0) continue;
      nn::GptStage* model = stages_.at(s);
      const Action f{ActionType::kForward, s, mb};
      const std::optional<MessageRoute> in = message_route(sch, f, MessageEnd::kIn);
      const std::optional<MessageRoute> out = message_route(sch, f, MessageEnd::kOut);
      if (!in || !out) {
        TP_ASSIGN_OR_RETURN(batch, fetch(mb));
      }
      if (in && !in->local()) {
        act.assign(msg_floats, 0.0f);
        const std::span<std::byte> into = options_.bf16_messages
                                              ? std::as_writable_bytes(std::span<nn::Bf16>(wire))
                                              : std::as_writable_bytes(std::span<float>(act));
        TP_RETURN_IF_ERROR(
            recv(transport_, in->src_rank, tag(s, mb), into, options_.timeout_s)
                .with_context(fmt::format("rank {} evaluation {}F{}", rank_, s, mb)));
        if (options_.bf16_messages) nn::bf16_to_float(act, wire);
      }
      const int eval_mb = -1 - mb;  // never collides with a training microbatch in flight
      nn::StageInput stage_in = !in ? nn::StageInput(std::span<const int32_t>(batch->tokens))
                                    : nn::StageInput(std::span<const float>(act));
      std::span<const int32_t> targets;
      if (!out) targets = batch->targets;
      auto o = model->forward(eval_mb, stage_in, targets, loss_scale);
      if (!out) loss += o.loss;
      std::vector<float> next(o.activations.begin(), o.activations.end());
      model->discard(eval_mb);
      if (out && !out->local()) {
        std::span<const std::byte> bytes = std::as_bytes(std::span<const float>(next));
        if (options_.bf16_messages) {
          TP_CHECK(next.size() == msg_floats, "evaluation ", s, "F", mb, " output has ",
                   next.size(), " values, messages ", msg_floats);
          to_wire(wire, next);
          bytes = std::as_bytes(std::span<const nn::Bf16>(wire));
        }
        TP_RETURN_IF_ERROR(
            send(transport_, out->dst_rank, tag(out->dst_stage, mb), bytes, options_.timeout_s)
                .with_context(fmt::format("rank {} evaluation {}SEND_F{}", rank_, s, mb)));
      }
      act = std::move(next);
    }
  }
  return loss;
}

}  // namespace tightpipe
