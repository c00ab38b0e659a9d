// The zero-bubble paper's published settings and bubble rates: one table for the tests that hold
// them (src/sim/zb_auto_test.cc, table4_test.cc) and the benches that print them
// (bench/sim/zb_paper_settings_bench.cc, checks_bench.cc); its Table 4 throughputs are in
// table4.h. The settings and rates are from
// sail-sg/zero-bubble-pipeline-parallelism, branch `arxiv` (commit f68d3879, "for arxiv paper"):
// efficiency.py (the ICLR table's rows: p, m, the profiled T_F, T_B, T_W, T_comm in units of
// 1/1000 as printed, the ZB-1p and ZB-2p bubble rates) and mem2bubble.npy (ZB-V at 1F1B's
// memory; the arXiv version's costs are per chunk, a whole rank is twice them). Their memory
// model: F holds 34h + 5as per token-layer (s = 1024), of which W frees 32h and I the rest.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tightpipe/auto_schedule.h"
#include "tightpipe/cost_model.h"

namespace tightpipe::testutil {

struct ZbPaperSetting {
  const char* model;
  int32_t p, m;
  double f, b, w, c;  // whole-rank T_F, T_B (our I), T_W, T_comm
  int32_t h, a;       // hidden size and heads (the memory fraction)
  double zb1p, zb2p;  // published span bubble rates (-1: none for this setting)
  double zbv;
  // The share of an F's activations that I keeps until W: 32h / (34h + 5as).
  double w_fraction() const { return 32.0 * h / (34.0 * h + 5.0 * a * 1024); }
};

inline const std::vector<ZbPaperSetting>& zb_paper_settings() {
  static const std::vector<ZbPaperSetting> kRows = {
      {"1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, 2304, 24, 0.1585, 0.0433, -1},
      {"1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, 2304, 24, 0.1242, 0.0039, -1},
      {"1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, 2304, 24, 0.0674, 0.0026, -1},
      {"6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, 4096, 32, 0.1323, 0.0029, -1},
      {"6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, 4096, 32, 0.1045, 0.0022, -1},
      {"6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, 4096, 32, 0.0554, 0.0010, -1},
      {"14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, 5120, 40, 0.1397, 0.0066, -1},
      {"14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, 5120, 40, 0.1088, 0.0054, -1},
      {"14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, 5120, 40, 0.0576, 0.0028, -1},
      {"28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, 6144, 48, 0.1421, 0.0038, -1},
      {"28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, 6144, 48, 0.1106, 0.0029, -1},
      {"28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, 6144, 48, 0.0594, 0.0018, -1},
      {"6.2B", 16, 48, 2 * 14.407, 2 * 14.380, 2 * 9.676, 1.610, 4096, 32, -1, -1, 0.0697},
      {"6.2B", 16, 64, 2 * 14.412, 2 * 14.393, 2 * 9.688, 1.621, 4096, 32, -1, -1, 0.0533},
      {"6.2B", 16, 128, 2 * 14.316, 2 * 14.306, 2 * 9.639, 1.619, 4096, 32, -1, -1, 0.0274},
      {"14.6B", 24, 72, 2 * 6.763, 2 * 6.969, 2 * 5.251, 0.755, 5120, 40, -1, -1, 0.0638},
      {"14.6B", 24, 96, 2 * 6.783, 2 * 6.984, 2 * 5.259, 0.758, 5120, 40, -1, -1, 0.0483},
      {"14.6B", 24, 192, 2 * 6.785, 2 * 6.990, 2 * 5.260, 0.770, 5120, 40, -1, -1, 0.0250},
      {"28.3B", 32, 96, 2 * 9.458, 2 * 9.748, 2 * 7.288, 0.879, 6144, 48, -1, -1, 0.0593},
      {"28.3B", 32, 128, 2 * 9.469, 2 * 9.744, 2 * 7.306, 0.892, 6144, 48, -1, -1, 0.0451},
      {"28.3B", 32, 256, 2 * 9.447, 2 * 9.644, 2 * 7.193, 0.887, 6144, 48, -1, -1, 0.0236},
  };
  return kRows;
}

// The published rate of `name` (zb-1p, zb-2p, zb-v-auto for ZB-V) at a setting; -1: none.
inline double zb_paper_rate(const ZbPaperSetting& s, const std::string& name) {
  return name == "zb-1p" ? s.zb1p : name == "zb-2p" ? s.zb2p : name == "zb-v-auto" ? s.zbv : -1;
}

// The setting's profiled costs as a cost table of `chunks` stages per rank: whole-rank uniform
// costs (divided per chunk), T_comm per message, I keeping the W share until W.
inline CostModel zb_paper_costs(const ZbPaperSetting& s, int32_t chunks) {
  UniformCosts u;
  u.f = s.f;
  u.i = s.b;
  u.w = s.w;
  u.comm = s.c;
  u.act_after_i = s.w_fraction();
  return uniform_cost_model(u, s.p, chunks * s.p);
}

// The cost table and options the authors' numbers assume, for `name`: whole-rank uniform costs
// (halved per chunk for the V), I keeping the W share until W, the span objective, the name's
// own memory (p, 2p; p for the V).
inline std::pair<CostModel, ZbAutoOptions> zb_paper_problem(const ZbPaperSetting& s,
                                                            const std::string& name) {
  ZbAutoOptions o;
  o.objective = ZbObjective::kSpan;
  o.w_memory_fraction = s.w_fraction();
  return {zb_paper_costs(s, auto_schedule_chunks(name)), o};
}

}  // namespace tightpipe::testutil
