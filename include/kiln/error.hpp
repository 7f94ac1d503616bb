// Exceptions thrown by kiln. Every message names the op, its operands
// (shapes, dtypes, devices) and what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace kiln {

/// Base of every kiln exception.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
/// Shapes that do not broadcast, a bad axis, a reshape to the wrong size, an index out of range.
class ShapeError : public Error { public: using Error::Error; };
/// A dtype an op does not support, or a cast that would lose the value's kind.
class DTypeError : public Error { public: using Error::Error; };
/// Operands on different devices, a device that does not exist, a GPU feature used on the CPU.
class DeviceError : public Error { public: using Error::Error; };
/// An allocation failed; the message gives the request and the pool's state.
class OutOfMemoryError : public Error { public: using Error::Error; };
/// A run-time kernel failed to compile; the message holds the compiler log.
class CompileError : public Error { public: using Error::Error; };
/// A CUDA, NVRTC, cuBLAS or NCCL call failed; the message names the call, file:line and device.
class CudaError : public Error { public: using Error::Error; };
/// A value is out of the range an op accepts (a negative size, a bad file, a bad argument).
class ValueError : public Error { public: using Error::Error; };

}  // namespace kiln
