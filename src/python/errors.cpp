// Errors: the translator from ErrorException to the exception classes of cuactor.errors ([P3]).
#include <nanobind/stl/string.h>

#include "common.hpp"

namespace cuactor::pyext {

nb::object make_exception(std::error_code code, const std::string& message) {
  nb::object from_code = nb::module_::import_("cuactor.errors").attr("_from_code");
  return from_code(code.category().name(), code.value(), code.message(), message);
}

void bind_errors(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const ErrorException& e) {
      nb::object exc = make_exception(e.error().code(), e.error().message());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
    }
  });
  m.def(
      "_error_code_names",
      [] {
        nb::dict d;
        for (int v = 1;; ++v) {
          const std::string n = make_error_code(static_cast<errc>(v)).message();
          if (n.empty() || n.starts_with("unknown")) break;
          d[nb::int_(v)] = n;
        }
        return d;
      },
      "The message of every cuactor error code by value (the table cuactor.errors maps to classes).");
}

}  // namespace cuactor::pyext
