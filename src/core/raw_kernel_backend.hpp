// The backend side of RawModule / RawKernel (internal). include/kiln/raw_module.hpp
// is implemented in core (raw_module.cpp: device choice, default names, image
// sniffing) on top of these interfaces, which a backend able to compile and run
// user kernels provides through Backend::raw_kernels() (the CUDA backend:
// src/cuda/raw_module.cpp). No CUDA headers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/raw_module.hpp"

namespace kiln::detail {

/// One loaded kernel of a RawModuleImpl.
class RawKernelImpl {
 public:
  virtual ~RawKernelImpl() = default;
  virtual const std::string& name() const = 0;
  virtual Device device() const = 0;
  virtual int num_params() const = 0;
  virtual KernelAttributes attributes() const = 0;
  /// Checks and launches (see RawKernel::launch).
  virtual void launch(const Dim3& grid, const Dim3& block, const RawLaunchArg* args, size_t count,
                      const LaunchOptions& options) = 0;
};

/// A module loaded on one device.
class RawModuleImpl {
 public:
  virtual ~RawModuleImpl() = default;
  virtual Device device() const = 0;
  virtual const std::string& name() const = 0;
  /// The kernel `name`; throws ValueError listing the module's kernels when there is none.
  virtual std::shared_ptr<RawKernelImpl> function(const std::string& name) = 0;
  virtual std::vector<std::string> kernel_names() const = 0;
};

/// Compiles and loads user modules. `device` is a GPU that exists (checked by the caller) and
/// `options.name` is already filled in.
class RawKernelBackend {
 public:
  virtual ~RawKernelBackend() = default;
  /// Compiles (or finds in the memory/disk cache) and loads `source`.
  virtual std::shared_ptr<RawModuleImpl> from_source(const std::string& source, Device device,
                                                     const RawModuleOptions& options) = 0;
  /// Loads a PTX, CUBIN or fatbin image as it is (not cached).
  virtual std::shared_ptr<RawModuleImpl> from_image(const std::string& image, Device device,
                                                    const std::string& name) = 0;
  /// PTX of `source` for compute capability `arch` (> 0). No GPU needed.
  virtual std::string compile_ptx(const std::string& source, const RawModuleOptions& options, int arch) = 0;
  /// Compute capability (major*10+minor) of an existing GPU `device`.
  virtual int compute_capability(Device device) = 0;
  /// The oldest compute capability the compiler supports (PTX for it runs on every newer GPU).
  virtual int oldest_arch() = 0;
};

}  // namespace kiln::detail
