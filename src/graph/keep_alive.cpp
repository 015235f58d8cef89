#include "cuactor/graph/keep_alive.hpp"

#include <fmt/format.h>

#include <utility>

namespace cuactor::graph {

Result<bool> KeepAliveSet::add(std::shared_ptr<void> owner, const void* address, std::size_t bytes) {
  if (!owner)
    return fail(errc::invalid_argument,
                fmt::format("keep-alive of buffer {} ({} bytes): the owner is null, so nothing would keep it alive",
                            address, bytes));
  const auto [it, inserted] = by_owner_.try_emplace(owner.get(), Entry{address, bytes});
  if (!inserted) return false;
  bytes_ += bytes;
  order_.push_back(std::move(owner));
  return true;
}

bool KeepAliveSet::contains(const std::shared_ptr<void>& owner) const noexcept {
  return owner && by_owner_.contains(owner.get());
}

std::size_t KeepAliveSet::merge_from(KeepAliveSet&& other) {
  std::size_t added = 0;
  for (auto& owner : other.order_) {
    const Entry e = other.by_owner_.at(owner.get());
    if (auto r = add(std::move(owner), e.address, e.bytes); r && *r) ++added;
  }
  other.by_owner_.clear();
  other.order_.clear();
  other.bytes_ = 0;
  return added;
}

std::vector<std::shared_ptr<void>> KeepAliveSet::release_all() noexcept {
  by_owner_.clear();
  bytes_ = 0;
  return std::exchange(order_, {});
}

}  // namespace cuactor::graph
