/// @file
/// cuactor-worker: the process that owns one device in isolated mode ([R10]). Started by the client
/// library only (it needs the channel and shared memory descriptors the client passes), it dies with
/// its parent and exits when the channel closes. Exit status: 0 clean, 2 bad start, 3 protocol error
/// from the client, 4 poisoned context, 5 device unusable.
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cuactor/jit/tuning.hpp"
#include "cuactor/kernels/conv_actor.hpp"
#include "cuactor/kernels/dense_gemm_actor.hpp"
#include "cuactor/kernels/grouped_actor.hpp"
#include "cuactor/runtime/device_actor.hpp"
#include "runtime/isolated/messages.hpp"
#include "runtime/isolated/spawn.hpp"
#include "server.hpp"

namespace iso = cuactor::runtime::isolated;

namespace {

/// The value of `--device N` among the extra arguments (0 when absent), or -1 when malformed.
int device_argument(const std::vector<std::string>& rest) {
  for (std::size_t i = 0; i + 1 < rest.size(); ++i) {
    if (rest[i] != "--device") continue;
    int v = -1;
    const auto& s = rest[i + 1];
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    return ec == std::errc() && end == s.data() + s.size() && v >= 0 ? v : -1;
  }
  return 0;
}

/// The kernels layer's worker operations, with plan caches that live as long as the worker (their
/// handlers all run on the worker actor's one thread).
void register_kernel_ops(cuactor::worker::Server& server) {
  namespace kernels = cuactor::kernels;
  namespace ops = cuactor::runtime::worker_ops;
  // Dense and grouped plans consult the tuning database of this machine first (cuactor tune gemm|grouped).
  auto dense = std::make_shared<kernels::GemmPlanCache>(64, cuactor::jit::default_tuned_planner());
  auto grouped = std::make_shared<kernels::GroupedPlanCache>(64, cuactor::jit::default_tuned_grouped_planner());
  auto conv = std::make_shared<kernels::ConvPlanCache>();
  server.add_handler(ops::dense_gemm, [dense](auto& ctx, auto payload, auto buffers) {
    return kernels::detail::handle_dense_worker_op(ctx, *dense, payload, buffers);
  });
  auto grouped_handler = [grouped](auto& ctx, auto payload, auto buffers) {
    return kernels::detail::handle_grouped_worker_op(ctx, *grouped, payload, buffers);
  };
  server.add_handler(ops::grouped_gemm, grouped_handler);
  server.add_handler(ops::grouped_gemm_device_sized, grouped_handler);
  server.add_handler(ops::conv, [conv](auto& ctx, auto payload, auto buffers) {
    return kernels::detail::handle_conv_worker_op(ctx, *conv, payload, buffers);
  });
}

}  // namespace

int main(int argc, char** argv) {
  auto end = iso::child_startup(argc, argv);
  if (!end) {
    std::fprintf(stderr, "cuactor-worker: %s\n", end.error().to_string().c_str());
    return 2;
  }
  const int device = device_argument(end->rest);
  if (device < 0) {
    std::fprintf(stderr, "cuactor-worker: --device needs a non-negative ordinal\n");
    return 2;
  }
  iso::Channel& channel = *end->channel;
  cuactor::runtime::ActorOptions options;
  options.recover_in_process = false;  // a poisoned context is replaced by a new worker, never reset here
  options.on_escalation = [&channel](int, const cuactor::Error& cause) {
    (void)channel.send(iso::MsgKind::poisoned, 0, iso::encode_payload(iso::PoisonedMsg{cause}));
    std::_Exit(4);
  };
  auto actor = cuactor::runtime::DeviceActor::create(device, options);
  if (!actor) {
    std::fprintf(stderr, "cuactor-worker: device %d: %s\n", device, actor.error().to_string().c_str());
    return 5;
  }
  // Page-lock the shared region so that copies from and to it run as pinned-memory DMA.
  bool pinned = false;
  if (end->shm.size() > 0 && cudaSetDevice(device) == cudaSuccess)
    pinned = cudaHostRegister(end->shm.data(), end->shm.size(), cudaHostRegisterPortable) == cudaSuccess;
  if (!pinned) (void)cudaGetLastError();
  iso::HelloMsg hello;
  hello.device = device;
  hello.pid = static_cast<std::uint64_t>(::getpid());
  hello.shm_bytes = end->shm.size();
  hello.shm_pinned = pinned;
  hello.total_bytes = actor->stats().total_bytes;
  if (!channel.send(iso::MsgKind::hello, 0, iso::encode_payload(hello))) return 0;
  int status = 0;
  {
    cuactor::worker::Server server(*actor, channel, end->shm);
    register_kernel_ops(server);
    status = server.run();
    actor->shutdown();  // completes what is in flight before the tables go away
  }
  if (pinned) cudaHostUnregister(end->shm.data());
  return status;
}
