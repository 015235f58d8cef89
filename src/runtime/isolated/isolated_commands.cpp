// How each command of an isolated actor becomes requests to its worker: allocate, copies through the
// shared-memory window or a registered host buffer, fill, module loads and launches, worker operations.
// The queue, admission, answers and shutdown are in isolated_backend.cpp.
#include <fmt/format.h>

#include <algorithm>

#include "cuactor/core/log.hpp"
#include "runtime/isolated/host_copy.hpp"
#include "runtime/isolated/isolated_backend.hpp"
#include "runtime/isolated/isolated_job.hpp"
#include "runtime/isolated/shm.hpp"

namespace cuactor::runtime::isolated {

bool IsolatedBackend::advance(const std::shared_ptr<Job>& job, std::vector<Send>& sends,
                              std::vector<std::shared_ptr<Job>>& done) {
  auto finish_if_idle = [&] {
    job->all_posted = true;
    if (job->outstanding == 0 && !job->answered) {
      job->answered = true;
      done.push_back(job);
    }
    return true;
  };
  if (job->error) return finish_if_idle();
  const Command& command = *job->op->command();
  std::byte* shm = link_->shm().data();

  if (const auto* c = std::get_if<AllocateCmd>(&command)) {
    const std::size_t bytes = c->bytes;
    sends.push_back({request_for(job, MsgKind::allocate, encode_payload(AllocateMsg{bytes}), 0,
                                 [this, job, bytes](Bytes& out, std::uint64_t served) -> Status {
                                   auto b = BufferReply::decode(out);
                                   if (!b) return fail(b.error());
                                   job->result = std::make_shared<DeviceAllocation>(RemoteBuffer{b->buffer}, bytes,
                                                                                    state_, served, owner_for(served));
                                   return ok();
                                 })});
    return finish_if_idle();
  }
  if (const auto* c = std::get_if<AllocateHostCmd>(&command)) {
    if (!std::holds_alternative<std::shared_ptr<HostBuffer>>(job->result)) {
      auto region = SharedRegion::create("cuactor-host-buffer", c->bytes);
      if (!region) {
        job->error = region.error();
        return finish_if_idle();
      }
      auto storage = std::make_shared<SharedRegion>(std::move(*region));
      std::weak_ptr<IsolatedBackend> weak = shared_from_this();
      job->result =
          std::make_shared<HostBuffer>(storage, storage->data(), c->bytes, storage->fd(), [weak](std::uint64_t id) {
            if (auto self = weak.lock()) self->release_host(id);
          });
    }
    // Registered with the worker before the reply, so a failure to pin shows here, not at a copy.
    const auto& host = std::get<std::shared_ptr<HostBuffer>>(job->result);
    if (!registered_host(*host, host, sends)) return false;
    return finish_if_idle();
  }
  if (const auto* c = std::get_if<CopyToDeviceCmd>(&command); c && c->src.host_buffer)
    return advance_host_copy(job, *c->src.host_buffer, c->src.owner, static_cast<const std::byte*>(c->src.data),
                             *c->dst, c->src.bytes, true, sends);
  if (const auto* c = std::get_if<CopyToHostCmd>(&command); c && c->dst.host_buffer)
    return advance_host_copy(job, *c->dst.host_buffer, c->dst.owner, static_cast<const std::byte*>(c->dst.data),
                             *c->src, std::min(c->src->bytes(), c->dst.bytes), false, sends);
  if (const auto* c = std::get_if<CopyToDeviceCmd>(&command)) {
    job->total = c->src.bytes;
    const auto* src = static_cast<const std::byte*>(c->src.data);
    while (job->posted < job->total) {
      const std::size_t n = std::min(job->total - job->posted, chunk_);
      const auto offset = ring_.take(n);
      if (!offset) return false;  // the region is full: wait for earlier chunks
      Send s{request_for(job, MsgKind::copy_to_device,
                         encode_payload(CopyMsg{c->dst->remote_id(), job->posted, *offset, n}), c->dst->generation(),
                         nullptr, *offset),
             shm + *offset, src + job->posted, n};
      sends.push_back(std::move(s));
      job->posted += n;
    }
    return finish_if_idle();
  }
  if (const auto* c = std::get_if<CopyToHostCmd>(&command)) {
    job->total = std::min(c->src->bytes(), c->dst.bytes);
    auto* dst = static_cast<std::byte*>(c->dst.data);
    while (job->posted < job->total) {
      const std::size_t n = std::min(job->total - job->posted, chunk_);
      const auto offset = ring_.take(n);
      if (!offset) return false;
      auto copy_out = [to = dst + job->posted, from = shm + *offset, n](Bytes&, std::uint64_t) -> Status {
        host_copy(to, from, n);  // the one host copy
        return ok();
      };
      sends.push_back({request_for(job, MsgKind::copy_to_host,
                                   encode_payload(CopyMsg{c->src->remote_id(), job->posted, *offset, n}),
                                   c->src->generation(), std::move(copy_out), *offset)});
      job->posted += n;
    }
    return finish_if_idle();
  }
  if (const auto* c = std::get_if<FillCmd>(&command)) {
    FillMsg m;
    m.buffer = c->dst->remote_id();
    m.count = c->count;
    m.pattern.assign(c->pattern.begin(), c->pattern.begin() + c->element_bytes);
    sends.push_back({request_for(job, MsgKind::fill, encode_payload(m), c->dst->generation())});
    return finish_if_idle();
  }
  if (const auto* c = std::get_if<LaunchModuleCmd>(&command)) return advance_launch(job, *c, sends);
  if (const auto* c = std::get_if<WorkerOpCmd>(&command)) {
    WorkerOpMsg m;
    m.op = c->op;
    m.payload = c->payload;
    std::uint64_t generation = c->generation;
    for (const auto& [allocation, written] : c->buffers) {
      m.buffers.push_back({allocation->remote_id(), written});
      if (generation == 0) generation = allocation->generation();
    }
    sends.push_back({request_for(job, MsgKind::worker_op, encode_payload(m), generation,
                                 [job](Bytes& out, std::uint64_t) -> Status {
                                   job->result = std::move(out);
                                   return ok();
                                 })});
    return finish_if_idle();
  }
  job->error = Error(errc::internal, fmt::format("request '{}': no isolated form of this command", job->op->name));
  return true;
}

bool IsolatedBackend::advance_launch(const std::shared_ptr<Job>& job, const LaunchModuleCmd& cmd,
                                     std::vector<Send>& sends) {
  const std::uint64_t image = cmd.module->id();
  auto& loaded = modules_[image];
  if (loaded.loading) return false;
  if (loaded.generation != state_->generation()) {
    // First use in this worker: load the image, hold the launch (and what follows) until it is there.
    loaded.loading = true;
    LinkRequest r;
    r.kind = MsgKind::load_module;
    const auto bytes = cmd.module->bytes();
    r.payload = encode_payload(LoadModuleMsg{Bytes(bytes.begin(), bytes.end())});
    r.name = "load_module";
    r.done = [self = shared_from_this(), image](Result<Bytes> out, std::uint64_t served) {
      {
        std::lock_guard lock(self->mutex_);
        auto& m = self->modules_[image];
        m.loading = false;
        std::optional<Error> error;
        if (out) {
          if (auto d = ModuleReply::decode(*out)) {
            m.module = d->module;
            m.generation = served;
          } else {
            error = d.error();
          }
        } else if (out.error() != errc::worker_lost && out.error() != errc::context_poisoned) {
          error = out.error();  // a lost worker is not the image's fault: load again into the next one
        }
        if (error && !self->queue_.empty() && !self->queue_.front()->error) self->queue_.front()->error = *error;
      }
      self->pump();
    };
    sends.push_back({std::move(r)});
    return false;
  }
  LaunchMsg m;
  m.module = loaded.module;
  m.kernel = cmd.kernel;
  m.grid = {cmd.shape.grid.x, cmd.shape.grid.y, cmd.shape.grid.z};
  m.block = {cmd.shape.block.x, cmd.shape.block.y, cmd.shape.block.z};
  m.shared_bytes = cmd.shape.shared_bytes;
  const auto& storage = cmd.args.storage();
  for (const auto& slot : cmd.args.slots()) {
    LaunchArg a;
    if (slot.buffer >= 0) {
      const auto& [allocation, written] = cmd.args.buffers()[static_cast<std::size_t>(slot.buffer)];
      if (Status s = allocation->access(ordinal_); !s) {
        job->error = s.error();
        return true;
      }
      a.kind = written ? LaunchArg::Kind::buffer_rw : LaunchArg::Kind::buffer_ro;
      a.buffer = allocation->remote_id();
    } else {
      const auto* begin = storage.data() + slot.offset;
      a.value.assign(begin, begin + slot.size);
    }
    m.args.push_back(std::move(a));
  }
  sends.push_back({request_for(job, MsgKind::launch, encode_payload(m), loaded.generation)});
  job->all_posted = true;
  return true;
}

std::optional<std::uint64_t> IsolatedBackend::registered_host(const HostBuffer& host, std::shared_ptr<const void> owner,
                                                              std::vector<Send>& sends) {
  auto& reg = hosts_[host.id()];
  if (reg.generation == state_->generation() && reg.host != 0) return reg.host;
  if (reg.registering) return std::nullopt;
  reg.registering = true;
  LinkRequest r;
  r.kind = MsgKind::register_host;
  r.payload = encode_payload(RegisterHostMsg{host.size(), 0});
  r.name = "register_host";
  r.fd = host.shared_fd();
  r.fd_owner = std::move(owner);
  r.done = [self = shared_from_this(), id = host.id()](Result<Bytes> out, std::uint64_t served) {
    {
      std::lock_guard lock(self->mutex_);
      auto it = self->hosts_.find(id);
      std::optional<Error> error;
      if (it != self->hosts_.end()) {
        it->second.registering = false;
        if (out) {
          if (auto d = HostReply::decode(*out)) {
            it->second.host = d->host;
            it->second.generation = served;
          } else {
            error = d.error();
          }
        } else if (out.error() != errc::worker_lost && out.error() != errc::context_poisoned) {
          error = out.error();  // a lost worker is not the buffer's fault: register with the next one
        }
      }
      if (error && !self->queue_.empty() && !self->queue_.front()->error) self->queue_.front()->error = *error;
    }
    self->pump();
  };
  sends.push_back({std::move(r)});
  return std::nullopt;
}

bool IsolatedBackend::advance_host_copy(const std::shared_ptr<Job>& job, const HostBuffer& host,
                                        std::shared_ptr<const void> owner, const std::byte* at,
                                        const DeviceAllocation& device, std::size_t bytes, bool to_device,
                                        std::vector<Send>& sends) {
  const auto id = registered_host(host, std::move(owner), sends);
  if (!id) return false;
  CopyHostMsg m{device.remote_id(), 0, *id, static_cast<std::uint64_t>(at - host.data()), bytes};
  sends.push_back({request_for(job, to_device ? MsgKind::copy_host_to_device : MsgKind::copy_device_to_host,
                               encode_payload(m), device.generation())});
  job->all_posted = true;
  return true;
}

void IsolatedBackend::release_host(std::uint64_t id) noexcept {
  try {
    std::lock_guard lock(mutex_);
    auto it = hosts_.find(id);
    if (it == hosts_.end()) return;
    if (it->second.host != 0 && it->second.generation == state_->generation() && link_) {
      LinkRequest r;
      r.kind = MsgKind::unregister_host;
      r.payload = encode_payload(RegisterHostMsg{0, it->second.host});
      r.generation = it->second.generation;  // dropped if that worker is gone
      r.name = "unregister_host";
      link_->post(std::move(r));
    }
    hosts_.erase(it);
  } catch (const std::exception& e) {
    log(LogLevel::error,
        fmt::format("isolated device {}: releasing host buffer #{} failed: {}", ordinal_, id, e.what()));
  }
}

}  // namespace cuactor::runtime::isolated
