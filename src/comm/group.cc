// Process groups: ParallelLayout, the group view and the default Transport::make_group
// (transport.h).
#include <fmt/format.h>

#include <algorithm>

#include "tightpipe/check.h"
#include "tightpipe/transport.h"

namespace tightpipe {

std::vector<int> ParallelLayout::pipeline_group(int dp_rank) const {
  std::vector<int> g;
  for (int p = 0; p < pp; ++p) g.push_back(global(p, dp_rank));
  return g;
}

std::vector<int> ParallelLayout::data_parallel_group(int pp_rank) const {
  std::vector<int> g;
  for (int d = 0; d < dp; ++d) g.push_back(global(pp_rank, d));
  return g;
}

namespace {

// Maps view ranks to parent ranks and passes everything else through: requests are the parent's.
class GroupView final : public Transport {
 public:
  GroupView(Transport& parent, std::vector<int> members)
      : parent_(parent), members_(std::move(members)) {
    const auto it = std::find(members_.begin(), members_.end(), parent_.rank());
    TP_CHECK(it != members_.end(), "group view: parent rank ", parent_.rank(), " not a member");
    rank_ = static_cast<int>(it - members_.begin());
    for (int m : members_) TP_CHECK(m >= 0 && m < parent_.size(), "group view: bad member ", m);
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string name() const override {
    return fmt::format("{} group of {}", parent_.name(), members_.size());
  }
  std::unique_ptr<Request> isend(int dst, int tag, std::span<const std::byte> data) override {
    TP_CHECK(dst >= 0 && dst < size(), "group view: dst ", dst, " of ", size());
    return parent_.isend(members_[dst], tag, data);
  }
  std::unique_ptr<Request> irecv(int src, int tag, std::span<std::byte> data) override {
    TP_CHECK(src >= 0 && src < size(), "group view: src ", src, " of ", size());
    return parent_.irecv(members_[src], tag, data);
  }
  void abort(std::string_view reason) override { parent_.abort(reason); }
  std::optional<Status> aborted() const override { return parent_.aborted(); }

 private:
  Transport& parent_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace

std::unique_ptr<Transport> make_group_view(Transport& parent, std::vector<int> members) {
  return std::make_unique<GroupView>(parent, std::move(members));
}

Result<std::unique_ptr<Transport>> Transport::make_group(std::vector<int> members) {
  return make_group_view(*this, std::move(members));
}

}  // namespace tightpipe
