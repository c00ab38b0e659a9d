// Discrete-event simulator (simulator.h).
#include "tightpipe/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <queue>

#include "tightpipe/flag_checks.h"
#include "tightpipe/prof.h"
#include "tightpipe/schedule_torch.h"

namespace tightpipe {

std::string_view comm_mode_name(CommMode mode) {
  switch (mode) {
    case CommMode::kOverlap:
      return "overlap";
    case CommMode::kBlocking:
      return "blocking";
  }
  return "?";
}

Result<CommMode> parse_comm_mode(std::string_view text) {
  if (text == "overlap") return CommMode::kOverlap;
  if (text == "blocking") return CommMode::kBlocking;
  return Status::invalid_argument(
      fmt::format("--comm-mode '{}' is not known; hint: overlap or blocking", text));
}

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kNone:
      return "none";
    case Recompute::kFull:
      return "full";
  }
  return "?";
}

Result<Recompute> parse_recompute(std::string_view text) {
  if (text == "none") return Recompute::kNone;
  if (text == "full") return Recompute::kFull;
  return Status::invalid_argument(
      fmt::format("--recompute '{}' is not known; hint: none or full", text));
}

double overlap_fb_time(double f, double b, double factor) {
  return f + b - factor * std::min(f, b);
}

Status check_overlap_fb_factor(double factor) {
  return check_number_range("--overlap-fb-factor", factor, 0, 1,
                            "0: a pair costs F + B, 1: the shorter of the two is hidden entirely");
}

EventKind event_kind(ActionType t) {
  switch (t) {
    case ActionType::kForward:
      return EventKind::kForward;
    case ActionType::kBackwardInput:
      return EventKind::kBackwardInput;
    case ActionType::kBackwardWeight:
      return EventKind::kBackwardWeight;
    case ActionType::kBackward:
      return EventKind::kBackward;
    case ActionType::kSendAct:
    case ActionType::kSendGrad:
      return EventKind::kSend;
    case ActionType::kRecvAct:
    case ActionType::kRecvGrad:
      return EventKind::kRecv;
    case ActionType::kOverlapFB:
      return EventKind::kOther;  // recorded as its two sub-actions
  }
  return EventKind::kOther;
}

namespace {

bool is_send(ActionType t) { return t == ActionType::kSendAct || t == ActionType::kSendGrad; }
bool is_recv(ActionType t) { return t == ActionType::kRecvAct || t == ActionType::kRecvGrad; }

// The message a SEND or RECV carries; nullopt for one at the ends of the pipeline.
std::optional<MessageRoute> comm_route(const Schedule& sch, const Action& a) {
  return message_route(sch, a, is_send(a.type) ? MessageEnd::kOut : MessageEnd::kIn);
}

// The RECV matching a SEND, and the SEND matching a RECV. REQUIRES: a checked comm action.
Action matching(const Schedule& sch, const Action& a) {
  const MessageRoute m = *comm_route(sch, a);
  return is_send(a.type) ? m.recv() : m.send();
}

// to_string(a) without fmt: this runs once per simulated action.
std::string action_name(const Action& a) {
  char buf[40];
  char* p = std::to_chars(buf, buf + 12, a.stage).ptr;
  const std::string_view t = action_type_name(a.type);
  std::memcpy(p, t.data(), t.size());
  p += t.size();
  p = std::to_chars(p, buf + sizeof(buf), a.microbatch).ptr;
  return std::string(buf, p);
}

struct Event {
  double time;
  uint64_t seq;
  Action action;
  int32_t rank;
  bool occupies;         // the rank's program counter was held by this action
  uint64_t version = 0;  // shared cores: the rank's compute end this event stands for (0: none)
};

struct Later {
  bool operator()(const Event& a, const Event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

class Simulator {
 public:
  // calls: Megatron's p2p calls (megatron_p2p_calls) when the messages run as calls; else null.
  Simulator(const Schedule& sch, const CostModel& cost, const SimOptions& opt,
            const std::vector<std::vector<int32_t>>* calls = nullptr)
      : sch_(sch),
        cost_(cost),
        opt_(opt),
        calls_(calls),
        overlap_(opt.comm_mode == CommMode::kOverlap),
        shared_(cores_shared(opt.core_sharing, sch.num_ranks * opt.data_parallel.size)),
        P_(sch.num_ranks),
        S_(sch.num_stages),
        M_(sch.num_microbatches),
        done_(sch) {}

  Status check_input() {
    if (P_ <= 0 || S_ <= 0 || M_ <= 0 || static_cast<int32_t>(sch_.programs.size()) != P_ ||
        static_cast<int32_t>(sch_.stage_to_rank.size()) != S_) {
      return Status::invalid_argument(
          fmt::format("simulate: schedule '{}' has an inconsistent shape (ranks={}, stages={}, "
                      "microbatches={}, {} programs, {} stage placements)",
                      sch_.name, P_, S_, M_, sch_.programs.size(), sch_.stage_to_rank.size()));
    }
    if (sch_.directions < 1 || S_ % sch_.directions != 0 || M_ % sch_.directions != 0) {
      return Status::invalid_argument(fmt::format(
          "simulate: schedule '{}' has {} directions for {} stages and {} microbatches (they "
          "must divide both)",
          sch_.name, sch_.directions, S_, M_));
    }
    TP_RETURN_IF_ERROR(cost_.covers(sch_));
    if (!opt_.rank_start.empty()) {
      if (static_cast<int32_t>(opt_.rank_start.size()) != P_) {
        return Status::invalid_argument(
            fmt::format("simulate: {} rank start times for {} ranks", opt_.rank_start.size(), P_));
      }
      for (int32_t r = 0; r < P_; ++r) {
        if (!(std::isfinite(opt_.rank_start[r]) && opt_.rank_start[r] >= 0)) {
          return Status::invalid_argument(
              fmt::format("simulate: rank {} starts at {}: must be finite and not negative", r,
                          opt_.rank_start[r]));
        }
      }
    }
    for (int32_t s = 0; s < S_; ++s) {
      if (sch_.stage_to_rank[s] < 0 || sch_.stage_to_rank[s] >= P_) {
        return Status::invalid_argument(
            fmt::format("simulate: stage {} is placed on rank {}, outside 0..{}", s,
                        sch_.stage_to_rank[s], P_ - 1));
      }
    }
    bool has_comm = false;
    for (int32_t r = 0; r < P_; ++r) {
      const auto& prog = sch_.programs[r];
      for (size_t k = 0; k < prog.size(); ++k) {
        const Action& a = prog[k];
        auto where = [&] {
          return fmt::format("simulate: rank {} step {} action {}", r, k, to_string(a));
        };
        for (const Action& sub : sub_actions(a)) {
          if (sub.stage < 0 || sub.stage >= S_ || sub.microbatch < 0 || sub.microbatch >= M_) {
            return Status::invalid_argument(fmt::format(
                "{}: stage or microbatch out of range (stages 0..{}, microbatches 0..{})", where(),
                S_ - 1, M_ - 1));
          }
          if (sch_.stage_to_rank[sub.stage] != r) {
            return Status::invalid_argument(fmt::format("{}: stage {} lives on rank {}", where(),
                                                        sub.stage, sch_.stage_to_rank[sub.stage]));
          }
        }
        if (is_comm(a.type)) {
          has_comm = true;
          if (!comm_route(sch_, a)) {
            return Status::invalid_argument(fmt::format(
                "{}: there is no stage on the other end (stages 0..{})", where(), S_ - 1));
          }
        }
      }
    }
    if (has_comm && !sch_.lowered) {
      return Status::invalid_argument(fmt::format(
          "simulate: schedule '{}' holds SEND/RECV actions but is not marked lowered", sch_.name));
    }
    if (!sch_.lowered) {
      // Whether some message crosses ranks and costs link time or compute overhead.
      std::string_view costly;
      for (int32_t s = 0; s < S_ && costly.empty(); ++s) {
        const auto m = message_route(sch_, {ActionType::kForward, s, 0}, MessageEnd::kOut);
        if (!m || m->local()) continue;
        if (cost_.message_time(m->src_stage, m->dst_stage) > 0) {
          costly = "its messages take time";
        } else if (cost_.link().overhead > 0) {
          costly = "its messages cost compute time (link overhead)";
        }
      }
      if (!costly.empty() || !overlap_) {
        return Status::invalid_argument(fmt::format(
            "simulate: schedule '{}' is compute-only but {}; hint: lower() it first so SEND/RECV "
            "actions carry the messages",
            sch_.name, !costly.empty() ? costly : "--comm-mode blocking needs SEND/RECV"));
      }
    }
    return OkStatus();
  }

  Result<SimResult> run() {
    TP_RETURN_IF_ERROR(check_input());
    const size_t keys = static_cast<size_t>(kNumActionTypes) * S_ * M_;
    wait_head_.assign(keys, -1);
    send_start_.assign(keys, -1.0);
    send_posted_.assign(calls_ ? keys : 0, -1.0);
    posted_at_.assign(keys, -1.0);
    wait_next_.assign(P_, -1);
    call_left_.assign(P_, 0);
    waiting_on_.assign(P_, -1);
    pc_.assign(P_, 0);
    lane_free_.assign(P_, 0.0);
    held_.assign(P_, 0.0);
    first_start_.assign(P_, std::numeric_limits<double>::infinity());
    rank_end_.assign(P_, 0.0);
    grads_done_.assign(S_, -1.0);
    busy_.assign(P_, BusyUnion{});
    running_.assign(P_, Running{});
    res_.ranks.resize(P_);
    res_.schedule = sch_.name;
    res_.num_ranks = P_;
    res_.num_stages = S_;
    res_.num_microbatches = M_;
    res_.comm_mode = opt_.comm_mode;
    res_.data_parallel = opt_.data_parallel;
    res_.core_sharing = opt_.core_sharing;
    res_.optimizer_post_validation = opt_.optimizer_post_validation;
    res_.recompute = opt_.recompute;
    res_.cost_source = cost_.source();
    res_.time_unit = cost_.time_unit();
    // One microbatch through one rank's share of the model. DualPipe's ranks hold a copy per
    // direction, but a microbatch passes through one: its unit is one direction's share.
    res_.activation_unit_bytes = cost_.activation_unit_bytes(P_) / sch_.directions;
    res_.real_bytes = cost_.real_bytes();
    res_.timeline.time_unit = cost_.time_unit();
    if (opt_.record_timeline) {
      res_.timeline.ranks.resize(P_);
      comm_events_.resize(P_);
      for (int32_t r = 0; r < P_; ++r) {
        size_t comm = 0;
        for (const Action& a : sch_.programs[r]) comm += is_comm(a.type);
        res_.timeline.ranks[r].rank = r;
        res_.timeline.ranks[r].events.reserve(sch_.programs[r].size());
        comm_events_[r].reserve(comm);
      }
    }
    for (int32_t r = 0; r < P_; ++r) {
      RankSimStats& st = res_.ranks[r];
      st.rank = r;
    }
    for (int32_t s = 0; s < S_; ++s) {
      const StageCost& c = cost_.stage(s);
      res_.ranks[sch_.stage_to_rank[s]].static_bytes +=
          c.param_bytes + c.grad_bytes + c.optimizer_bytes;
    }
    // Start every rank at its start (0 unless given) in rank order, then drain the queue.
    for (int32_t r = 0; r < P_; ++r) {
      const double t0 = opt_.rank_start.empty() ? 0.0 : opt_.rank_start[r];
      lane_free_[r] = rank_end_[r] = t0;
      advance(r, t0);
    }
    while (!queue_.empty()) {
      Event e = queue_.top();
      queue_.pop();
      process(e);
    }
    TP_RETURN_IF_ERROR(check_finished());
    finish_stats();
    return std::move(res_);
  }

 private:
  size_t key(const Action& a) const {
    return (static_cast<size_t>(a.type) * S_ + a.stage) * M_ + a.microbatch;
  }

  void push(double time, const Action& a, int32_t rank, bool occupies, uint64_t version = 0) {
    queue_.push(Event{time, seq_++, a, rank, occupies, version});
  }

  // ----- shared cores (SimOptions::core_sharing) -----
  // Each rank runs at most one compute action at a time; `running_[r]` is it. At every start and
  // end of one, the running ones are brought up to `now` at the old rate, then re-timed at the
  // new one: a fresh version each, so the events of their earlier ends are ignored.
  struct Running {
    bool on = false;
    Action action;
    double start = 0;
    double left = 0;       // work left, in cost-model time at full speed
    double since = 0;      // when `left` was last brought up to date
    double f_share = 0;    // OVERLAP_F_B: the F's share of the pair's time
    uint64_t version = 0;  // of the event that ends it
  };

  // The speed of each running action: the replicas run in step (data parallelism), so d times
  // as many ranks compute as this replica's.
  double rate() const {
    return shared_core_rate(opt_.core_sharing, computing_ * opt_.data_parallel.size);
  }

  void settle(double now) {
    const double rate = this->rate();
    for (Running& run : running_) {
      if (!run.on) continue;
      run.left = std::max(0.0, run.left - (now - run.since) * rate);
      run.since = now;
    }
  }

  void retime(double now) {
    const double rate = this->rate();
    for (int32_t r = 0; r < P_; ++r) {
      Running& run = running_[r];
      if (!run.on) continue;
      run.version = ++versions_;
      push(now + run.left / rate, run.action, r, true, run.version);
    }
  }

  // Starts rank r's compute action `a` of `work` cost-model time at `now`.
  void start_shared(int32_t r, const Action& a, double now, double work, double f_share) {
    settle(now);
    running_[r] = Running{true, a, now, work, now, f_share, 0};
    ++computing_;
    retime(now);
  }

  // The end of rank r's shared compute action at `now`: recorded with the start it had; the
  // others re-timed.
  void end_shared(int32_t r, double now) {
    settle(now);
    Running& run = running_[r];
    run.on = false;
    --computing_;
    res_.ranks[r].last_end = now;
    if (run.action.type == ActionType::kOverlapFB) {
      const SubActions subs = sub_actions(run.action);
      const double mid = run.start + run.f_share * (now - run.start);
      record(r, subs.at[0], Lane::kCompute, run.start, mid);
      record(r, subs.at[1], Lane::kCompute, mid, now);
    } else {
      record(r, run.action, Lane::kCompute, run.start, now);
    }
    retime(now);
  }

  void record(int32_t rank, const Action& a, Lane lane, double start, double end) {
    res_.makespan = std::max(res_.makespan, end);
    rank_end_[rank] = std::max(rank_end_[rank], end);
    if (lane == Lane::kCompute) busy_[rank].add(start, end);
    if (lane == Lane::kCompute &&
        (a.type == ActionType::kBackwardWeight || a.type == ActionType::kBackward)) {
      grads_done_[a.stage] = std::max(grads_done_[a.stage], end);
    }
    if (!opt_.record_timeline) return;
    auto& events = lane == Lane::kCompute ? res_.timeline.ranks[rank].events : comm_events_[rank];
    TimelineEvent& ev = events.emplace_back();
    ev.name = action_name(a);
    ev.kind = event_kind(a.type);
    ev.lane = lane;
    ev.stage = a.stage;
    ev.microbatch = a.microbatch;
    ev.start = start;
    ev.end = end;
    if (is_comm(a.type)) {
      const MessageRoute m = *comm_route(sch_, a);
      ev.peer = is_send(a.type) ? m.dst_rank : m.src_rank;
      ev.bytes = cost_.message_bytes(m.src_stage, m.dst_stage);
    }
  }

  void note_memory(int32_t r, double delta) {
    held_[r] += delta;
    RankSimStats& st = res_.ranks[r];
    st.peak_activation_bytes = std::max(st.peak_activation_bytes, held_[r]);
  }

  void account_memory(int32_t r, const Action& a) {
    const StageCost& c = cost_.stage(a.stage);
    const bool rc = opt_.recompute == Recompute::kFull;
    switch (a.type) {
      case ActionType::kForward:
        note_memory(r, rc ? c.input_bytes : c.act_bytes);
        break;
      case ActionType::kBackwardInput:
        if (rc) note_memory(r, c.act_bytes);  // re-run forward
        note_memory(r, c.act_after_i_bytes - c.act_bytes - (rc ? c.input_bytes : 0.0));
        break;
      case ActionType::kBackwardWeight:
        note_memory(r, -c.act_after_i_bytes);
        break;
      case ActionType::kBackward:
        if (rc) note_memory(r, c.act_bytes);
        note_memory(r, -c.act_bytes - (rc ? c.input_bytes : 0.0));
        break;
      case ActionType::kSendAct:
      case ActionType::kRecvAct:
      case ActionType::kSendGrad:
      case ActionType::kRecvGrad:
        break;
      case ActionType::kOverlapFB:  // the F adds, then the B frees
        for (const Action& sub : sub_actions(a)) account_memory(r, sub);
        break;
    }
  }

  // Runs rank r's program from its program counter as far as it can at time `now`.
  void advance(int32_t r, double now) {
    const auto& prog = sch_.programs[r];
    while (pc_[r] < prog.size()) {
      const Action& a = prog[pc_[r]];
      if (calls_ && is_comm(a.type)) {
        post_call(r, now);
        return;
      }
      const bool post_only = is_recv(a.type);  // a RECV never holds the lane; its consumer waits
      if (!post_only) {
        for (const Action& d : dependencies(sch_, a)) {
          if (!done_.has(d)) {
            const size_t k = key(d);
            waiting_on_[r] = static_cast<int64_t>(k);
            wait_next_[r] = wait_head_[k];
            wait_head_[k] = r;
            return;
          }
        }
      }
      ++pc_[r];
      ++res_.actions;
      RankSimStats& st = res_.ranks[r];
      switch (a.type) {
        case ActionType::kForward:
        case ActionType::kBackwardInput:
        case ActionType::kBackwardWeight:
        case ActionType::kBackward: {
          const double dur = cost_.action_time(sch_, a, opt_.recompute);
          first_start_[r] = std::min(first_start_[r], now);
          ++st.compute_actions;
          account_memory(r, a);
          if (shared_) {
            start_shared(r, a, now, dur, 0);
            return;
          }
          st.last_end = now + dur;
          record(r, a, Lane::kCompute, now, now + dur);
          push(now + dur, a, r, true);
          return;
        }
        case ActionType::kOverlapFB: {
          // One unit on the lane: F + B, less what the hardware overlaps (SimOptions). Recorded
          // as its F then its B, each scaled to its share, so that timelines, bubble metrics and
          // reports see only the actions they know.
          const SubActions subs = sub_actions(a);
          const double tf = cost_.action_time(sch_, subs.at[0], opt_.recompute);
          const double tb = cost_.action_time(sch_, subs.at[1], opt_.recompute);
          const double dur = overlap_fb_time(tf, tb, opt_.overlap_fb_factor);
          const double scale = tf + tb > 0 ? dur / (tf + tb) : 0.0;
          first_start_[r] = std::min(first_start_[r], now);
          st.compute_actions += 2;
          account_memory(r, a);
          if (shared_) {
            start_shared(r, a, now, dur, dur > 0 ? tf * scale / dur : 0.0);
            return;
          }
          st.last_end = now + dur;
          record(r, subs.at[0], Lane::kCompute, now, now + tf * scale);
          record(r, subs.at[1], Lane::kCompute, now + tf * scale, now + dur);
          push(now + dur, a, r, true);
          return;
        }
        case ActionType::kSendAct:
        case ActionType::kSendGrad: {
          const MessageRoute m = *comm_route(sch_, a);
          const double dur = cost_.message_time(m.src_stage, m.dst_stage);
          send_start_[key(a)] = now;
          ++st.messages_sent;
          st.bytes_sent += cost_.message_bytes(m.src_stage, m.dst_stage);
          st.comm += dur;
          record(r, a, Lane::kComm, now, now + dur);
          push(now + dur, a, r, !overlap_);
          if (!overlap_) return;
          break;
        }
        case ActionType::kRecvAct:
        case ActionType::kRecvGrad: {
          // In both modes a RECV is a post and the rank goes on; the compute action that consumes
          // the message waits for it (as the executor does). Blocking mode differs in the SENDs.
          posted_at_[key(a)] = now;
          ++outstanding_recvs_;
          if (done_.has(matching(sch_, a))) push(now, a, r, false);
          break;
        }
      }
    }
  }

  // Megatron's p2p call at rank r's program counter (SimOptions::engine): every SEND and RECV of
  // the call is posted now; a message crosses once both its ends are posted (a rendezvous); the
  // rank's lane waits until every operation of the call has completed.
  void post_call(int32_t r, double now) {
    const auto& prog = sch_.programs[r];
    const int32_t id = (*calls_)[r][pc_[r]];
    while (pc_[r] < prog.size() && is_comm(prog[pc_[r]].type) && (*calls_)[r][pc_[r]] == id) {
      const Action& a = prog[pc_[r]++];
      ++res_.actions;
      ++call_left_[r];
      const MessageRoute m = *comm_route(sch_, a);
      if (is_send(a.type)) {
        send_posted_[key(a)] = now;
        if (posted_at_[key(m.recv())] >= 0) cross(m, now);
      } else {
        posted_at_[key(a)] = now;
        ++outstanding_recvs_;
        if (send_posted_[key(m.send())] >= 0) cross(m, now);
      }
    }
  }

  // Both ends of message m are posted (Megatron calls): it crosses from `now` for its message
  // time; its SEND and its RECV complete together at the end.
  void cross(const MessageRoute& m, double now) {
    const Action send = m.send();
    const double dur = cost_.message_time(m.src_stage, m.dst_stage);
    send_start_[key(send)] = now;
    RankSimStats& st = res_.ranks[m.src_rank];
    ++st.messages_sent;
    st.bytes_sent += cost_.message_bytes(m.src_stage, m.dst_stage);
    st.comm += dur;
    record(m.src_rank, send, Lane::kComm, now, now + dur);
    push(now + dur, send, m.src_rank, false);
    push(now + dur, m.recv(), m.dst_rank, false);
  }

  void wake(size_t k, double now) {
    int32_t r = wait_head_[k];
    wait_head_[k] = -1;
    while (r >= 0) {
      const int32_t next = wait_next_[r];
      wait_next_[r] = -1;
      waiting_on_[r] = -1;
      advance(r, now);
      r = next;
    }
  }

  void process(const Event& e) {
    if (e.version != 0) {  // a shared compute action's end, if it is still the current one
      if (e.version != running_[e.rank].version || !running_[e.rank].on) return;
      end_shared(e.rank, e.time);
    }
    ++res_.events;
    const Action& a = e.action;
    const double t = e.time;
    res_.makespan = std::max(res_.makespan, t);
    if (is_recv(a.type)) {
      const double start = std::max(posted_at_[key(a)], send_start_[key(matching(sch_, a))]);
      res_.ranks[e.rank].comm += t - start;
      record(e.rank, a, Lane::kComm, start, t);
      --outstanding_recvs_;
    }
    done_.mark(a);
    for (const Action& sub : sub_actions(a)) {
      wake(key(sub), t);
      if (sub.type == ActionType::kBackward) {
        wake(key({ActionType::kBackwardInput, sub.stage, sub.microbatch}), t);
        wake(key({ActionType::kBackwardWeight, sub.stage, sub.microbatch}), t);
      }
    }
    if (calls_ && is_comm(a.type)) {
      // One operation of the rank's current call is done; the last one frees the lane.
      if (--call_left_[e.rank] == 0) {
        lane_free_[e.rank] = t;
        advance(e.rank, t);
      }
      return;
    }
    if (is_send(a.type)) {
      const MessageRoute m = *comm_route(sch_, a);
      if (posted_at_[key(m.recv())] >= 0 && !done_.has(m.recv())) {
        push(t, m.recv(), m.dst_rank, false);
      }
    }
    if (e.occupies) {
      lane_free_[e.rank] = t;
      if (waiting_on_[e.rank] < 0) advance(e.rank, t);
    }
  }

  Status check_finished() {
    std::string blocked;
    GridMark mark;
    for (int32_t r = 0; r < P_; ++r) {
      const auto& prog = sch_.programs[r];
      if (pc_[r] >= prog.size()) continue;
      if (mark.rank < 0) mark = {r, static_cast<int32_t>(pc_[r])};
      const Action& a = prog[pc_[r]];
      std::string what;
      for (const Action& d : dependencies(sch_, a)) {
        if (!done_.has(d)) {
          what = fmt::format("waits for {} on rank {}", to_string(d), sch_.stage_to_rank[d.stage]);
          break;
        }
      }
      blocked += fmt::format("\n  rank {} step {}: {} {}", r, pc_[r], to_string(a), what);
    }
    for (int32_t r = 0; r < P_ && calls_; ++r) {
      if (call_left_[r] == 0) continue;
      if (mark.rank < 0) mark = {r, static_cast<int32_t>(pc_[r]) - 1};
      for (size_t k = 0; k < pc_[r]; ++k) {
        const Action& a = sch_.programs[r][k];
        if (is_send(a.type) && !done_.has(a)) {
          blocked += fmt::format("\n  rank {}: {} waits in its p2p call for {} to be posted", r,
                                 to_string(a), to_string(matching(sch_, a)));
        }
      }
    }
    if (outstanding_recvs_ > 0) {
      for (int32_t r = 0; r < P_; ++r) {
        for (const Action& a : sch_.programs[r]) {
          if (is_recv(a.type) && posted_at_[key(a)] >= 0 && !done_.has(a)) {
            blocked += fmt::format("\n  rank {}: {} posted but {} never sent", r, to_string(a),
                                   to_string(matching(sch_, a)));
          }
        }
      }
    }
    if (blocked.empty()) return OkStatus();
    return Status::failed_precondition(
        fmt::format("simulate: schedule '{}' deadlocks at time {:g}; blocked:{}\n{}", sch_.name,
                    res_.makespan, blocked, format_grid(sch_, mark)));
  }

  // The data-parallel gradient all-reduce (simulator.h): on each rank's all-reduce lane, one
  // stage at a time, after the program (in stage order) or, with overlap, from each stage's last
  // W/B on (in the order the stages finish). Extends the rank's end, so its optimizer starts
  // after its reductions.
  void add_allreduce() {
    const DataParallelSim& dp = opt_.data_parallel;
    if (dp.size <= 1) return;
    for (int32_t r = 0; r < P_; ++r) {
      std::vector<std::pair<double, int32_t>> order;  // (ready, stage)
      for (int32_t s : sch_.stages_of(r)) {
        const double ready = dp.overlap && grads_done_[s] >= 0 ? grads_done_[s] : rank_end_[r];
        order.push_back({ready, s});
      }
      std::sort(order.begin(), order.end());
      RankSimStats& st = res_.ranks[r];
      double lane = 0;
      BusyUnion exposed;
      for (const auto& [ready, s] : order) {
        const StageCost& c = cost_.stage(s);
        const double bytes = stage_allreduce_bytes(c);
        const double start = std::max(ready, lane);
        const double end =
            start +
            ring_allreduce_time(bytes, dp.size, dp.link.value_or(cost_.link()), dp.bucket_bytes);
        lane = end;
        st.allreduce += end - start;
        // Exposed: after the rank's last compute (prof.h exposed_allreduce; the optimizer
        // starts after the last reduction, so nothing is cut at its end).
        const double from = st.compute_actions > 0 ? std::max(start, st.last_end) : start;
        exposed.add(from, std::max(from, end));
        rank_end_[r] = std::max(rank_end_[r], end);
        res_.makespan = std::max(res_.makespan, end);
        if (!opt_.record_timeline) continue;
        TimelineEvent& ev = comm_events_[r].emplace_back();
        ev.name = fmt::format("{}ALLREDUCE", s);
        ev.kind = EventKind::kAllReduce;
        ev.lane = Lane::kAllReduce;
        ev.stage = s;
        ev.start = start;
        ev.end = end;
        ev.bytes = static_cast<int64_t>(bytes);
      }
      st.exposed_allreduce = exposed.total();
    }
  }

  // The optimizer phase: once every rank has finished its program (sync), each rank runs its
  // stages' optimizer time. Its event starts where the rank's program ended, as a measured one
  // does (the wait for the slowest rank is idle time; prof.h, step_bubble). Post-validated: each
  // rank runs it right after its own program (SimOptions).
  std::vector<RankBusy> add_optimizer() {
    std::vector<double> opt(P_, 0.0);
    bool any = false;
    for (int32_t s = 0; s < S_; ++s) {
      opt[sch_.stage_to_rank[s]] += cost_.stage(s).optimizer;
      any = any || cost_.stage(s).optimizer > 0;
    }
    const double sync = *std::max_element(rank_end_.begin(), rank_end_.end());
    std::vector<RankBusy> busy(P_);
    for (int32_t r = 0; r < P_; ++r) {
      busy[r].compute = busy_[r].total();
      busy[r].end = rank_end_[r];
      if (!any) continue;
      const double from = opt_.optimizer_post_validation ? rank_end_[r] : sync;
      busy[r].optimizer_start = rank_end_[r];
      busy[r].optimizer_end = busy[r].end = from + opt[r];
      res_.makespan = std::max(res_.makespan, from + opt[r]);
      res_.optimizer = true;
      if (!opt_.record_timeline) continue;
      TimelineEvent& ev = res_.timeline.ranks[r].events.emplace_back();
      ev.name = "optimizer";
      ev.kind = EventKind::kOptimizer;
      ev.lane = Lane::kCompute;
      ev.start = busy[r].optimizer_start;
      ev.end = busy[r].optimizer_end;
    }
    return busy;
  }

  void finish_stats() {
    for (int32_t r = 0; r < P_; ++r) res_.ranks[r].program_end = rank_end_[r];
    add_allreduce();
    const std::vector<RankBusy> rank_busy = add_optimizer();
    const StepBubble bubble = step_bubble(rank_busy);
    for (int32_t r = 0; r < P_; ++r) {
      RankSimStats& st = res_.ranks[r];
      st.step_end = rank_busy[r].end;
      st.busy = bubble.busy[r];
      if (st.compute_actions > 0) {
        st.first_start = first_start_[r];
        st.internal_idle = st.last_end - st.first_start - busy_[r].total();
        // Summing many durations leaves rounding residue; a gap below 1e-12 of the span is none.
        if (std::abs(st.internal_idle) <= 1e-12 * std::max(1.0, st.last_end)) st.internal_idle = 0;
      }
      st.idle = bubble.idle[r];
      st.bubble_ratio = bubble.rank_ratio(r);
      st.peak_activations = res_.activation_unit_bytes > 0
                                ? st.peak_activation_bytes / res_.activation_unit_bytes
                                : 0.0;
      st.peak_bytes = st.peak_activation_bytes + st.static_bytes;
      res_.messages += st.messages_sent;
      res_.message_bytes += st.bytes_sent;
    }
    res_.total_compute = bubble.total_busy;
    res_.bubble_ratio = bubble.ratio;
    double exposed = 0;
    for (const RankSimStats& st : res_.ranks) exposed += st.exposed_allreduce;
    res_.exposed_allreduce_ratio = res_.makespan > 0 ? exposed / (P_ * res_.makespan) : 0;
    // The span measure (prof.h span_bubble): each rank from its first compute to its last.
    std::vector<RankSpan> spans(P_);
    for (int32_t r = 0; r < P_; ++r) {
      const RankSimStats& st = res_.ranks[r];
      spans[r] = {st.compute_actions > 0, st.first_start, st.last_end, busy_[r].total()};
    }
    const SpanBubble span = span_bubble(spans);
    res_.max_span = span.max_span;
    res_.span_bubble_ratio = span.ratio;
    for (int32_t r = 0; r < P_; ++r) {
      res_.ranks[r].span = span.span[r];
      res_.ranks[r].span_bubble_ratio = span.rank_ratio(r);
    }
    if (opt_.record_timeline) {
      // Compute events were recorded in start order. Comm events go after them (lane order),
      // sorted by start (RECVs are recorded when they end); ties keep creation order, so the
      // output is deterministic.
      for (int32_t r = 0; r < P_; ++r) {
        auto& comm = comm_events_[r];
        auto& events = res_.timeline.ranks[r].events;
        // Sort indices, not events: no temporary copy of the (large) events.
        std::vector<uint32_t> order(comm.size());
        for (uint32_t k = 0; k < order.size(); ++k) order[k] = k;
        std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
          return comm[x].start != comm[y].start ? comm[x].start < comm[y].start : x < y;
        });
        for (uint32_t k : order) events.push_back(std::move(comm[k]));
        comm = {};
      }
    }
  }

  const Schedule& sch_;
  const CostModel& cost_;
  const SimOptions opt_;
  const std::vector<std::vector<int32_t>>* calls_;  // Megatron's p2p calls, or null
  const bool overlap_;
  const bool shared_;  // ranks share cores (SimOptions::core_sharing)
  const int32_t P_, S_, M_;
  CompletionSet done_;
  std::priority_queue<Event, std::vector<Event>, Later> queue_;
  uint64_t seq_ = 0;
  std::vector<int32_t> wait_head_;   // [key] first rank waiting for it
  std::vector<int32_t> wait_next_;   // [rank] next rank waiting on the same key
  std::vector<int64_t> waiting_on_;  // [rank] key it waits for, -1 if none
  std::vector<double> send_start_;   // [key of SEND] when it started
  std::vector<double> posted_at_;    // [key of RECV] when it was posted (or reached)
  std::vector<double> send_posted_;  // [key of SEND] when its call posted it (Megatron calls)
  std::vector<int32_t> call_left_;   // [rank] operations of its current call not yet completed
  std::vector<size_t> pc_;
  std::vector<double> lane_free_;
  std::vector<double> held_;
  std::vector<double> first_start_;
  std::vector<double> rank_end_;    // [rank] latest end of its events
  std::vector<double> grads_done_;  // [stage] end of its last W or B (-1: none yet)
  std::vector<BusyUnion> busy_;     // [rank] its compute intervals (prof.h, the one bubble)
  int64_t outstanding_recvs_ = 0;
  std::vector<Running> running_;  // [rank] its shared compute action (shared cores)
  int32_t computing_ = 0;         // ranks running one
  uint64_t versions_ = 0;
  std::vector<std::vector<TimelineEvent>> comm_events_;  // [rank] until finish_stats()
  SimResult res_;
};

}  // namespace

Result<SteadyState> steady_state_step_time(const Schedule& schedule, const CostModel& cost,
                                           const SimOptions& options) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  SimOptions o = options;
  o.record_timeline = false;
  o.rank_start.clear();
  SteadyState out;
  TP_ASSIGN_OR_RETURN(EngineProfile ep, engine_profile(o.engine, schedule, o));
  if (!ep.optimizer_post_validation) {
    TP_ASSIGN_OR_RETURN(SimResult r, simulate(schedule, cost, o));
    out.step_time = r.makespan;
    out.iterations = 1;
    out.converged = true;
    return out;
  }
  const int32_t P = schedule.num_ranks;
  // Iteration k's step ends, absolute: each rank starts iteration k + 1 where its step k ended.
  // Simulated relative to the earliest start (base), so the times stay small.
  std::vector<double> end(P, 0.0);
  std::vector<double> periods;
  double base = 0, last_end = 0;
  for (int32_t k = 0; k < kSteadyStateMaxIterations; ++k) {
    base = *std::min_element(end.begin(), end.end());
    o.rank_start.assign(P, 0.0);
    for (int32_t r = 0; r < P; ++r) o.rank_start[r] = end[r] - base;
    TP_ASSIGN_OR_RETURN(SimResult r, simulate(schedule, cost, o));
    double most = 0, least_delta = kInf, most_delta = -kInf;
    for (int32_t q = 0; q < P; ++q) {
      const double e = base + r.ranks[q].step_end;
      least_delta = std::min(least_delta, e - end[q]);
      most_delta = std::max(most_delta, e - end[q]);
      end[q] = e;
      most = std::max(most, e);
    }
    out.iterations = k + 1;
    if (k > 0) periods.push_back(most - last_end);
    last_end = most;
    // Every rank moved on by the same time: the next iteration starts as this one did, shifted,
    // so every later one repeats it (the simulation does not depend on the time origin).
    if (k > 0 && most_delta - least_delta <= 1e-9 * std::max(1.0, std::abs(most_delta))) {
      out.step_time = most_delta;
      out.converged = true;
      return out;
    }
  }
  // No fixed period (a cycle of several iterations): the mean over the last p periods.
  const size_t take = std::min<size_t>(periods.size(), static_cast<size_t>(std::max(1, P)));
  double sum = 0;
  for (size_t i = periods.size() - take; i < periods.size(); ++i) sum += periods[i];
  out.step_time = take > 0 ? sum / static_cast<double>(take) : last_end;
  return out;
}

double stage_allreduce_bytes(const StageCost& c) {
  return c.allreduce_bytes > 0 ? c.allreduce_bytes : c.grad_bytes;
}

double ring_allreduce_time(double bytes, int32_t d, const LinkCost& link, double bucket_bytes) {
  if (d <= 1 || !(bytes > 0)) return 0;
  const double buckets = bucket_bytes > 0 ? std::ceil(bytes / bucket_bytes) : 1;
  const double steps = 2.0 * (d - 1);
  const double transfer = link.bandwidth > 0 ? steps / d * bytes / link.bandwidth : 0;
  return transfer + buckets * steps * link.latency;
}

DataParallelSim trainer_data_parallel(int32_t size, bool overlap, int64_t bucket_values) {
  DataParallelSim dp;
  dp.size = size;
  dp.overlap = overlap;
  dp.bucket_bytes = kGradReduceBytesPerValue * static_cast<double>(bucket_values);
  return dp;
}

Status check_data_parallel(const DataParallelSim& dp) {
  if (dp.size < 1 || dp.size > 65536) {
    return Status::invalid_argument(fmt::format(
        "--data-parallel-size {}: must be in [1, 65536]; hint: the number of pipeline replicas",
        dp.size));
  }
  if (!(dp.bucket_bytes >= 0 && dp.bucket_bytes <= kMaxCostValue)) {
    return Status::invalid_argument(fmt::format(
        "--bucket-size: {} bytes per bucket is outside [0, {:g}]; hint: gradient values per "
        "all-reduce, e.g. 1048576",
        dp.bucket_bytes, kMaxCostValue));
  }
  return OkStatus();
}

double shared_core_rate(const CoreSharing& sharing, int32_t computing) {
  if (computing <= 1) return 1.0;
  const double cap =
      sharing.cores > 0 ? std::min(1.0, static_cast<double>(sharing.cores) / computing) : 1.0;
  return cap / sharing.slowdown;
}

bool cores_shared(const CoreSharing& sharing, int32_t ranks) {
  return sharing.slowdown != 1.0 || (sharing.cores > 0 && sharing.cores < ranks);
}

std::string core_sharing_text(const CoreSharing& sharing) {
  return fmt::format(
      "the ranks share {}; each of several computing at once {:.4g}x slower than one alone",
      sharing.cores > 0 ? fmt::format("{} core(s)", sharing.cores) : std::string("a core each"),
      sharing.slowdown);
}

Status check_core_sharing(const CoreSharing& sharing) {
  if (sharing.cores < 0) {
    return Status::invalid_argument(
        fmt::format("--cores {}: must be 0 (a core per rank) or the number of cores the ranks "
                    "share; hint: nproc says how many this machine has",
                    sharing.cores));
  }
  if (!(std::isfinite(sharing.slowdown) && sharing.slowdown >= 1.0)) {
    return Status::invalid_argument(fmt::format(
        "--core-slowdown {}: must be a finite factor >= 1 (how much longer each of several ranks "
        "computing at once takes than one alone); hint: 1 where the cores do not slow each other",
        sharing.slowdown));
  }
  return OkStatus();
}

Result<SimResult> simulate(const Schedule& schedule, const CostModel& cost,
                           const SimOptions& options) {
  if (schedule.num_ranks <= 0 || schedule.num_stages <= 0 || schedule.num_microbatches <= 0) {
    return Status::invalid_argument(fmt::format(
        "simulate: schedule '{}' has an empty shape (ranks={}, stages={}, microbatches={})",
        schedule.name, schedule.num_ranks, schedule.num_stages, schedule.num_microbatches));
  }
  TP_RETURN_IF_ERROR(cost.validate());
  TP_RETURN_IF_ERROR(check_overlap_fb_factor(options.overlap_fb_factor));
  TP_RETURN_IF_ERROR(check_data_parallel(options.data_parallel));
  TP_RETURN_IF_ERROR(check_core_sharing(options.core_sharing));
  TP_ASSIGN_OR_RETURN(EngineProfile ep, engine_profile(options.engine, schedule, options));
  SimOptions o = options;
  o.comm_mode = ep.comm_mode;
  o.optimizer_post_validation = ep.optimizer_post_validation;
  Result<SimResult> r = [&]() -> Result<SimResult> {
    if (!ep.megatron_calls && !ep.deepspeed_calls) return Simulator(schedule, cost, o).run();
    const Schedule plain = schedule.lowered ? compute_only(schedule) : schedule;
    TP_ASSIGN_OR_RETURN(P2pCalls calls, ep.deepspeed_calls ? deepspeed_p2p_calls(plain)
                                                           : megatron_p2p_calls(plain));
    return Simulator(calls.schedule, cost, o, &calls.call).run();
  }();
  if (!r.ok()) return r;
  r->engine = ep.engine;
  r->engine_description = ep.description;
  return r;
}

std::string_view engine_name(Engine engine) {
  switch (engine) {
    case Engine::kTightpipe:
      return "tightpipe";
    case Engine::kMegatron:
      return "megatron";
    case Engine::kMegatronOverlap:
      return "megatron-overlap";
    case Engine::kTorch:
      return "torch";
    case Engine::kZb:
      return "zb";
    case Engine::kDeepSpeed:
      return "deepspeed";
  }
  return "?";
}

Result<Engine> parse_engine(std::string_view text) {
  for (Engine e : {Engine::kTightpipe, Engine::kMegatron, Engine::kMegatronOverlap, Engine::kTorch,
                   Engine::kZb, Engine::kDeepSpeed}) {
    if (text == engine_name(e)) return e;
  }
  return Status::invalid_argument(fmt::format(
      "--engine '{}': unknown engine; known: tightpipe, megatron, megatron-overlap, torch, zb, "
      "deepspeed (docs/cost_model.md \"Engine profiles\")",
      text));
}

bool optimizer_post_validated(Engine engine, bool optimizer_post_validation) {
  switch (engine) {
    case Engine::kTightpipe:
      return optimizer_post_validation;
    case Engine::kZb:
      return true;
    case Engine::kMegatron:
    case Engine::kMegatronOverlap:
    case Engine::kTorch:
    case Engine::kDeepSpeed:
      return false;
  }
  return false;
}

Result<EngineProfile> engine_profile(Engine engine, const Schedule& schedule,
                                     const SimOptions& options) {
  EngineProfile p;
  p.engine = engine;
  const bool vpp = schedule.num_stages > schedule.num_ranks;
  auto megatron_runs = [&]() -> Status {
    bool fb_only = schedule.directions == 1;
    for (const auto& prog : schedule.programs) {
      for (const Action& a : prog) {
        fb_only = fb_only && (is_comm(a.type) || a.type == ActionType::kForward ||
                              a.type == ActionType::kBackward);
      }
    }
    if (fb_only) return OkStatus();
    return Status::invalid_argument(fmt::format(
        "--engine {}: Megatron-LM does not run schedule '{}' (its schedules are 1f1b and "
        "interleaved: F and whole B, one direction); hint: --engine zb, torch or tightpipe",
        engine_name(engine), schedule.name));
  };
  // A post-validated optimizer steps each rank from its own gradients; two directions sum each
  // model stage's gradient copies across ranks first (the trainer refuses the pair too).
  auto one_direction_post_validated = [&](std::string_view who) -> Status {
    if (schedule.directions == 1) return OkStatus();
    return Status::invalid_argument(fmt::format(
        "{} with schedule '{}': its {} directions sum each model stage's gradient copies across "
        "ranks before the optimizer, which a post-validated step cannot skip (train refuses it "
        "too); hint: a one-direction schedule (zb-h2, zb-2p, zb-v, dualpipev)",
        who, schedule.name, schedule.directions));
  };
  switch (engine) {
    case Engine::kTightpipe:
      if (options.optimizer_post_validation) {
        TP_RETURN_IF_ERROR(one_direction_post_validated("--optimizer-post-validation"));
      }
      p.comm_mode = options.comm_mode;
      p.optimizer_post_validation =
          optimizer_post_validated(engine, options.optimizer_post_validation);
      p.description = fmt::format("tightpipe: p2p {}, optimizer {}", comm_mode_name(p.comm_mode),
                                  p.optimizer_post_validation ? "post-validated" : "synchronous");
      break;
    case Engine::kMegatron:
    case Engine::kMegatronOverlap:
      TP_RETURN_IF_ERROR(megatron_runs());
      if (engine == Engine::kMegatronOverlap && vpp) {
        p.description =
            "megatron-overlap: p2p asynchronous, a receive waited just before its compute "
            "(overlap), optimizer synchronous";
        break;
      }
      p.megatron_calls = true;
      p.description = fmt::format(
          "{}: p2p in Megatron's batched calls, waited before the next compute (rendezvous){}, "
          "optimizer synchronous",
          engine_name(engine),
          engine == Engine::kMegatronOverlap ? "; overlap needs virtual stages" : "");
      break;
    case Engine::kTorch:
      TP_RETURN_IF_ERROR(
          check_torch_directions(schedule,
                                 "dualpipev (PyTorch's ScheduleDualPipeV), or --engine tightpipe")
              .with_context("--engine torch"));
      p.description =
          "torch: p2p asynchronous sends, a receive waited just before its compute (overlap), "
          "optimizer synchronous";
      break;
    case Engine::kDeepSpeed:
      if (schedule.num_stages != schedule.num_ranks || schedule.directions != 1) {
        return Status::invalid_argument(fmt::format(
            "--engine deepspeed: DeepSpeed's PipelineEngine does not run schedule '{}' ({} "
            "stages on {} ranks); its TrainSchedule is 1F1B with one stage per rank; hint: "
            "--schedule 1f1b, or --engine megatron for interleaved",
            schedule.name, schedule.num_stages, schedule.num_ranks));
      }
      if (!megatron_runs().ok()) {  // the same rule: F and whole B, one direction
        return Status::invalid_argument(fmt::format(
            "--engine deepspeed: DeepSpeed's PipelineEngine does not run schedule '{}' (its "
            "TrainSchedule runs F and whole B); hint: --engine zb, torch or tightpipe",
            schedule.name));
      }
      p.deepspeed_calls = true;
      p.description =
          "deepspeed: p2p as TrainSchedule's blocking send/recv, one per call (rendezvous), "
          "optimizer synchronous";
      break;
    case Engine::kZb:
      TP_RETURN_IF_ERROR(
          one_direction_post_validated("--engine zb (its optimizer is post-validated)"));
      p.optimizer_post_validation = optimizer_post_validated(engine, true);
      p.description =
          "zb: p2p asynchronous, a receive waited just before its compute (overlap), optimizer "
          "post-validated";
      break;
  }
  return p;
}

}  // namespace tightpipe
