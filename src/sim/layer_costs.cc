// fit_layer_costs / cost_model_for_layout (cost_model.h): stage costs <-> layer-kind costs.
#include <fmt/format.h>

#include <array>
#include <cmath>

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

// One field: the three kinds' values, non-negative. Kinds the data cannot separate are taken as
// free, the embedding first, then the head; a negative solution pins that kind at 0.
Row fit_field(const std::vector<Row>& rows, const std::vector<double>& y) {
  std::array<bool, kKinds> free{true, true, true};
  for (int k = 0; k < kKinds; ++k) {
    bool used = false;
    for (const Row& r : rows) used = used || r[k] != 0;
    free[k] = used;
  }
  Row x{0, 0, 0};
  for (int attempt = 0; attempt < 2 * kKinds; ++attempt) {
    if (!solve(rows, y, free, x)) {
      if (free[0]) {
        free[0] = false;
      } else if (free[2]) {
        free[2] = false;
      } else {
        return {0, 0, 0};
      }
      continue;
    }
    int negative = -1;
    for (int k = 0; k < kKinds; ++k)
      if (free[k] && x[k] < 0) negative = k;
    if (negative < 0) return x;
    free[negative] = false;
  }
  return x;
}

// The fields of StageCost that scale with the layers a stage holds.
constexpr std::array<double StageCost::*, 12> kFields = {
    &StageCost::f,         &StageCost::i,          &StageCost::w,
    &StageCost::b,         &StageCost::recompute,  &StageCost::optimizer,
    &StageCost::act_bytes, &StageCost::act_after_i_bytes, &StageCost::input_bytes,
    &StageCost::param_bytes, &StageCost::grad_bytes, &StageCost::optimizer_bytes};

}  // namespace

Result<LayerCosts> fit_layer_costs(const CostModel& costs, const std::vector<StageLayers>& layout) {
  if (layout.empty() || static_cast<int32_t>(layout.size()) != costs.num_stages()) {
    return Status::invalid_argument(fmt::format(
        "layer costs: {} stage layouts for a cost table of {} stages", layout.size(),
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
  for (double StageCost::*field : kFields) {
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
  for (const StageLayers& l : layout) {
    const Row k = kinds_of(l);
    StageCost c;
    for (double StageCost::*field : kFields) {
      c.*field = k[0] * (layers.embedding.*field) + k[1] * (layers.block.*field) +
                 k[2] * (layers.head.*field);
    }
    c.message_bytes = layers.message_bytes;
    stages.push_back(c);
  }
  CostModel m(std::move(stages), layers.link, layers.time_unit,
              fmt::format("{} for layout {}", layers.source, layout_name));
  return m;
}

}  // namespace tightpipe
