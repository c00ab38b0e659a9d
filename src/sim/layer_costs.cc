// fit_layer_costs / cost_model_for_layout (cost_model.h): stage costs <-> layer-kind costs.
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <limits>

#include "tightpipe/check.h"
#include "tightpipe/cost_model.h"

namespace tightpipe {

namespace {

constexpr int kKinds = 3;  // embedding, block, head
using Row = std::array<double, kKinds>;

Row kinds_of(const StageLayers& l) {
  return {l.embedding ? 1.0 : 0.0, static_cast<double>(l.blocks), l.head ? 1.0 : 0.0};
}

// Least squares over the free kinds (the others fixed at 0) by the normal equations. False when
// they do not determine the free kinds (a pivot vanishes).
bool solve(const std::vector<Row>& rows, const std::vector<double>& y,
           const std::array<bool, kKinds>& free, Row& x) {
  std::vector<int> idx;
  for (int k = 0; k < kKinds; ++k)
    if (free[k]) idx.push_back(k);
  const size_t n = idx.size();
  std::vector<std::vector<double>> a(n, std::vector<double>(n + 1, 0.0));
  for (size_t r = 0; r < rows.size(); ++r) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) a[i][j] += rows[r][idx[i]] * rows[r][idx[j]];
      a[i][n] += rows[r][idx[i]] * y[r];
    }
  }
  for (size_t c = 0; c < n; ++c) {  // Gauss-Jordan with partial pivoting
    size_t piv = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::abs(a[r][c]) > std::abs(a[piv][c])) piv = r;
    if (std::abs(a[piv][c]) < 1e-9) return false;
    std::swap(a[c], a[piv]);
    for (size_t r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = a[r][c] / a[c][c];
      for (size_t j = c; j <= n; ++j) a[r][j] -= f * a[c][j];
    }
  }
  x = {0, 0, 0};
  for (size_t i = 0; i < n; ++i) x[idx[i]] = a[i][n] / a[i][i];
  return true;
}

// One field: the three kinds' values, non-negative, fitting the stages best (least squares).
// Kinds the data cannot separate are taken as free: of the ways to pin the embedding and the head
// at 0 (none, the embedding, the head, both) the non-negative solution with the smallest residual
// wins, ties in that order (so with only "E + n blocks" and "n blocks + head" stages the cheaper
// end kind is free and the other carries the difference: both stages are reproduced exactly).
// The block is pinned at 0 only when nothing else fits.
Row fit_field(const std::vector<Row>& rows, const std::vector<double>& y) {
  std::array<bool, kKinds> used{};
  for (int k = 0; k < kKinds; ++k)
    for (const Row& r : rows) used[k] = used[k] || r[k] != 0;
  Row best{0, 0, 0};
  double best_residual = std::numeric_limits<double>::infinity();
  for (int pins = 0; pins < 8; ++pins) {  // bit 0: embedding pinned, bit 1: head, bit 2: block
    const std::array<bool, kKinds> free{used[0] && !(pins & 1), used[1] && !(pins & 4),
                                        used[2] && !(pins & 2)};
    Row x{0, 0, 0};
    if (!solve(rows, y, free, x)) continue;
    if (x[0] < 0 || x[1] < 0 || x[2] < 0) continue;
    double residual = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const double e = rows[r][0] * x[0] + rows[r][1] * x[1] + rows[r][2] * x[2] - y[r];
      residual += e * e;
    }
    const double scale = 1e-12 * (1 + std::abs(y.empty() ? 0 : y[0]));
    if (residual < best_residual - scale * scale) {
      best = x;
      best_residual = residual;
    }
  }
  return best;
}

}  // namespace

Result<LayerCosts> fit_layer_costs(const CostModel& costs, const std::vector<StageLayers>& layout) {
  if (layout.empty() || static_cast<int32_t>(layout.size()) != costs.num_stages()) {
    return Status::invalid_argument(
        fmt::format("layer costs: {} stage layouts for a cost table of {} stages", layout.size(),
                    costs.num_stages()));
  }
  std::vector<Row> rows;
  for (size_t s = 0; s < layout.size(); ++s) {
    const StageLayers& l = layout[s];
    if (!l.embedding && !l.head && l.blocks <= 0) {
      return Status::invalid_argument(fmt::format("layer costs: stage {} holds no layer", s));
    }
    rows.push_back(kinds_of(l));
  }
  LayerCosts out;
  for (StageCost* c : {&out.embedding, &out.block, &out.head}) *c = StageCost{0, 0, 0, 0, 0};
  for (double StageCost::*field : kStageCostAdditiveFields) {
    std::vector<double> y;
    for (int32_t s = 0; s < costs.num_stages(); ++s) y.push_back(costs.stage(s).*field);
    const Row x = fit_field(rows, y);
    out.embedding.*field = x[0];
    out.block.*field = x[1];
    out.head.*field = x[2];
  }
  for (int32_t s = 0; s < costs.num_stages(); ++s)
    out.message_bytes = std::max(out.message_bytes, costs.stage(s).message_bytes);
  out.link = costs.link();
  out.time_unit = costs.time_unit();
  out.source = "per layer kind from " + costs.source();
  return out;
}

CostModel cost_model_for_layout(const LayerCosts& layers, const std::vector<StageLayers>& layout,
                                const std::string& layout_name) {
  std::vector<StageCost> stages;
  size_t next_block = 0;  // block_each: the first block of the stage
  for (const StageLayers& l : layout) {
    const Row k = kinds_of(l);
    StageCost c;
    for (double StageCost::*field : kStageCostAdditiveFields) {
      c.*field = k[0] * (layers.embedding.*field) + k[2] * (layers.head.*field);
      if (layers.block_each.empty()) {
        c.*field += k[1] * (layers.block.*field);
      } else {
        for (int32_t b = 0; b < l.blocks; ++b) {
          TP_CHECK(next_block + b < layers.block_each.size(), "layout places more blocks than ",
                   layers.block_each.size());
          c.*field += layers.block_each[next_block + b].*field;
        }
      }
    }
    next_block += static_cast<size_t>(std::max(0, l.blocks));
    c.message_bytes = layers.message_bytes;
    stages.push_back(c);
  }
  CostModel m(std::move(stages), layers.link, layers.time_unit,
              fmt::format("{} for layout {}", layers.source, layout_name));
  return m;
}

}  // namespace tightpipe
