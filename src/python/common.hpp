/// @file
/// Internal to the Python extension module: how a cuactor Error becomes a Python exception, and the
/// registration functions of each part of the module.
#pragma once

#include <nanobind/nanobind.h>

#include <exception>
#include <string>
#include <utility>

#include "cuactor/core/error.hpp"
#include "cuactor/core/expected.hpp"

namespace cuactor::pyext {

namespace nb = nanobind;

/// A cuactor Error on its way out of a binding; the module's translator raises it as the class of
/// cuactor.errors that its code maps to (never crossing a C or thread boundary: translated on the
/// calling thread, with the GIL, before returning to Python).
class ErrorException : public std::exception {
 public:
  explicit ErrorException(Error e) : error_(std::move(e)), what_(error_.to_string()) {}
  [[nodiscard]] const Error& error() const noexcept { return error_; }
  [[nodiscard]] const char* what() const noexcept override { return what_.c_str(); }

 private:
  Error error_;
  std::string what_;
};

/// Throws `e` as an ErrorException.
[[noreturn]] inline void raise(Error e) {
  throw ErrorException(std::move(e));
}
/// Throws a new Error of `code` with `message`.
[[noreturn]] inline void raise(errc code, std::string message) {
  raise(Error(code, std::move(message)));
}
/// Throws the error of a failed Status.
inline void check(const Status& s) {
  if (!s) raise(s.error());
}
/// The value of `r`, or throws its error.
template <class T>
T unwrap(Result<T>&& r) {
  if (!r) raise(r.error());
  return std::move(*r);
}

/// The exception object (an instance of a cuactor.errors class) for an error code and message;
/// needs the GIL.
nb::object make_exception(std::error_code code, const std::string& message);

void bind_errors(nb::module_& m);
void bind_ops(nb::module_& m);
void bind_conv(nb::module_& m);
void bind_plans(nb::module_& m);
void bind_jit(nb::module_& m);
void bind_device(nb::module_& m);

}  // namespace cuactor::pyext
