/// @file
/// The expected-type used by every synchronous cuactor API.
#pragma once

#include <cuda/std/expected>

#include "cuactor/core/error.hpp"

namespace cuactor {

/// Result of a synchronous API: a value or an Error.
template <class T>
using Result = cuda::std::expected<T, Error>;

/// Result of a synchronous API that returns nothing on success.
using Status = cuda::std::expected<void, Error>;

/// Wraps an error for returning from a function whose type is Result<T> or Status.
inline cuda::std::unexpected<Error> fail(Error e) {
  return cuda::std::unexpected<Error>(std::move(e));
}
/// Shorthand for `fail(Error(code, message))`.
inline cuda::std::unexpected<Error> fail(errc code, std::string message) {
  return fail(Error(code, std::move(message)));
}

/// The success value of a Status.
inline Status ok() {
  return {};
}

}  // namespace cuactor

/// Evaluates `expr` (a Result/Status); on error returns its error from the enclosing function.
#define CUACTOR_TRY(expr)                                                       \
  do {                                                                          \
    if (auto cuactor_try_r_ = (expr); !cuactor_try_r_)                          \
      return ::cuda::std::unexpected<::cuactor::Error>(cuactor_try_r_.error()); \
  } while (false)
