#include "cuactor/gpu/event.hpp"

#include <utility>

#include "cuactor/gpu/check.hpp"

namespace cuactor::gpu {

Result<Event> Event::create(Kind kind) {
  Event e;
  e.kind_ = kind;
  const unsigned flags = kind == Kind::timing ? cudaEventDefault : cudaEventDisableTiming;
  CUACTOR_CUDA_TRY(cudaEventCreateWithFlags(&e.event_, flags));
  return e;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_) (void)cudaEventDestroy(event_);
    event_ = std::exchange(o.event_, nullptr);
    kind_ = o.kind_;
  }
  return *this;
}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}

Status Event::record(cudaStream_t stream) const {
  return check(cudaEventRecord(event_, stream), "cudaEventRecord");
}

Status Event::wait_on(cudaStream_t stream) const {
  return check(cudaStreamWaitEvent(stream, event_, 0), "cudaStreamWaitEvent");
}

Status Event::synchronize() const {
  return check(cudaEventSynchronize(event_), "cudaEventSynchronize");
}

Result<bool> Event::query() const {
  const cudaError_t e = cudaEventQuery(event_);
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) return false;
  return fail(make_error(e, "cudaEventQuery"));
}

Result<float> Event::elapsed_ms(const Event& start, const Event& stop) {
  if (start.kind_ != Kind::timing || stop.kind_ != Kind::timing)
    return fail(errc::invalid_argument, "Event::elapsed_ms needs two events created with Kind::timing");
  float ms = 0;
  CUACTOR_CUDA_TRY(cudaEventElapsedTime(&ms, start.event_, stop.event_));
  return ms;
}

}  // namespace cuactor::gpu
