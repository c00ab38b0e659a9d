// The automatic schedules at the zero-bubble paper's published settings, against the bubble
// rates its authors publish: for each setting (p, m and the profiled T_F, T_B, T_W, T_comm of
// their GPT models, s = 1024) the span bubble of our zb-1p, zb-2p (one chunk) and zb-v-auto (V)
// built with the span objective at the paper's memory (p, 2p and p whole-rank activations; I
// frees all but the 32h of 34h + 5as that W frees), beside the authors' number.
//
// The settings and published rates: tests/testutil/zb_paper_settings.h (their source named there).
//
// usage: zb_paper_settings_bench
#include <fmt/format.h>

#include <string>

#include "bench_cli.h"
#include "tightpipe/auto_schedule.h"
#include "tightpipe/base.h"
#include "tightpipe/cost_model.h"
#include "tightpipe/schedule.h"
#include "tightpipe/simulator.h"
#include "zb_paper_settings.h"

using namespace tightpipe;

namespace {

using testutil::ZbPaperSetting;

// The span bubble of `name` built from the setting's costs with the span objective.
double span_bubble(const std::string& name, const ZbPaperSetting& s) {
  const auto [costs, o] = testutil::zb_paper_problem(s, name);
  auto built = build_auto_schedule(name, s.p, s.m, costs, o);
  TP_CHECK(built.ok(), built.status().to_string());
  auto low = lower(*built);
  TP_CHECK(low.ok(), low.status().to_string());
  SimOptions so;
  so.record_timeline = false;
  auto r = simulate(*low, costs, so);
  TP_CHECK(r.ok(), r.status().to_string());
  return r->span_bubble_ratio;
}

std::string cell(double ours, double paper) {
  if (paper < 0) return fmt::format("{:>24}", "-");
  return fmt::format("{:>7.2f}% vs {:>5.2f}% {:>6}", 100 * ours, 100 * paper,
                     ours <= paper + 5e-5 ? "ok" : "WORSE");
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(
      "The span bubble of zb-1p, zb-2p and zb-v-auto at the zero-bubble paper's published "
      "settings, beside the authors' published rates.",
      "zb_paper_settings_bench");
  if (int rc = flags.parse(argc, argv); rc >= 0) return rc;
  fmt::print("span bubble, ours vs published (ok: no worse, to the 4 decimals published)\n\n");
  fmt::print("{:>6} {:>3} {:>4} | {:>24} | {:>24} | {:>24}\n", "model", "p", "m", "zb-1p", "zb-2p",
             "zb-v-auto (ZB-V)");
  int worse = 0, total = 0;
  for (const ZbPaperSetting& s : testutil::zb_paper_settings()) {
    std::string a = cell(0, -1), b = cell(0, -1), v = cell(0, -1);
    auto one = [&](const char* name, std::string& out) {
      const double paper = testutil::zb_paper_rate(s, name);
      if (paper < 0) return;
      const double ours = span_bubble(name, s);
      out = cell(ours, paper);
      ++total;
      worse += ours > paper + 5e-5 ? 1 : 0;
    };
    one("zb-1p", a);
    one("zb-2p", b);
    one("zb-v-auto", v);
    fmt::print("{:>6} {:>3} {:>4} | {} | {} | {}\n", s.model, s.p, s.m, a, b, v);
    std::fflush(stdout);
  }
  fmt::print("\n{} of {} no worse than published\n", total - worse, total);
  return 0;
}
