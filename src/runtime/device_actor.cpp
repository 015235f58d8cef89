// DeviceActor: the thin facade over a backend (the in-process ActorLoop, or an isolated worker's client).
#include "cuactor/runtime/device_actor.hpp"

#include <fmt/format.h>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "runtime/actor_loop.hpp"
#include "runtime/isolated/isolated_backend.hpp"

namespace cuactor::runtime {

Result<DeviceActor> DeviceActor::create(int ordinal, ActorOptions options) {
  if (options.mailbox_capacity == 0 || options.max_in_flight == 0 || options.max_batch == 0)
    return fail(errc::invalid_argument,
                fmt::format("DeviceActor: mailbox_capacity={}, max_in_flight={}, max_batch={}: each must be >= 1",
                            options.mailbox_capacity, options.max_in_flight, options.max_batch));
  if (options.breaker.max_poisonings < 0)
    return fail(errc::invalid_argument,
                fmt::format("DeviceActor: breaker.max_poisonings={} must be >= 0", options.breaker.max_poisonings));
  if (options.isolation == Isolation::worker) {
    // The client never touches the device: the worker checks the ordinal (a bad one fails its start).
    auto backend = isolated::IsolatedBackend::start(ordinal, options);
    if (!backend) return fail(backend.error());
    return DeviceActor(std::move(*backend));
  }
  CUACTOR_TRY(gpu::check_ordinal(ordinal));
  auto loop = std::make_shared<detail::ActorLoop>(ordinal, std::move(options));
  CUACTOR_TRY(loop->start());
  return DeviceActor(std::move(loop));
}

DeviceActor& DeviceActor::operator=(DeviceActor&& o) noexcept {
  if (this != &o) {
    if (backend_) backend_->shutdown();
    backend_ = std::move(o.backend_);
  }
  return *this;
}

DeviceActor::~DeviceActor() {
  if (backend_) backend_->shutdown();
}

int DeviceActor::device() const noexcept {
  return backend_ ? backend_->device() : -1;
}
std::shared_ptr<DeviceState> DeviceActor::state() const noexcept {
  return backend_ ? backend_->state() : nullptr;
}
DeviceStats DeviceActor::stats() const {
  return backend_ ? backend_->stats() : DeviceStats{};
}
void DeviceActor::shutdown() {
  if (backend_) backend_->shutdown();
}

std::function<void(WorkerOpCmd)> DeviceActor::detached_poster() const {
  return [weak = std::weak_ptr<detail::ActorBackend>(backend_)](WorkerOpCmd cmd) {
    auto backend = weak.lock();
    if (!backend) return;
    detail::initiate_command<std::monostate>(
        std::move(backend), "release", {}, {}, Command(std::move(cmd)),
        [](CommandResult&&) -> Result<std::monostate> { return std::monostate{}; },
        [](std::error_code, std::monostate) {});
  };
}

}  // namespace cuactor::runtime
