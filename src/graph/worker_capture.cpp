#include "cuactor/graph/worker_capture.hpp"

#include <fmt/format.h>

#include <future>

namespace cuactor::graph {

namespace {

namespace ops = runtime::worker_ops;

/// Posts worker operation `op` with `payload` (objects of worker `generation`, 0: none) and waits
/// for the reply bytes.
Result<std::vector<std::byte>> call_worker(runtime::DeviceActor& actor, std::uint16_t op, std::string_view what,
                                           std::vector<std::byte> payload, std::uint64_t generation) {
  runtime::WorkerOpCmd command;
  command.op = op;
  command.payload = std::move(payload);
  command.generation = generation;
  std::promise<std::pair<std::error_code, std::vector<std::byte>>> done;
  auto reply = done.get_future();
  actor.submit_portable<std::vector<std::byte>>(
      what,
      [what](runtime::OpContext&) -> Result<std::vector<std::byte>> {
        return fail(errc::unsupported,
                    fmt::format("{}: only on an isolated actor (use ActorCapture in-process)", what));
      },
      std::move(command), [](std::vector<std::byte>&& bytes) -> Result<std::vector<std::byte>> { return bytes; },
      [&done](std::error_code ec, std::vector<std::byte> bytes) {
        done.set_value({ec, std::move(bytes)});
      });
  auto [ec, bytes] = reply.get();
  if (ec) return fail(Error(ec, fmt::format("{} on isolated device {}: {}", what, actor.device(), ec.message())));
  return std::move(bytes);
}

}  // namespace

WorkerGraph::~WorkerGraph() {
  if (release_) release_(detail::graph_command(ops::graph_drop, *this));
}

runtime::WorkerOpCmd detail::graph_command(std::uint16_t op, const WorkerGraph& graph) {
  runtime::WorkerOpCmd command;
  command.op = op;
  runtime::wire::Writer w;
  w.put(graph.id());
  command.payload = w.take();
  command.generation = graph.generation();
  return command;
}

Result<WorkerCapture> WorkerCapture::begin(runtime::DeviceActor& actor, gpu::CaptureMode mode) {
  if (actor.isolation() != runtime::Isolation::worker)
    return fail(errc::unsupported,
                fmt::format("WorkerCapture::begin: device actor {} is in-process; use ActorCapture", actor.device()));
  const std::uint64_t generation = actor.state()->generation();
  runtime::wire::Writer w;
  w.put(static_cast<std::uint8_t>(mode));
  auto r = call_worker(actor, ops::capture_begin, "capture_begin", w.take(), generation);
  if (!r) return fail(r.error());
  return WorkerCapture(actor, generation);
}

WorkerCapture& WorkerCapture::operator=(WorkerCapture&& o) noexcept {
  if (this != &o) {
    if (active()) (void)abandon();
    actor_ = std::exchange(o.actor_, nullptr);
    generation_ = o.generation_;
  }
  return *this;
}

WorkerCapture::~WorkerCapture() {
  if (active()) (void)abandon();
}

Result<std::shared_ptr<WorkerGraph>> WorkerCapture::end_capture() {
  if (!active()) return fail(errc::invalid_argument, "WorkerCapture::end_capture: the capture is not active");
  runtime::DeviceActor& actor = *std::exchange(actor_, nullptr);
  auto r = call_worker(actor, ops::capture_end, "capture_end", {}, generation_);
  if (!r) return fail(r.error());
  runtime::wire::Reader reader(*r, "capture_end reply");
  const auto id = reader.get<std::uint64_t>("graph");
  if (Status s = reader.finish(); !s) return fail(s.error());
  return std::make_shared<WorkerGraph>(id, generation_, actor.detached_poster());
}

Status WorkerCapture::abandon() {
  if (!active()) return ok();
  runtime::DeviceActor& actor = *std::exchange(actor_, nullptr);
  auto r = call_worker(actor, ops::capture_abandon, "capture_abandon", {}, generation_);
  if (!r) return fail(r.error());
  return ok();
}

}  // namespace cuactor::graph
