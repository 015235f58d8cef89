#include "cuactor/runtime/op_context.hpp"

#include "cuactor/runtime/detail/request.hpp"
#include "runtime/op_services.hpp"

namespace cuactor::runtime {

int OpContext::device() const noexcept {
  return services_->device();
}
GpuArch OpContext::arch() const noexcept {
  return services_->arch();
}
int OpContext::sm_count() const noexcept {
  return services_->sm_count();
}
cudaStream_t OpContext::stream() const noexcept {
  return services_->stream();
}
cublasHandle_t OpContext::cublas() const noexcept {
  return services_->cublas();
}
const gpu::MemPool& OpContext::pool() const noexcept {
  return services_->pool();
}
const std::shared_ptr<DeviceState>& OpContext::state() const noexcept {
  return services_->state();
}
std::uint64_t OpContext::generation() const noexcept {
  return services_->state()->generation();
}
bool OpContext::capturing() const noexcept {
  return services_->capturing();
}
void OpContext::keep_alive(std::shared_ptr<const void> object) {
  op_->keep_alive.push_back(std::move(object));
}
Result<std::shared_ptr<DeviceAllocation>> OpContext::allocate_bytes(std::size_t bytes) {
  return services_->allocate_bytes(bytes);
}
void OpContext::set_capture_listener(CaptureListener listener) {
  services_->set_capture_listener(std::move(listener));
}

}  // namespace cuactor::runtime
