// The 8-step rule of DualPipe and DualPipeV (dualpipe_rule.h; docs/schedule_ir.md "DualPipeV and
// DualPipe"). F0/F1: forward of chunk 0/1; B0/B1: full backward; I0/I1: input-gradient backward
// whose W is deferred to a queue shared by both chunks; W: the oldest deferred W; [F * B]: an
// OVERLAP_F_B pair. Each chunk takes its microbatches in order.
#include "dualpipe_rule.h"

#include <deque>

#include "generator_util.h"

namespace tightpipe::detail {

std::vector<Action> dualpipe_rank_program(const DualPipeRank& k) {
  const int32_t n = k.n, h = k.h, c = k.per_chunk;
  TP_CHECK(n >= 1 && h >= 0 && h < n && c >= 2 * n, "n=", n, " h=", h, " per_chunk=", c);
  std::vector<Action> ops;
  std::deque<Action> deferred_w;  // W of every I, oldest first (both chunks)
  int32_t next_f[2] = {k.mb0, k.mb1}, next_b[2] = {k.mb0, k.mb1};
  const int32_t stage[2] = {k.stage0, k.stage1};
  auto f = [&](int chunk) { return F(stage[chunk], next_f[chunk]++); };
  auto b = [&](int chunk) { return B(stage[chunk], next_b[chunk]++); };
  auto i = [&](int chunk) {
    const Action a = I(stage[chunk], next_b[chunk]++);
    deferred_w.push_back(W(a.stage, a.microbatch));
    return a;
  };
  auto w = [&] {
    TP_CHECK(!deferred_w.empty(), "the rule pops a W before its I (n=", n, " h=", h, ")");
    const Action a = deferred_w.front();
    deferred_w.pop_front();
    return a;
  };
  const bool middle = h == n - 1;
  // Step 1: warm-up forwards of chunk 0, so that chunk 0's first microbatch reaches the turn.
  for (int32_t t = 0; t < 2 * (n - h - 1); ++t) ops.push_back(f(0));
  // Step 2: both chunks forward.
  for (int32_t t = 0; t < h + 1; ++t) {
    ops.push_back(f(0));
    ops.push_back(f(1));
  }
  // Step 3: chunk 1's first backwards, split so that the W fills what would be a gap.
  for (int32_t t = 0; t < n - h - 1; ++t) {
    ops.push_back(i(1));
    ops.push_back(w());
    ops.push_back(f(1));
  }
  // Step 4 (steady): two overlapped pairs, [F0 * B1] and [F1 * B0].
  for (int32_t t = 0; t < c - 2 * n + h + 1; ++t) {
    if (t == 0 && middle) {
      // Unpaired on the middle rank, as DeepSeek's code does ("to further reduce bubble size"):
      // the F0 can start before B1's gradient has arrived.
      ops.push_back(f(0));
      ops.push_back(b(1));
    } else {
      const Action fa = f(0);
      ops.push_back(overlap_f_b(fa, b(1)));
    }
    const Action fa = f(1);
    ops.push_back(overlap_f_b(fa, b(0)));
  }
  // Step 5: chunk 1 has no forwards left for chunk 0's pair.
  for (int32_t t = 0; t < n - h - 1; ++t) {
    ops.push_back(b(1));
    const Action fa = f(1);
    ops.push_back(overlap_f_b(fa, b(0)));
  }
  // Step 6: the last backwards of chunk 1 with chunk 0's; from the middle iteration on they split
  // (I now, W later). On an even h the switch falls between B1 and B0 of that iteration.
  const int32_t step6 = h + 1;
  bool split = false;
  for (int32_t t = 0; t < step6; ++t) {
    if (t == step6 / 2 && h % 2 == 1) split = true;
    ops.push_back(split ? i(1) : b(1));
    if (t == step6 / 2 && h % 2 == 0) split = true;
    ops.push_back(split ? i(0) : b(0));
  }
  // Step 7: a deferred W, then chunk 0's next input gradient.
  for (int32_t t = 0; t < n - h - 1; ++t) {
    ops.push_back(w());
    ops.push_back(i(0));
  }
  // Step 8: the remaining deferred W.
  for (int32_t t = 0; t < h + 1; ++t) ops.push_back(w());
  TP_CHECK(deferred_w.empty(), "the rule leaves ", deferred_w.size(), " W (n=", n, " h=", h, ")");
  return ops;
}

}  // namespace tightpipe::detail
