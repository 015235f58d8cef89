/// @file
/// The boundary where exceptions stop: worker threads, completion handlers and C entry points run
/// their work through result_or_error so that an exception (from an allocation, a user callback, a
/// library) becomes a typed error instead of terminating the host process.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <string_view>
#include <utility>

#include "cuactor/core/expected.hpp"

namespace cuactor {

/// Calls `f` (which returns a Result or Status) and returns its value; an escaping exception becomes
/// `out_of_memory` (std::bad_alloc) or `internal`, naming `where` and the exception's text.
template <class F>
auto result_or_error(std::string_view where, F&& f) noexcept -> decltype(std::forward<F>(f)()) {
  try {
    try {
      return std::forward<F>(f)();
    } catch (const std::bad_alloc&) {
      return fail(errc::out_of_memory, std::string(where) + ": out of memory (std::bad_alloc)");
    } catch (const std::exception& e) {
      return fail(errc::internal, std::string(where) + ": unexpected exception: " + e.what());
    } catch (...) {
      return fail(errc::internal, std::string(where) + ": unexpected non-standard exception");
    }
  } catch (...) {
    // Building the error itself failed (no memory for the message): report without one.
    return fail(Error(make_error_code(errc::out_of_memory), {}));
  }
}

}  // namespace cuactor
