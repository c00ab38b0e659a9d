// Timeline: what every rank did and when, the one type both the simulator (predicted) and the
// executor (measured) produce, with the same event names (the action text form: "2F0",
// "1SEND_F3"...), so predicted and measured runs can be overlaid and compared.
//
// Plain data; thread-compatible. An executor rank fills its own RankTimeline alone.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tightpipe {

// kAllReduce: the data-parallel gradient all-reduce of a stage (docs/data_parallel.md); with
// --overlap-grad-reduce it runs on a helper thread while the compute lane goes on.
enum class Lane { kCompute = 0, kComm = 1, kData = 2, kAllReduce = 3 };

enum class EventKind {
  kForward,         // F
  kBackwardInput,   // I
  kBackwardWeight,  // W
  kBackward,        // B (fused)
  kSend,            // SEND_F / SEND_B: time the send occupied its lane
  kRecv,            // RECV_F / RECV_B: time spent waiting for / moving the message
  kData,            // waiting for the data loader
  kOptimizer,       // gradient-norm reduce + optimizer step
  kAllReduce,       // a stage's data-parallel gradient all-reduce ("1ALLREDUCE"; bytes: its
                    // wire buffer, values x 8: the reduction sums doubles)
  kOther,
};

std::string lane_name(Lane lane);
std::string event_kind_name(EventKind kind);
bool is_compute_kind(EventKind kind);
// The slot of a stage's per-action cost table: F, I, W, B -> 0, 1, 2, 3; any other kind -> -1.
int cost_slot(EventKind kind);

struct TimelineEvent {
  std::string name;  // "2F0", "1RECV_B3", "data", "optimizer"
  EventKind kind = EventKind::kOther;
  Lane lane = Lane::kCompute;
  int32_t stage = -1;
  int32_t microbatch = -1;
  int32_t step = 0;  // training step (0 for a simulation)
  double start = 0;  // in Timeline::time_unit, from the step's common origin
  double end = 0;
  int32_t peer = -1;  // other rank of a SEND/RECV
  int64_t bytes = 0;  // message bytes of a SEND/RECV; reduced bytes of an ALLREDUCE
  // Compute events (F, I, W, B, optimizer) of measured runs: seconds the rank's thread was ready
  // to run but waited for a core (the kernel's run-queue delay) since the rank's previous compute
  // event ended (or the step began). 0: none, or not measured.
  double cpu_wait = 0;
};

struct RankTimeline {
  int32_t rank = 0;
  std::vector<TimelineEvent> events;  // in start order per lane
};

struct Timeline {
  std::string time_unit = "s";  // "s" for measured runs; the cost unit for a simulation
  std::vector<RankTimeline> ranks;
};

}  // namespace tightpipe
