// --enable-optimizer-post-validation: the optimistic step, the state every rank sends, and the
// check that keeps, redoes or refuses it (train_internal.h, PostValidation;
// docs/post_validation.md).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "exec/train_internal.h"
#include "tightpipe/optimizer.h"

namespace tightpipe::train_internal {
namespace {
// The post-validation states (a user tag: the collectives own the tags from kMaxUserTag on).
constexpr int kTagPostValidation = kMaxUserTag - 3;
// A state: [0] loss share, [1] gradient sum of squares, then nonfinite_flags() (S + 1), then
// the busy fields.
constexpr size_t kHead = 2;

template <typename T>
std::string_view bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)};
}
}  // namespace

uint64_t PostValidation::kept_checksum(const Kept& k) {
  uint64_t h =
      fnv1a(std::string_view(reinterpret_cast<const char*>(&k.adam_step), sizeof(k.adam_step)));
  for (const auto* v : {&k.params, &k.grads, &k.m, &k.v}) h = fnv1a(bytes_of(*v), h);
  return h;
}

PostValidation::PostValidation(PipelineRank& pr, Transport& pipeline, const TrainOptions& opt,
                               size_t fields)
    : pr_(pr), t_(pipeline), opt_(opt), fields_(fields) {}

void PostValidation::step(int32_t step, StepProgram& prog, float lr) {
  const double start = now_seconds() - prog.origin;
  Pending p;
  p.step = step;
  p.lr = lr;
  p.flags = nonfinite_flags(pr_, prog.rank);  // before the step zeroes the gradients
  for (auto& [s, stage] : pr_.stages()) {
    Kept& k = kept_[s];
    const nn::GptStage& c = *stage;  // const: reading does not mark the bf16 copy stale
    k.params.assign(c.params().begin(), c.params().end());
    k.grads.assign(c.grads().begin(), c.grads().end());
    k.m.assign(c.adam_m().begin(), c.adam_m().end());
    k.v.assign(c.adam_v().begin(), c.adam_v().end());
    k.adam_step = c.adam_step();
    k.checksum = kept_checksum(k);
    if (opt_.on_kept_copy) opt_.on_kept_copy(step, s, k.params);
    stage->optimizer_step(opt_.adamw, lr);  // unclipped: what the check finds unclipped stands
    stage->zero_grads();
  }
  pending_ = std::move(p);
  add_optimizer_event(prog.rank, step, start, now_seconds() - prog.origin, /*cpu_wait=*/0);
}

void PostValidation::post(const StepProgram& prog, std::span<const double> fields) {
  TP_CHECK(pending_.has_value() && fields.size() == fields_,
           "post-validation: post without a step");
  Pending& p = *pending_;
  std::vector<double> mine = {prog.loss, prog.grad_sq};
  mine.insert(mine.end(), p.flags.begin(), p.flags.end());
  mine.insert(mine.end(), fields.begin(), fields.end());
  p.rows.assign(t_.size(), std::vector<double>(mine.size(), 0.0));
  p.rows[t_.rank()] = std::move(mine);
  const std::vector<double>& own = p.rows[t_.rank()];
  for (int r = 0; r < t_.size(); ++r) {
    if (r == t_.rank()) continue;
    p.requests.push_back(
        t_.isend(r, kTagPostValidation, std::as_bytes(std::span<const double>(own))));
    p.requests.push_back(
        t_.irecv(r, kTagPostValidation, std::as_writable_bytes(std::span<double>(p.rows[r]))));
  }
}

Result<PostValidation::Decided> PostValidation::validate() {
  TP_CHECK(pending_.has_value(), "post-validation: nothing to validate");
  Pending p = std::move(*pending_);
  pending_.reset();
  const double deadline = now_seconds() + 2 * opt_.exec.timeout_s;
  for (auto& req : p.requests) {
    TP_RETURN_IF_ERROR(req->wait(std::max(0.0, deadline - now_seconds()))
                           .with_context(fmt::format("step {} post-validation state", p.step + 1)));
  }
  const int32_t S = pr_.num_stages();
  const size_t n = kHead + S + 1;
  // The sums in rank order, as allreduce_sum makes them: the synchronous step's numbers.
  std::vector<double> sum(n, 0.0);
  Decided d;
  d.step = p.step;
  for (int r = 0; r < t_.size(); ++r) {
    for (size_t i = 0; i < n; ++i) sum[i] = r == 0 ? p.rows[r][i] : sum[i] + p.rows[r][i];
    d.fields.insert(d.fields.end(), p.rows[r].begin() + n, p.rows[r].end());
  }
  d.loss = sum[0];
  d.grad_norm = std::sqrt(sum[1]);
  // A restore from a copy that is missing or changed would go on with wrong weights: it ends the
  // run instead, naming the step and the stage.
  auto restore = [&]() -> Status {
    for (auto& [s, stage] : pr_.stages()) {
      auto it = kept_.find(s);
      const uint64_t now = it == kept_.end() ? 0 : kept_checksum(it->second);
      if (it == kept_.end() || now != it->second.checksum ||
          it->second.params.size() != stage->params().size()) {
        return Status::corruption(fmt::format(
            "post-validation: step {}, stage {}: the kept copy of the weights is {}; the step "
            "cannot be rolled back, so the run stops here rather than go on with wrong weights; "
            "hint: resume from the last checkpoint (--load)",
            p.step + 1, s,
            it == kept_.end() ? "missing"
                              : fmt::format("damaged (checksum {:#018x}, kept {:#018x})", now,
                                            it->second.checksum)));
      }
    }
    for (auto& [s, stage] : pr_.stages()) {
      const Kept& k = kept_.at(s);
      std::copy(k.params.begin(), k.params.end(), stage->params().begin());
      std::copy(k.grads.begin(), k.grads.end(), stage->grads().begin());
      std::copy(k.m.begin(), k.m.end(), stage->adam_m().begin());
      std::copy(k.v.begin(), k.v.end(), stage->adam_v().begin());
      stage->set_adam_step(k.adam_step);
    }
    return OkStatus();
  };
  if (opt_.check_for_nan && !(std::isfinite(sum[0]) && std::isfinite(sum[1]))) {
    TP_RETURN_IF_ERROR(restore());  // as the synchronous step: not taken
    for (auto& [s, stage] : pr_.stages()) stage->zero_grads();
    return nonfinite_step_error(p.step, sum[0], sum[1],
                                std::vector<double>(sum.begin() + kHead, sum.end()), p.lr);
  }
  d.scale = nn::clip_scale(sum[1], opt_.clip_grad);
  if (d.scale != 1.0f) {  // redo it as the synchronous step does
    TP_RETURN_IF_ERROR(restore());
    for (auto& [s, stage] : pr_.stages()) {
      stage->scale_grads(d.scale);
      stage->optimizer_step(opt_.adamw, p.lr);
      stage->zero_grads();
    }
    d.redone = true;
  }
  return d;
}

}  // namespace tightpipe::train_internal
