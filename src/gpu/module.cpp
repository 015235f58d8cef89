#include "cuactor/gpu/module.hpp"

#include <fmt/format.h>

#include <fstream>
#include <iterator>
#include <utility>

#include "cuactor/core/driver_api.hpp"
#include "cuactor/gpu/check.hpp"
#include "cuactor/gpu/device.hpp"

namespace cuactor::gpu {
namespace {

// The driver API needs the runtime's primary context to exist and be current.
Result<const DriverApi*> driver() {
  // Without any driver the runtime reports "driver version is insufficient", which sends users
  // looking for an upgrade when there is nothing installed at all.
  if (driver_version() == 0)
    return fail(errc::no_device,
                "no CUDA driver found (libcuda.so.1 is missing or cannot be loaded): compiling and caching kernels "
                "works without one, loading and running them needs an NVIDIA driver");
  CUACTOR_TRY(check(cudaFree(nullptr), "cudaFree(nullptr) (context initialisation)"));
  const DriverApi& api = driver_api();
  if (!api.available) return fail(errc::no_device, "the CUDA driver API could not be resolved");
  return &api;
}

}  // namespace

Result<Library> Library::load_data(const void* image) {
  if (image == nullptr) return fail(errc::invalid_argument, "Library::load_data: image is null");
  auto api = driver();
  if (!api) return fail(api.error());
  Library l;
  CUACTOR_CUDA_TRY((*api)->library_load_data(&l.lib_, image, nullptr, nullptr, 0, nullptr, nullptr, 0));
  return l;
}

Result<Library> Library::load_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(errc::invalid_argument, fmt::format("Library::load_file: cannot open '{}'", path.string()));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // PTX images must be NUL-terminated; harmless for cubin/fatbin
  return load_data(bytes.data());
}

Library& Library::operator=(Library&& o) noexcept {
  if (this != &o) {
    if (lib_) (void)driver_api().library_unload(lib_);
    lib_ = std::exchange(o.lib_, nullptr);
  }
  return *this;
}

Library::~Library() {
  if (lib_) (void)driver_api().library_unload(lib_);
}

Result<Kernel> Library::kernel(const std::string& name) const {
  // Parameter queries need a current context even though the library is context-independent.
  auto drv = driver();
  if (!drv) return fail(drv.error());
  const DriverApi& api = **drv;
  Kernel k;
  const CUresult r = api.library_get_kernel(&k.kernel_, lib_, name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND)
    return fail(errc::invalid_argument, fmt::format("kernel '{}' is not in the loaded library", name));
  CUACTOR_TRY(check(r, fmt::format("cuLibraryGetKernel('{}')", name)));
  k.name_ = name;
  for (std::size_t i = 0;; ++i) {
    ParamInfo p;
    const CUresult pr = api.kernel_get_param_info(k.kernel_, i, &p.offset, &p.size);
    if (pr == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
    CUACTOR_TRY(check(pr, fmt::format("cuKernelGetParamInfo('{}', {})", name, i)));
    k.params_.push_back(p);
  }
  return k;
}

Result<int> Kernel::num_registers(int ordinal) const {
  auto api = driver();
  if (!api) return fail(api.error());
  CUdevice dev{};
  CUACTOR_CUDA_TRY((*api)->device_get(&dev, ordinal));
  int v = 0;
  CUACTOR_CUDA_TRY((*api)->kernel_get_attribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, kernel_, dev));
  return v;
}

Status Kernel::set_max_dynamic_shared_bytes(int ordinal, int bytes) const {
  auto api = driver();
  if (!api) return fail(api.error());
  CUdevice dev{};
  CUACTOR_CUDA_TRY((*api)->device_get(&dev, ordinal));
  return check((*api)->kernel_set_attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes, kernel_, dev),
               fmt::format("cuKernelSetAttribute('{}', max dynamic shared = {} bytes)", name_, bytes));
}

Status launch(const Kernel& kernel, const LaunchConfig& config, std::span<void* const> args,
              std::span<const std::size_t> arg_sizes) {
  if (!kernel) return fail(errc::invalid_argument, "launch: empty kernel handle");
  const auto& params = kernel.params();
  if (args.size() != params.size() || arg_sizes.size() != args.size())
    return fail(errc::invalid_argument, fmt::format("launch '{}': {} argument(s) given, the kernel takes {}",
                                                    kernel.name(), args.size(), params.size()));
  for (std::size_t i = 0; i < params.size(); ++i)
    if (arg_sizes[i] != params[i].size)
      return fail(errc::invalid_argument,
                  fmt::format("launch '{}': argument {} has {} bytes, the kernel's parameter has {}", kernel.name(), i,
                              arg_sizes[i], params[i].size));
  // A CUkernel may be passed where a CUfunction is expected; it resolves to the current context.
  const DriverApi& api = driver_api();
  return check(api.launch_kernel(reinterpret_cast<CUfunction>(kernel.get()), config.grid.x, config.grid.y,
                                 config.grid.z, config.block.x, config.block.y, config.block.z, config.shared_bytes,
                                 reinterpret_cast<CUstream>(config.stream), const_cast<void**>(args.data()), nullptr),
               [&] { return fmt::format("cuLaunchKernel('{}')", kernel.name()); });
}

}  // namespace cuactor::gpu
