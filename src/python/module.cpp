// The extension module cuactor._core; the package cuactor (python/cuactor/) is its public face.
#include <nanobind/stl/string.h>

#include "common.hpp"
#include "cuactor/surfaces/info.hpp"

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  using namespace cuactor::pyext;
  m.doc() = "cuactor's C++ library (kernels, plans, JIT, device actor) for the cuactor package.";
  bind_errors(m);
  m.def("info_json", &cuactor::surfaces::info_json, nb::arg("with_actor_stats") = false, nb::arg("indent") = -1,
        "The report of `cuactor info --json` as JSON text (cuactor.info() parses it).");
  m.def("version", &cuactor::surfaces::version, "The cuactor library version.");
  bind_ops(m);
  bind_conv(m);
  bind_plans(m);
  bind_jit(m);
  bind_device(m);
}
