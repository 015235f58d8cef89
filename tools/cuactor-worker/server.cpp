#include "server.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <optional>
#include <utility>
#include <variant>

#include "cuactor/core/log.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/memory.hpp"

namespace cuactor::worker {

namespace iso = runtime::isolated;
using runtime::GpuRef;
using runtime::OpContext;

namespace {

/// Runs `fn(OpContext&) -> Result<Bytes>` as an actor operation and calls `done(Result<Bytes>)` once
/// the work finished, keeping the function's own error message.
template <class Fn, class Done>
void submit_bytes(runtime::DeviceActor& actor, runtime::Reads reads, runtime::Writes writes, Fn fn, Done done) {
  auto detail = std::make_shared<std::optional<Error>>();
  actor.submit<std::vector<std::byte>>(
      std::move(reads), std::move(writes),
      [fn = std::move(fn), detail](OpContext& ctx) -> Result<std::vector<std::byte>> {
        auto r = fn(ctx);
        if (!r) *detail = r.error();
        return r;
      },
      [detail, done = std::move(done)](std::error_code ec, std::vector<std::byte> out) mutable {
        if (!ec) return done(Result<std::vector<std::byte>>(std::move(out)));
        if (*detail && (*detail)->code() == ec) return done(fail(**detail));
        done(fail(Error(ec, "the device work of the request failed")));
      });
}

/// submit_bytes() for `fn(OpContext&) -> Status`; `done(Status)`.
template <class Fn, class Done>
void submit_status(runtime::DeviceActor& actor, runtime::Reads reads, runtime::Writes writes, Fn fn, Done done) {
  submit_bytes(
      actor, std::move(reads), std::move(writes),
      [fn = std::move(fn)](OpContext& ctx) -> Result<std::vector<std::byte>> {
        if (Status s = fn(ctx); !s) return fail(s.error());
        return std::vector<std::byte>{};
      },
      [done = std::move(done)](Result<std::vector<std::byte>> out) mutable {
        done(out ? ok() : Status(fail(std::move(out.error()))));
      });
}

}  // namespace

struct Server::HostMapping {
  iso::SharedRegion region;
  ~HostMapping() {
    if (region.data() && cudaHostUnregister(region.data()) != cudaSuccess) (void)cudaGetLastError();
  }
};

void Server::add_handler(std::uint16_t op, runtime::WorkerOpHandler handler) {
  handlers_[op] = std::move(handler);
}

Server::Server(runtime::DeviceActor& actor, iso::Channel& channel, const iso::SharedRegion& shm)
    : actor_(actor), channel_(channel), shm_(shm) {}

int Server::run() {
  for (;;) {
    auto m = channel_.receive();
    if (!m) {
      if (m.error() == errc::protocol_error) {
        log(LogLevel::error, "cuactor-worker: " + m.error().to_string());
        return 3;
      }
      return 0;  // the client closed the channel (or exited)
    }
    if (m->kind == iso::MsgKind::shutdown) return 0;
    dispatch(*m);
  }
}

void Server::reply(std::uint64_t id, Result<Bytes> outcome) {
  if (id == 0) return;  // fire and forget
  iso::ReplyMsg r;
  if (outcome) {
    ++completed_;
    r.result = std::move(*outcome);
  } else {
    ++failed_;
    // A poisoned context answers through the `poisoned` message and the client (exactly once there).
    const auto& e = outcome.error();
    if (classify(e.code()) == FailureClass::context_poisoned || e == errc::circuit_open) return;
    r.error = e;
  }
  (void)channel_.send(iso::MsgKind::reply, id, iso::encode_payload(r));
}

Result<GpuRef<std::byte>> Server::buffer(std::uint64_t id, std::uint64_t offset, std::uint64_t bytes,
                                         std::string_view what) const {
  std::lock_guard lock(mutex_);
  auto it = buffers_.find(id);
  if (it == buffers_.end()) return fail(errc::invalid_argument, fmt::format("{}: buffer {} does not exist", what, id));
  const auto size = it->second.size_bytes();
  if (offset > size || bytes > size - offset)
    return fail(errc::invalid_argument,
                fmt::format("{}: range [{}, +{}) lies outside buffer {} of {} bytes", what, offset, bytes, id, size));
  return it->second;
}

void Server::dispatch(iso::Message& m) {
  const auto id = m.id;
  auto bad = [&](const Error& e) { reply(id, fail(e)); };
  switch (m.kind) {
    case iso::MsgKind::echo:
      return reply(id, std::move(m.payload));
    case iso::MsgKind::allocate: {
      auto d = iso::AllocateMsg::decode(m.payload);
      return d ? allocate(id, *d) : bad(d.error());
    }
    case iso::MsgKind::free: {
      auto d = iso::FreeMsg::decode(m.payload);
      if (!d) return bad(d.error());
      std::lock_guard lock(mutex_);
      buffers_.erase(d->buffer);  // memory returns in stream order once no operation holds it
      return;
    }
    case iso::MsgKind::copy_to_device:
    case iso::MsgKind::copy_to_host: {
      auto d = iso::CopyMsg::decode(m.payload);
      return d ? copy(id, *d, m.kind == iso::MsgKind::copy_to_device) : bad(d.error());
    }
    case iso::MsgKind::fill: {
      auto d = iso::FillMsg::decode(m.payload);
      return d ? fill(id, *d) : bad(d.error());
    }
    case iso::MsgKind::load_module: {
      auto d = iso::LoadModuleMsg::decode(m.payload);
      return d ? load_module(id, *d) : bad(d.error());
    }
    case iso::MsgKind::launch: {
      auto d = iso::LaunchMsg::decode(m.payload);
      return d ? launch(id, *d) : bad(d.error());
    }
    case iso::MsgKind::register_host: {
      auto d = iso::RegisterHostMsg::decode(m.payload);
      return d ? register_host(id, *d, std::move(m.fd)) : bad(d.error());
    }
    case iso::MsgKind::unregister_host: {
      auto d = iso::RegisterHostMsg::decode(m.payload);
      if (!d) return bad(d.error());
      std::lock_guard lock(mutex_);
      hosts_.erase(d->host);  // unpinned once no copy in flight holds it
      return;
    }
    case iso::MsgKind::copy_host_to_device:
    case iso::MsgKind::copy_device_to_host: {
      auto d = iso::CopyHostMsg::decode(m.payload);
      return d ? copy_host(id, *d, m.kind == iso::MsgKind::copy_host_to_device) : bad(d.error());
    }
    case iso::MsgKind::worker_op: {
      auto d = iso::WorkerOpMsg::decode(m.payload);
      return d ? worker_op(id, *d) : bad(d.error());
    }
    case iso::MsgKind::stats:
      return stats(id);
    default:
      return bad(Error(errc::unsupported, fmt::format("cuactor-worker: {} requests are not supported by this worker",
                                                      iso::kind_name(static_cast<std::uint16_t>(m.kind)))));
  }
}

void Server::allocate(std::uint64_t id, const iso::AllocateMsg& m) {
  actor_.allocate<std::byte>(m.bytes, [this, id, bytes = m.bytes](std::error_code ec, GpuRef<std::byte> ref) {
    if (ec) return reply(id, fail(Error(ec, fmt::format("allocate: {} bytes", bytes))));
    std::uint64_t buffer_id = 0;
    {
      std::lock_guard lock(mutex_);
      buffer_id = next_id_++;
      buffers_.emplace(buffer_id, std::move(ref));
    }
    reply(id, iso::encode_payload(iso::BufferReply{buffer_id, bytes}));
  });
}

void Server::copy(std::uint64_t id, const iso::CopyMsg& m, bool to_device) {
  const char* what = to_device ? "copy_to_device" : "copy_to_host";
  if (capture_)
    return reply(id, fail(errc::unsupported,
                          fmt::format("{}: a copy through the shared staging region cannot be recorded into a graph "
                                      "(the region is reused); copy before beginning the capture",
                                      what)));
  auto ref = buffer(m.buffer, m.buffer_offset, m.bytes, what);
  if (!ref) return reply(id, fail(ref.error()));
  auto host = shm_.slice(m.shm_offset, m.bytes);
  if (!host) return reply(id, fail(host.error()));
  enqueue_copy(id, *ref, m.buffer_offset, *host, nullptr, to_device);
}

void Server::enqueue_copy(std::uint64_t id, GpuRef<std::byte> ref, std::uint64_t offset, std::span<std::byte> host,
                          std::shared_ptr<const void> keep, bool to_device) {
  runtime::Reads reads;
  runtime::Writes writes;
  to_device ? (void)writes.add(ref) : (void)reads.add(ref);
  submit_status(
      actor_, std::move(reads), std::move(writes),
      [ref, host, offset, keep = std::move(keep), to_device](OpContext& ctx) -> Status {
        auto* device = static_cast<std::byte*>(ref.allocation()->data()) + offset;
        CUACTOR_TRY(to_device ? gpu::copy_async(device, host.data(), host.size(), ctx.stream())
                              : gpu::copy_async(host.data(), device, host.size(), ctx.stream()));
        if (keep) ctx.keep_alive(keep);  // e.g. a host mapping: pinned until the copy completed
        return ok();
      },
      [this, id](Status s) { reply(id, s ? Result<Bytes>(Bytes{}) : fail(s.error())); });
}

void Server::fill(std::uint64_t id, const iso::FillMsg& m) {
  const auto element = m.pattern.size();
  if (m.count > SIZE_MAX / element)
    return reply(id, fail(errc::invalid_argument, fmt::format("fill: {} elements overflow", m.count)));
  auto ref = buffer(m.buffer, m.buffer_offset, m.count * element, "fill");
  if (!ref) return reply(id, fail(ref.error()));
  submit_status(
      actor_, {}, runtime::Writes{*ref},
      [ref = *ref, m](OpContext& ctx) -> Status {
        auto* device = static_cast<std::byte*>(ref.allocation()->data()) + m.buffer_offset;
        return runtime::enqueue_fill(device, m.count, m.pattern.data(), m.pattern.size(), ctx.stream());
      },
      [this, id](Status s) { reply(id, s ? Result<Bytes>(Bytes{}) : fail(s.error())); });
}

void Server::load_module(std::uint64_t id, iso::LoadModuleMsg& m) {
  m.image.push_back(std::byte{0});  // PTX must be NUL-terminated; binary images ignore the extra byte
  auto lib = gpu::Library::load_data(m.image.data());
  if (!lib) return reply(id, fail(lib.error()));
  std::uint64_t module_id = 0;
  {
    std::lock_guard lock(mutex_);
    module_id = next_id_++;
    modules_.emplace(module_id, std::make_shared<const gpu::Library>(std::move(*lib)));
  }
  reply(id, iso::encode_payload(iso::ModuleReply{module_id}));
}

void Server::launch(std::uint64_t id, const iso::LaunchMsg& m) {
  std::shared_ptr<const gpu::Library> lib;
  {
    std::lock_guard lock(mutex_);
    if (auto it = modules_.find(m.module); it != modules_.end()) lib = it->second;
  }
  if (!lib) return reply(id, fail(errc::invalid_argument, fmt::format("launch: module {} does not exist", m.module)));
  auto kernel = lib->kernel(m.kernel);
  if (!kernel) return reply(id, fail(kernel.error()));
  runtime::Reads reads;
  runtime::Writes writes;
  std::vector<GpuRef<std::byte>> refs(m.args.size());
  for (std::size_t i = 0; i < m.args.size(); ++i) {
    const auto& a = m.args[i];
    if (a.kind == iso::LaunchArg::Kind::value) continue;
    auto ref = buffer(a.buffer, a.buffer_offset, 0, fmt::format("launch {} argument {}", m.kernel, i));
    if (!ref) return reply(id, fail(ref.error()));
    refs[i] = *ref;
    a.kind == iso::LaunchArg::Kind::buffer_rw ? (void)writes.add(*ref) : (void)reads.add(*ref);
  }
  submit_status(
      actor_, std::move(reads), std::move(writes),
      [lib, kernel = *kernel, m, refs](OpContext& ctx) -> Status {
        std::vector<void*> pointers(m.args.size());  // device addresses of buffer arguments
        std::vector<void*> args(m.args.size());
        std::vector<std::size_t> sizes(m.args.size());
        for (std::size_t i = 0; i < m.args.size(); ++i) {
          if (m.args[i].kind == iso::LaunchArg::Kind::value) {
            args[i] = const_cast<std::byte*>(m.args[i].value.data());
            sizes[i] = m.args[i].value.size();
          } else {
            pointers[i] = static_cast<std::byte*>(refs[i].allocation()->data()) + m.args[i].buffer_offset;
            args[i] = &pointers[i];
            sizes[i] = sizeof(void*);
          }
        }
        gpu::LaunchConfig cfg;
        cfg.grid = dim3(m.grid[0], m.grid[1], m.grid[2]);
        cfg.block = dim3(m.block[0], m.block[1], m.block[2]);
        cfg.shared_bytes = m.shared_bytes;
        cfg.stream = ctx.stream();
        CUACTOR_TRY(gpu::launch(kernel, cfg, std::span<void* const>(args), std::span<const std::size_t>(sizes)));
        ctx.keep_alive(lib);
        return ok();
      },
      [this, id](Status s) { reply(id, s ? Result<Bytes>(Bytes{}) : fail(s.error())); });
}

void Server::register_host(std::uint64_t id, const iso::RegisterHostMsg& m, iso::UniqueFd fd) {
  if (!fd) return reply(id, fail(errc::protocol_error, "register_host: no file descriptor came with the message"));
  if (m.bytes == 0) return reply(id, fail(errc::invalid_argument, "register_host: 0 bytes"));
  auto region = iso::SharedRegion::map(fd.release(), m.bytes);
  if (!region) return reply(id, fail(region.error()));
  auto mapping = std::make_shared<HostMapping>();
  mapping->region = std::move(*region);
  if (const cudaError_t e = cudaHostRegister(mapping->region.data(), m.bytes, cudaHostRegisterPortable);
      e != cudaSuccess) {
    mapping->region = iso::SharedRegion{};  // nothing to unregister
    return reply(id, fail(gpu::make_error(e, fmt::format("register_host: page-locking {} bytes", m.bytes))));
  }
  std::uint64_t host = 0;
  {
    std::lock_guard lock(mutex_);
    host = next_id_++;
    hosts_.emplace(host, std::move(mapping));
  }
  reply(id, iso::encode_payload(iso::HostReply{host}));
}

void Server::copy_host(std::uint64_t id, const iso::CopyHostMsg& m, bool to_device) {
  const char* what = to_device ? "copy_host_to_device" : "copy_device_to_host";
  std::shared_ptr<HostMapping> mapping;
  {
    std::lock_guard lock(mutex_);
    if (auto it = hosts_.find(m.host); it != hosts_.end()) mapping = it->second;
  }
  if (!mapping)
    return reply(id, fail(errc::invalid_argument, fmt::format("{}: host buffer {} does not exist", what, m.host)));
  auto host = mapping->region.slice(m.host_offset, m.bytes);
  if (!host) return reply(id, fail(host.error()));
  auto ref = buffer(m.buffer, m.buffer_offset, m.bytes, what);
  if (!ref) return reply(id, fail(ref.error()));
  enqueue_copy(id, *ref, m.buffer_offset, *host, mapping, to_device);
}

void Server::worker_op(std::uint64_t id, iso::WorkerOpMsg& m) {
  if (m.op >= runtime::worker_ops::capture_begin && m.op <= runtime::worker_ops::graph_drop) return graph_op(id, m);
  auto h = handlers_.find(m.op);
  if (h == handlers_.end())
    return reply(
        id, fail(errc::unsupported, fmt::format("worker_op: this worker has no handler for operation 0x{:04x}", m.op)));
  runtime::Reads reads;
  runtime::Writes writes;
  std::vector<GpuRef<std::byte>> refs;
  for (std::size_t i = 0; i < m.buffers.size(); ++i) {
    auto ref = buffer(m.buffers[i].buffer, 0, 0, fmt::format("worker_op 0x{:04x} buffer operand {}", m.op, i));
    if (!ref) return reply(id, fail(ref.error()));
    m.buffers[i].written ? (void)writes.add(*ref) : (void)reads.add(*ref);
    refs.push_back(std::move(*ref));
  }
  submit_bytes(
      actor_, std::move(reads), std::move(writes),
      [handler = h->second, payload = std::move(m.payload), refs = std::move(refs)](OpContext& ctx) {
        std::vector<runtime::WorkerOpBuffer> buffers;
        buffers.reserve(refs.size());
        for (const auto& r : refs) buffers.push_back({r.allocation()->data(), r.size_bytes()});
        return handler(ctx, payload, buffers);
      },
      [this, id](Result<Bytes> out) { reply(id, std::move(out)); });
}

void Server::graph_op(std::uint64_t id, const iso::WorkerOpMsg& m) {
  namespace ops = runtime::worker_ops;
  runtime::wire::Reader r(m.payload, "graph worker operation");
  switch (m.op) {
    case ops::capture_begin: {
      const auto mode = r.get<std::uint8_t>("capture mode");
      if (mode > static_cast<std::uint8_t>(gpu::CaptureMode::relaxed))
        r.reject(fmt::format("capture_begin: mode {} is not 0 (global), 1 (per_thread) or 2 (relaxed)", mode));
      if (Status s = r.finish(); !s) return reply(id, fail(s.error()));
      if (capture_)
        return reply(id, fail(errc::invalid_argument, "capture_begin: this worker's stream is already capturing"));
      auto capture = graph::ActorCapture::begin(actor_, static_cast<gpu::CaptureMode>(mode));
      if (!capture) return reply(id, fail(capture.error()));
      capture_.emplace(std::move(*capture));
      return reply(id, Bytes{});
    }
    case ops::capture_end:
    case ops::capture_abandon: {
      if (Status s = r.finish(); !s) return reply(id, fail(s.error()));
      if (!capture_) return reply(id, fail(errc::invalid_argument, "capture_end: no capture is in progress"));
      auto capture = std::move(*capture_);
      capture_.reset();
      if (m.op == ops::capture_abandon) {
        Status s = capture.abandon();
        return reply(id, s ? Result<Bytes>(Bytes{}) : fail(s.error()));
      }
      auto graph = capture.end_capture();
      if (!graph) return reply(id, fail(graph.error()));
      std::uint64_t graph_id = 0;
      {
        std::lock_guard lock(mutex_);
        graph_id = next_id_++;
        graphs_.emplace(graph_id, std::make_shared<graph::CapturedGraph>(std::move(*graph)));
      }
      runtime::wire::Writer w;
      w.put(graph_id);
      return reply(id, w.take());
    }
    case ops::graph_replay:
    case ops::graph_drop: {
      const auto graph_id = r.get<std::uint64_t>("graph");
      if (Status s = r.finish(); !s) return reply(id, fail(s.error()));
      std::shared_ptr<graph::CapturedGraph> g;
      {
        std::lock_guard lock(mutex_);
        auto it = graphs_.find(graph_id);
        if (it != graphs_.end()) g = it->second;
        if (m.op == ops::graph_drop && it != graphs_.end()) graphs_.erase(it);
      }
      if (!g)
        return reply(id, fail(errc::invalid_argument, fmt::format("graph {} does not exist in this worker", graph_id)));
      if (m.op == ops::graph_drop) return reply(id, Bytes{});
      graph::replay(actor_, std::move(g), [this, id](std::error_code ec, std::monostate) {
        reply(id, ec ? Result<Bytes>(fail(Error(ec, "replay of a graph held by the worker failed"))) : Bytes{});
      });
      return;
    }
    default:
      return reply(id, fail(errc::unsupported, fmt::format("worker_op: unknown graph operation 0x{:04x}", m.op)));
  }
}

void Server::stats(std::uint64_t id) {
  // Once the frees enqueued so far have completed (a marker operation behind them), hand the pool's
  // unused memory back to the device, so that free memory shows what the client's buffers hold.
  submit_status(
      actor_, {}, {}, [](OpContext&) -> Status { return ok(); },
      [this, id](Status) {
        actor_.execute<std::monostate>(
            [](OpContext& ctx) -> Result<std::monostate> {
              if (cudaMemPoolTrimTo(ctx.pool().get(), 0) != cudaSuccess) (void)cudaGetLastError();
              return std::monostate{};
            },
            [this, id](std::error_code, std::monostate) { send_stats(id); });
      });
}

void Server::send_stats(std::uint64_t id) {
  const auto s = actor_.stats();
  iso::StatsReply r;
  r.free_bytes = s.free_bytes;
  r.total_bytes = s.total_bytes;
  r.in_flight = s.in_flight;
  r.completed = completed_.load();
  r.failed = failed_.load();
  {
    std::lock_guard lock(mutex_);
    r.buffers = buffers_.size();
    for (const auto& [bid, ref] : buffers_) r.buffer_bytes += ref.size_bytes();
    r.modules = modules_.size();
    r.graphs = graphs_.size();
    r.host_buffers = hosts_.size();
  }
  reply(id, iso::encode_payload(r));
}

}  // namespace cuactor::worker
