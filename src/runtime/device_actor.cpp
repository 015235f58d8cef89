// DeviceActor: the thin facade over a backend (the in-process ActorLoop for now).
#include "cuactor/runtime/device_actor.hpp"

#include <cublas_v2.h>
#include <fmt/format.h>

#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"
#include "runtime/actor_loop.hpp"

namespace cuactor::runtime {

Result<DeviceActor> DeviceActor::create(int ordinal, ActorOptions options) {
  if (options.mailbox_capacity == 0 || options.max_in_flight == 0 || options.max_batch == 0)
    return fail(errc::invalid_argument,
                fmt::format("DeviceActor: mailbox_capacity={}, max_in_flight={}, max_batch={}: each must be >= 1",
                            options.mailbox_capacity, options.max_in_flight, options.max_batch));
  if (options.breaker.max_poisonings < 0)
    return fail(errc::invalid_argument,
                fmt::format("DeviceActor: breaker.max_poisonings={} must be >= 0", options.breaker.max_poisonings));
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

Status enqueue_gemm(OpContext& ctx, const GemmDesc& d) {
  if (d.m < 0 || d.n < 0 || d.k < 0)
    return fail(errc::invalid_argument, fmt::format("gemm: m={}, n={}, k={}: dimensions must be >= 0", d.m, d.n, d.k));
  auto check_operand = [&](const char* name, const std::shared_ptr<DeviceAllocation>& buf, int rows, int cols,
                           int ld) -> Status {
    if (ld < std::max(1, rows))
      return fail(
          errc::invalid_argument,
          fmt::format("gemm: ld{}={} is smaller than the {} rows of op-free {} (column-major)", name, ld, rows, name));
    const std::size_t needed =
        cols == 0
            ? 0
            : (static_cast<std::size_t>(ld) * static_cast<std::size_t>(cols - 1) + static_cast<std::size_t>(rows));
    if (needed * d.element_bytes > buf->bytes())
      return fail(errc::invalid_argument,
                  fmt::format("gemm: {} needs {} elements ({}x{}, ld={}) but its buffer holds {}", name, needed, rows,
                              cols, ld, buf->bytes() / d.element_bytes));
    return ok();
  };
  CUACTOR_TRY(check_operand("a", d.a, d.transpose_a ? d.k : d.m, d.transpose_a ? d.m : d.k, d.lda));
  CUACTOR_TRY(check_operand("b", d.b, d.transpose_b ? d.n : d.k, d.transpose_b ? d.k : d.n, d.ldb));
  CUACTOR_TRY(check_operand("c", d.c, d.m, d.n, d.ldc));
  if (d.m == 0 || d.n == 0) return ok();
  const cublasOperation_t op_a = d.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = d.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const std::string what = fmt::format("cublasGemmEx(m={}, n={}, k={}, device {})", d.m, d.n, d.k, ctx.device());
  if (d.type == CUDA_R_64F) {
    const double alpha = d.alpha, beta = d.beta;
    return gpu::check(
        cublasGemmEx(ctx.cublas(), op_a, op_b, d.m, d.n, d.k, &alpha, d.a->data(), d.type, d.lda, d.b->data(), d.type,
                     d.ldb, &beta, d.c->data(), d.type, d.ldc, CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
        what);
  }
  const float alpha = static_cast<float>(d.alpha), beta = static_cast<float>(d.beta);
  return gpu::check(
      cublasGemmEx(ctx.cublas(), op_a, op_b, d.m, d.n, d.k, &alpha, d.a->data(), d.type, d.lda, d.b->data(), d.type,
                   d.ldb, &beta, d.c->data(), d.type, d.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
      what);
}

}  // namespace cuactor::runtime
