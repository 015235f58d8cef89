#include "runtime/isolated/messages.hpp"

#include <fmt/format.h>

namespace cuactor::runtime::isolated {
namespace {

/// Stable ids of the error categories on the wire.
enum class CategoryId : std::uint8_t { cuactor = 0, cuda_runtime = 1, cuda_driver = 2, nvrtc = 3, cublas = 4 };

const std::error_category* category_of(CategoryId id) noexcept {
  switch (id) {
    case CategoryId::cuactor:
      return &cuactor_category();
    case CategoryId::cuda_runtime:
      return &cuda_runtime_category();
    case CategoryId::cuda_driver:
      return &cuda_driver_category();
    case CategoryId::nvrtc:
      return &nvrtc_category();
    case CategoryId::cublas:
      return &cublas_category();
  }
  return nullptr;
}

/// Decodes `payload` with `body(Reader&, M&)` and checks that it was consumed exactly.
template <class M, class Body>
Result<M> decode_with(std::span<const std::byte> payload, std::string_view what, Body&& body) {
  Reader r(payload, what);
  M m{};
  body(r, m);
  CUACTOR_TRY(r.finish());
  return m;
}

}  // namespace

void encode_error(Writer& w, const Error& e) {
  const auto code = e.code();
  std::uint8_t id = 255;
  for (std::uint8_t i = 0; i <= 4; ++i)
    if (code.category() == *category_of(static_cast<CategoryId>(i))) id = i;
  if (id == 255) {
    w.put(static_cast<std::uint8_t>(CategoryId::cuactor)).put_i32(static_cast<std::int32_t>(errc::internal));
    w.put_string(fmt::format("{} (from category {}:{})", e.message(), code.category().name(), code.value()));
    return;
  }
  w.put(id).put_i32(code.value()).put_string(e.message());
}

Error decode_error(Reader& r) {
  const auto id = r.get<std::uint8_t>("error category");
  const auto value = r.get_i32("error value");
  auto message = r.get_string("error message");
  const std::error_category* cat = category_of(static_cast<CategoryId>(id));
  if (!cat) {
    r.reject(fmt::format("error category id {} is not known", id));
    return Error(errc::protocol_error, "undecodable error");
  }
  if (value == 0) {
    r.reject("error value 0 is not an error");
    return Error(errc::protocol_error, "undecodable error");
  }
  return Error(std::error_code(value, *cat), std::move(message));
}

void HelloMsg::encode(Writer& w) const {
  w.put_i32(device).put(pid).put(shm_bytes).put_bool(shm_pinned).put(total_bytes);
}
Result<HelloMsg> HelloMsg::decode(std::span<const std::byte> payload) {
  return decode_with<HelloMsg>(payload, "hello", [](Reader& r, HelloMsg& m) {
    m.device = r.get_i32("device");
    m.pid = r.get<std::uint64_t>("pid");
    m.shm_bytes = r.get<std::uint64_t>("shm_bytes");
    m.shm_pinned = r.get_bool("shm_pinned");
    m.total_bytes = r.get<std::uint64_t>("total_bytes");
  });
}

void ReplyMsg::encode(Writer& w) const {
  w.put_bool(error.has_value());
  if (error)
    encode_error(w, *error);
  else
    w.put_bytes(result);
}
Result<ReplyMsg> ReplyMsg::decode(std::span<const std::byte> payload) {
  return decode_with<ReplyMsg>(payload, "reply", [](Reader& r, ReplyMsg& m) {
    if (r.get_bool("failed")) {
      m.error = decode_error(r);
    } else {
      auto b = r.get_bytes("result");
      m.result.assign(b.begin(), b.end());
    }
  });
}

void PoisonedMsg::encode(Writer& w) const {
  encode_error(w, cause);
}
Result<PoisonedMsg> PoisonedMsg::decode(std::span<const std::byte> payload) {
  return decode_with<PoisonedMsg>(payload, "poisoned", [](Reader& r, PoisonedMsg& m) { m.cause = decode_error(r); });
}

void AllocateMsg::encode(Writer& w) const {
  w.put(bytes);
}
Result<AllocateMsg> AllocateMsg::decode(std::span<const std::byte> payload) {
  return decode_with<AllocateMsg>(payload, "allocate request",
                                  [](Reader& r, AllocateMsg& m) { m.bytes = r.get<std::uint64_t>("bytes"); });
}

void BufferReply::encode(Writer& w) const {
  w.put(buffer).put(bytes);
}
Result<BufferReply> BufferReply::decode(std::span<const std::byte> payload) {
  return decode_with<BufferReply>(payload, "allocate reply", [](Reader& r, BufferReply& m) {
    m.buffer = r.get<std::uint64_t>("buffer");
    m.bytes = r.get<std::uint64_t>("bytes");
  });
}

void FreeMsg::encode(Writer& w) const {
  w.put(buffer);
}
Result<FreeMsg> FreeMsg::decode(std::span<const std::byte> payload) {
  return decode_with<FreeMsg>(payload, "free request",
                              [](Reader& r, FreeMsg& m) { m.buffer = r.get<std::uint64_t>("buffer"); });
}

void CopyMsg::encode(Writer& w) const {
  w.put(buffer).put(buffer_offset).put(shm_offset).put(bytes);
}
Result<CopyMsg> CopyMsg::decode(std::span<const std::byte> payload) {
  return decode_with<CopyMsg>(payload, "copy request", [](Reader& r, CopyMsg& m) {
    m.buffer = r.get<std::uint64_t>("buffer");
    m.buffer_offset = r.get<std::uint64_t>("buffer_offset");
    m.shm_offset = r.get<std::uint64_t>("shm_offset");
    m.bytes = r.get<std::uint64_t>("bytes");
  });
}

void FillMsg::encode(Writer& w) const {
  w.put(buffer).put(buffer_offset).put(count).put_bytes(pattern);
}
Result<FillMsg> FillMsg::decode(std::span<const std::byte> payload) {
  return decode_with<FillMsg>(payload, "fill request", [](Reader& r, FillMsg& m) {
    m.buffer = r.get<std::uint64_t>("buffer");
    m.buffer_offset = r.get<std::uint64_t>("buffer_offset");
    m.count = r.get<std::uint64_t>("count");
    auto p = r.get_bytes("pattern");
    const auto n = p.size();
    if (r.good() && n != 1 && n != 2 && n != 4 && n != 8 && n != 16)
      r.reject(fmt::format("fill request: pattern of {} bytes is not 1, 2, 4, 8 or 16", n));
    m.pattern.assign(p.begin(), p.end());
  });
}

void LoadModuleMsg::encode(Writer& w) const {
  w.put_bytes(image);
}
Result<LoadModuleMsg> LoadModuleMsg::decode(std::span<const std::byte> payload) {
  return decode_with<LoadModuleMsg>(payload, "load_module request", [](Reader& r, LoadModuleMsg& m) {
    auto b = r.get_bytes("image");
    if (r.good() && b.empty()) r.reject("load_module request: the image is empty");
    m.image.assign(b.begin(), b.end());
  });
}

void ModuleReply::encode(Writer& w) const {
  w.put(module);
}
Result<ModuleReply> ModuleReply::decode(std::span<const std::byte> payload) {
  return decode_with<ModuleReply>(payload, "load_module reply",
                                  [](Reader& r, ModuleReply& m) { m.module = r.get<std::uint64_t>("module"); });
}

void LaunchMsg::encode(Writer& w) const {
  w.put(module).put_string(kernel);
  for (auto v : grid) w.put(v);
  for (auto v : block) w.put(v);
  w.put(shared_bytes).put(static_cast<std::uint32_t>(args.size()));
  for (const auto& a : args) {
    w.put(static_cast<std::uint8_t>(a.kind));
    if (a.kind == LaunchArg::Kind::value)
      w.put_bytes(a.value);
    else
      w.put(a.buffer).put(a.buffer_offset);
  }
}
Result<LaunchMsg> LaunchMsg::decode(std::span<const std::byte> payload) {
  return decode_with<LaunchMsg>(payload, "launch request", [](Reader& r, LaunchMsg& m) {
    m.module = r.get<std::uint64_t>("module");
    m.kernel = r.get_string("kernel");
    for (auto& v : m.grid) v = r.get<std::uint32_t>("grid");
    for (auto& v : m.block) v = r.get<std::uint32_t>("block");
    m.shared_bytes = r.get<std::uint32_t>("shared_bytes");
    const auto n = r.get_count("argument count", kMaxLaunchArgs);
    for (std::uint32_t i = 0; i < n && r.good(); ++i) {
      LaunchArg a;
      const auto kind = r.get<std::uint8_t>("argument kind");
      if (kind > 2) r.reject(fmt::format("launch request: argument {} has kind {}, not 0, 1 or 2", i, kind));
      a.kind = static_cast<LaunchArg::Kind>(kind);
      if (a.kind == LaunchArg::Kind::value) {
        auto b = r.get_bytes("argument value");
        if (r.good() && (b.empty() || b.size() > kMaxArgBytes))
          r.reject(fmt::format("launch request: argument {} has {} bytes, not 1..{}", i, b.size(), kMaxArgBytes));
        a.value.assign(b.begin(), b.end());
      } else {
        a.buffer = r.get<std::uint64_t>("argument buffer");
        a.buffer_offset = r.get<std::uint64_t>("argument buffer offset");
      }
      m.args.push_back(std::move(a));
    }
  });
}

void RegisterHostMsg::encode(Writer& w) const {
  w.put(bytes).put(host);
}
Result<RegisterHostMsg> RegisterHostMsg::decode(std::span<const std::byte> payload) {
  return decode_with<RegisterHostMsg>(payload, "register_host message", [](Reader& r, RegisterHostMsg& m) {
    m.bytes = r.get<std::uint64_t>("bytes");
    m.host = r.get<std::uint64_t>("host");
  });
}
void HostReply::encode(Writer& w) const {
  w.put(host);
}
Result<HostReply> HostReply::decode(std::span<const std::byte> payload) {
  return decode_with<HostReply>(payload, "register_host reply",
                                [](Reader& r, HostReply& m) { m.host = r.get<std::uint64_t>("host"); });
}
void CopyHostMsg::encode(Writer& w) const {
  w.put(buffer).put(buffer_offset).put(host).put(host_offset).put(bytes);
}
Result<CopyHostMsg> CopyHostMsg::decode(std::span<const std::byte> payload) {
  return decode_with<CopyHostMsg>(payload, "host buffer copy request", [](Reader& r, CopyHostMsg& m) {
    m.buffer = r.get<std::uint64_t>("buffer");
    m.buffer_offset = r.get<std::uint64_t>("buffer_offset");
    m.host = r.get<std::uint64_t>("host");
    m.host_offset = r.get<std::uint64_t>("host_offset");
    m.bytes = r.get<std::uint64_t>("bytes");
  });
}

void WorkerOpMsg::encode(Writer& w) const {
  w.put(op).put_bytes(payload).put(static_cast<std::uint32_t>(buffers.size()));
  for (const auto& b : buffers) w.put(b.buffer).put_bool(b.written);
}
Result<WorkerOpMsg> WorkerOpMsg::decode(std::span<const std::byte> payload) {
  return decode_with<WorkerOpMsg>(payload, "worker_op request", [](Reader& r, WorkerOpMsg& m) {
    m.op = r.get<std::uint16_t>("op");
    auto p = r.get_bytes("payload");
    m.payload.assign(p.begin(), p.end());
    const auto n = r.get_count("buffer count", kMaxWorkerOpBuffers);
    for (std::uint32_t i = 0; i < n && r.good(); ++i) {
      Buffer b;
      b.buffer = r.get<std::uint64_t>("buffer");
      b.written = r.get_bool("buffer written");
      m.buffers.push_back(b);
    }
  });
}

void StatsReply::encode(Writer& w) const {
  w.put(free_bytes)
      .put(total_bytes)
      .put(buffers)
      .put(buffer_bytes)
      .put(modules)
      .put(graphs)
      .put(host_buffers)
      .put(in_flight);
  w.put(completed).put(failed);
}
Result<StatsReply> StatsReply::decode(std::span<const std::byte> payload) {
  return decode_with<StatsReply>(payload, "stats reply", [](Reader& r, StatsReply& m) {
    for (auto* f : {&m.free_bytes, &m.total_bytes, &m.buffers, &m.buffer_bytes, &m.modules, &m.graphs, &m.host_buffers,
                    &m.in_flight, &m.completed, &m.failed})
      *f = r.get<std::uint64_t>("stats field");
  });
}

}  // namespace cuactor::runtime::isolated
