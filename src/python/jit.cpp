// cuactor.jit: warm the run-time kernel cache (no GPU needed, [J5]), list / verify / clear it, and
// the cache location — the library calls behind `cuactor jit ...`.
#include <fmt/format.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common.hpp"
#include "cuactor/core/arch.hpp"
#include "cuactor/jit/disk_cache.hpp"
#include "cuactor/jit/engine.hpp"
#include "cuactor/jit/gemm.hpp"

namespace cuactor::pyext {
namespace {

jit::DiskCacheOptions disk_options(const std::optional<std::string>& directory, bool inspect) {
  jit::DiskCacheOptions d;
  if (directory) d.directory = *directory;
  d.fallback_when_untrusted = !inspect;  // inspecting: the directory asked for, or say why not
  return d;
}

std::string cache_directory(const std::optional<std::string>& directory) {
  if (directory) return *directory;
  return unwrap(jit::default_cache_directory()).string();
}

nb::list list_entries(const std::optional<std::string>& directory) {
  auto cache = unwrap(jit::DiskCache::open(disk_options(directory, true)));
  const auto entries = unwrap(cache.list());
  nb::list out;
  for (const auto& e : entries) {
    nb::dict d;
    d["key"] = e.key;
    d["kind"] = std::string(jit::name(e.kind));
    d["bytes"] = e.file_bytes;
    d["metadata"] = e.metadata;
    d["problem"] = e.problem.empty() ? nb::none() : nb::cast(e.problem);
    out.append(d);
  }
  return out;
}

std::string clear(const std::optional<std::string>& directory) {
  auto cache = unwrap(jit::DiskCache::open(disk_options(directory, true)));
  check(cache.clear());
  return cache.directory().string();
}

nb::dict report_dict(const std::string& what, const jit::WarmReport& r) {
  nb::dict d;
  d["what"] = what;
  d["key"] = r.key;
  d["already_cached"] = r.already_cached;
  d["seconds"] = r.seconds;
  d["bytes"] = r.bytes;
  return d;
}

nb::list warm(const std::vector<std::string>& gemm, const std::vector<std::string>& nvrtc_sources,
              const std::vector<std::string>& nvrtc_names, const std::string& arch,
              const std::vector<std::string>& nvrtc_options, const std::optional<std::string>& directory) {
  if (gemm.empty() && nvrtc_sources.empty())
    raise(errc::invalid_argument, "nothing to warm: give gemm SKUs and/or NVRTC sources");
  const auto target = parse_arch(arch);
  if (!target)
    raise(errc::invalid_argument, fmt::format("arch='{}' is not an architecture like sm_90a or sm_80", arch));
  std::vector<kernels::GemmSku> skus;
  for (const auto& text : gemm) skus.push_back(unwrap(kernels::GemmSku::parse(text)));
  jit::JitOptions options;
  options.disk = disk_options(directory, false);
  auto engine = unwrap(jit::JitEngine::create(std::move(options)));
  std::vector<std::pair<std::string, jit::WarmReport>> done;
  std::optional<Error> error;
  {
    nb::gil_scoped_release release;  // compiles take 25-60 s each; other Python threads go on
    for (std::size_t i = 0; i < nvrtc_sources.size() && !error; ++i) {
      jit::NvrtcRequest r;
      r.source = nvrtc_sources[i];
      r.program_name = i < nvrtc_names.size() ? nvrtc_names[i] : fmt::format("source{}.cu", i);
      r.arch = *target;
      r.options = nvrtc_options;
      auto w = engine->warm(r);
      if (w)
        done.emplace_back(r.program_name, *w);
      else
        error = w.error();
    }
    if (!error) {
      jit::GemmJit gemm_jit(engine);
      for (auto& [sku, report] : jit::warm_all(gemm_jit, skus)) {
        if (report)
          done.emplace_back(sku.to_string(), *report);
        else if (!error)
          error = Error(report.error().code(), fmt::format("{}: {}", sku.to_string(), report.error().message()));
      }
    }
  }
  if (error) raise(*error);
  nb::list out;
  for (const auto& [what, r] : done) out.append(report_dict(what, r));
  return out;
}

}  // namespace

void bind_jit(nb::module_& m) {
  m.def("jit_cache_directory", &cache_directory, nb::arg("directory").none() = nb::none(),
        "The JIT disk cache directory: `directory` when given, else cuactor's default (<cache root>/jit).");
  m.def("jit_list", &list_entries, nb::arg("directory").none() = nb::none(),
        "Every entry of the JIT disk cache, most recently used first, as dicts (key, kind, bytes, metadata, "
        "problem: None when intact, else why it cannot be used).");
  m.def("jit_clear", &clear, nb::arg("directory").none() = nb::none(),
        "Removes every cache file (entries, locks, temporaries) and nothing else; returns the directory.");
  m.def("jit_warm", &warm, nb::arg("gemm"), nb::arg("nvrtc_sources"), nb::arg("nvrtc_names"), nb::arg("arch"),
        nb::arg("nvrtc_options"), nb::arg("directory").none() = nb::none(),
        "Compiles GEMM SKUs (nvcc) and NVRTC sources into the disk cache without a GPU; returns one report dict "
        "per entry (what, key, already_cached, seconds, bytes). Releases the GIL while compiling.");
}

}  // namespace cuactor::pyext
