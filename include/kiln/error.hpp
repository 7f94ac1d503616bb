// Exceptions thrown by kiln. Every message names the op, its operands
// (shapes, dtypes, devices) and what to do about it.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

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
/// A run-time kernel failed to compile; the message holds the compiler log, and, for NVRTC errors, the
/// program name and the numbered source lines around each reported error (also available separately).
class CompileError : public Error {
 public:
  using Error::Error;
  /// A compile error with its parts: the full message, the compiler's log, the program (kernel) name and
  /// the numbered source lines around each error ("> " marks an error line).
  CompileError(const std::string& message, std::string log, std::string program_name, std::string source_excerpt)
      : Error(message),
        log_(std::move(log)),
        program_name_(std::move(program_name)),
        source_excerpt_(std::move(source_excerpt)) {}
  /// The compiler's log as it printed it ("" when not known).
  const std::string& log() const { return log_; }
  /// The name the program was compiled under (it prefixes the log's lines: "name(12): error: ...").
  const std::string& program_name() const { return program_name_; }
  /// The numbered source lines around each error line ("" when the log names no line).
  const std::string& source_excerpt() const { return source_excerpt_; }

 private:
  std::string log_;
  std::string program_name_;
  std::string source_excerpt_;
};
/// A CUDA, NVRTC, cuBLAS or NCCL call failed; the message names the call, file:line and device.
class CudaError : public Error { public: using Error::Error; };
/// A value is out of the range an op accepts (a negative size, a bad file, a bad argument).
class ValueError : public Error { public: using Error::Error; };
/// A collective or point-to-point operation of kiln::dist failed: a rank that died or never joined (the
/// message names the operation, the ranks, the timeout and what to check), a communicator that was aborted,
/// arrays whose shapes differ across ranks.
class DistError : public Error { public: using Error::Error; };
/// A linear-algebra routine failed on its input (a singular matrix), as numpy.linalg.LinAlgError.
class LinAlgError : public ValueError { public: using ValueError::ValueError; };

}  // namespace kiln
