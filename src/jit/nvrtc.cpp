#include "cuactor/jit/nvrtc.hpp"

#include <fmt/format.h>
#include <nvrtc.h>

#include <memory>
#include <sstream>

#include "cuactor/gpu/check.hpp"

namespace cuactor::jit {
namespace {

struct ProgramDeleter {
  void operator()(nvrtcProgram p) const noexcept { (void)nvrtcDestroyProgram(&p); }
};
using Program = std::unique_ptr<std::remove_pointer_t<nvrtcProgram>, ProgramDeleter>;

std::string arch_option(GpuArch a) {
  return fmt::format("--gpu-architecture=sm_{}{}", a.sm(), a.arch_specific ? "a" : "");
}

std::string program_log(nvrtcProgram p) {
  std::size_t n = 0;
  if (nvrtcGetProgramLogSize(p, &n) != NVRTC_SUCCESS || n <= 1) return {};
  std::string log(n, '\0');
  if (nvrtcGetProgramLog(p, log.data()) != NVRTC_SUCCESS) return {};
  log.resize(n - 1);
  return log;
}

}  // namespace

std::string nvrtc_version() {
  // Part of every NVRTC plan-cache key: computed once.
  static const std::string version = [] {
    int major = 0, minor = 0;
    if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) return std::string("unknown");
    return fmt::format("{}.{}", major, minor);
  }();
  return version;
}

Result<NvrtcOutput> nvrtc_compile(const NvrtcRequest& req) {
  if (req.source.empty())
    return fail(errc::invalid_argument, fmt::format("NVRTC request '{}': the source is empty", req.program_name));
  // NVRTC takes C strings: everything after a NUL would be dropped silently.
  if (const auto nul = req.source.find('\0'); nul != std::string::npos)
    return fail(errc::invalid_argument,
                fmt::format("NVRTC source '{}' has a NUL byte at offset {}: sources must be text (NVRTC would ignore "
                            "everything after it)",
                            req.program_name, nul));
  for (const auto& [hname, text] : req.headers)
    if (const auto nul = text.find('\0'); nul != std::string::npos)
      return fail(errc::invalid_argument,
                  fmt::format("NVRTC header '{}' of '{}' has a NUL byte at offset {}: headers must be text", hname,
                              req.program_name, nul));
  std::vector<const char*> header_sources, header_names;
  for (const auto& [hname, text] : req.headers) {
    header_names.push_back(hname.c_str());
    header_sources.push_back(text.c_str());
  }
  nvrtcProgram raw = nullptr;
  CUACTOR_TRY(
      gpu::check(nvrtcCreateProgram(&raw, req.source.c_str(), req.program_name.c_str(),
                                    static_cast<int>(header_names.size()), header_sources.data(), header_names.data()),
                 fmt::format("nvrtcCreateProgram('{}')", req.program_name)));
  Program prog(raw);
  for (const auto& e : req.name_expressions)
    CUACTOR_TRY(gpu::check(nvrtcAddNameExpression(raw, e.c_str()), fmt::format("nvrtcAddNameExpression('{}')", e)));
  std::vector<std::string> opts = {"-std=c++20", arch_option(req.arch)};
  opts.insert(opts.end(), req.options.begin(), req.options.end());
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  const nvrtcResult rc = nvrtcCompileProgram(raw, static_cast<int>(copts.size()), copts.data());
  NvrtcOutput out;
  out.log = program_log(raw);
  if (rc != NVRTC_SUCCESS)
    return fail(errc::compile_failed, fmt::format("NVRTC could not compile '{}' for {} ({}):\n{}", req.program_name,
                                                  req.arch.name(), nvrtcGetErrorString(rc), out.log.substr(0, 4000)));
  std::size_t n = 0;
  CUACTOR_TRY(gpu::check(nvrtcGetCUBINSize(raw, &n), "nvrtcGetCUBINSize"));
  if (n == 0)
    return fail(errc::compile_failed, fmt::format("NVRTC produced no cubin for '{}' ({} is a virtual architecture?)",
                                                  req.program_name, req.arch.name()));
  out.cubin.resize(n);
  CUACTOR_TRY(gpu::check(nvrtcGetCUBIN(raw, reinterpret_cast<char*>(out.cubin.data())), "nvrtcGetCUBIN"));
  for (const auto& e : req.name_expressions) {
    const char* lowered = nullptr;
    CUACTOR_TRY(gpu::check(nvrtcGetLoweredName(raw, e.c_str(), &lowered), fmt::format("nvrtcGetLoweredName('{}')", e)));
    out.lowered_names.emplace_back(e, lowered);
  }
  return out;
}

Digest cache_key(const NvrtcRequest& req) {
  Hasher h;
  h.field("backend", "nvrtc")
      .field("nvrtc", nvrtc_version())
      .field("arch", req.arch.name())
      .field("source", req.source);
  for (const auto& o : req.options) h.field("option", o);
  for (const auto& [hname, text] : req.headers) h.field("header", hname).field("text", text);
  for (const auto& e : req.name_expressions) h.field("name", e);
  return h.digest();
}

std::string encode_lowered_names(const std::vector<std::pair<std::string, std::string>>& names) {
  std::string s;
  for (const auto& [expr, lowered] : names) s += expr + '\t' + lowered + '\n';
  return s;
}

std::vector<std::pair<std::string, std::string>> decode_lowered_names(const std::string& metadata) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(metadata);
  for (std::string line; std::getline(in, line);) {
    const auto tab = line.find('\t');
    if (tab != std::string::npos) out.emplace_back(line.substr(0, tab), line.substr(tab + 1));
  }
  return out;
}

}  // namespace cuactor::jit
