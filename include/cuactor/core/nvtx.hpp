/// @file
/// NVTX ranges in the "cuactor" domain ([O1]), so an Nsight Systems timeline reads like the program.
///
///     cuactor::nvtx::Range r("grouped.prepare");                       // a fixed name
///     cuactor::nvtx::Range r("fill", request_id);                      // "fill #42"
///     cuactor::nvtx::Range r([&] { return "gemm " + sku.to_string(); });  // any name, built lazily
///     auto s = cuactor::nvtx::Span::start("request", id); ... s.end();  // may end on another thread
///
/// Cost without a profiler: NVTX3 (header-only, from the CUDA toolkit) loads a tool only when one is
/// injected at process start (NVTX_INJECTION64_PATH, set by nsys / ncu); otherwise its first call
/// turns every entry point into a no-op for the life of the process. We create our domain on first
/// use and keep the answer, so a range without a tool is one predictable branch on a cached handle,
/// and dynamic names are never built. Compiled out entirely with -DCUACTOR_NVTX=OFF. Safe to include
/// from .cu files (no fmt, no Asio).
#pragma once

#include <charconv>
#include <concepts>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "cuactor/core/cxx20.hpp"

#ifndef CUACTOR_NVTX
#define CUACTOR_NVTX 0
#endif

#if CUACTOR_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace cuactor::nvtx {

namespace detail {

#if CUACTOR_NVTX
using Domain = nvtxDomainHandle_t;

/// The "cuactor" domain, or null when no tool is attached. Creating it runs NVTX's one-time
/// initialisation, which is where a tool would be injected; the answer cannot change afterwards.
inline Domain domain() noexcept {
  static const Domain d = nvtxDomainCreateA("cuactor");
  return d;
}

/// Event attributes carrying an ASCII name (tools copy it during the call).
inline nvtxEventAttributes_t attributes(const char* name) noexcept {
  nvtxEventAttributes_t a{};
  a.version = NVTX_VERSION;
  a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  a.messageType = NVTX_MESSAGE_TYPE_ASCII;
  a.message.ascii = name;
  return a;
}
#else
using Domain = void*;
inline Domain domain() noexcept {
  return nullptr;
}
#endif

/// "kind #id" in `buf` (truncated to fit); no allocation.
inline const char* kind_and_id(char (&buf)[96], const char* kind, std::uint64_t id) noexcept {
  const std::size_t room = sizeof(buf) - 24;  // leaves space for " #" and 20 digits
  std::size_t n = std::strlen(kind);
  if (n > room) n = room;
  std::memcpy(buf, kind, n);
  buf[n++] = ' ';
  buf[n++] = '#';
  char* end = std::to_chars(buf + n, buf + sizeof(buf) - 1, id).ptr;
  *end = '\0';
  return buf;
}

}  // namespace detail

/// True when a profiler collects NVTX ranges in this process.
[[nodiscard]] inline bool enabled() noexcept {
  return detail::domain() != nullptr;
}

/// A range on the calling thread from construction to destruction (NVTX push/pop): a nested
/// span in the timeline. Not copyable or movable: it must end on the thread that began it.
class Range {
 public:
  /// A range named `name` (not copied until a tool asks for it; any lifetime during the call).
  explicit Range(const char* name) noexcept {
    if (auto d = detail::domain()) push(d, name);
  }
  /// A range named "kind #id", formatted only when a tool is attached.
  Range(const char* kind, std::uint64_t id) noexcept {
    if (auto d = detail::domain()) {
      char buf[96];
      push(d, detail::kind_and_id(buf, kind, id));
    }
  }
  /// A range whose name `make_name()` (returning std::string) builds only when a tool is attached.
  template <class F>
  requires std::invocable<F&> && std::convertible_to<std::invoke_result_t<F&>, std::string>
  explicit Range(F&& make_name) {
    if (auto d = detail::domain()) {
      const std::string name = make_name();
      push(d, name.c_str());
    }
  }
  ~Range() {
#if CUACTOR_NVTX
    if (domain_ != nullptr) nvtxDomainRangePop(domain_);
#endif
  }
  Range(const Range&) = delete;
  Range& operator=(const Range&) = delete;

 private:
  void push([[maybe_unused]] detail::Domain d, [[maybe_unused]] const char* name) noexcept {
#if CUACTOR_NVTX
    const nvtxEventAttributes_t a = detail::attributes(name);
    nvtxDomainRangePushEx(d, &a);
    domain_ = d;
#endif
  }
  detail::Domain domain_ = nullptr;
};

/// A range that may begin and end on different threads (NVTX start/end), e.g. an actor request
/// from submission to completion. Movable; ends at end() or destruction, whichever comes first.
class Span {
 public:
  /// An inactive span (ends nothing).
  Span() noexcept = default;
  /// Starts a span named `name`.
  static Span start(const char* name) noexcept {
    Span s;
    if (auto d = detail::domain()) s.begin(d, name);
    return s;
  }
  /// Starts a span named "kind #id", formatted only when a tool is attached.
  static Span start(const char* kind, std::uint64_t id) noexcept {
    Span s;
    if (auto d = detail::domain()) {
      char buf[96];
      s.begin(d, detail::kind_and_id(buf, kind, id));
    }
    return s;
  }
  Span(Span&& other) noexcept : domain_(std::exchange(other.domain_, nullptr)), id_(other.id_) {}
  Span& operator=(Span&& other) noexcept {
    if (this != &other) {
      end();
      domain_ = std::exchange(other.domain_, nullptr);
      id_ = other.id_;
    }
    return *this;
  }
  ~Span() { end(); }
  /// Ends the span now (later calls do nothing).
  void end() noexcept {
#if CUACTOR_NVTX
    if (domain_ != nullptr) nvtxDomainRangeEnd(std::exchange(domain_, nullptr), id_);
#endif
  }

 private:
  void begin([[maybe_unused]] detail::Domain d, [[maybe_unused]] const char* name) noexcept {
#if CUACTOR_NVTX
    const nvtxEventAttributes_t a = detail::attributes(name);
    id_ = nvtxDomainRangeStartEx(d, &a);
    domain_ = d;
#endif
  }
  detail::Domain domain_ = nullptr;
  std::uint64_t id_ = 0;
};

}  // namespace cuactor::nvtx
