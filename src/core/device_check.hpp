// Checks of values that live on a device (index bounds, class labels) without a host synchronisation.
// On the CPU a check runs at once and throws. On a GPU it is a kernel that records the first offending
// value in a word of mapped host memory; the error is thrown, with the same message and type, by the next
// synchronisation with that GPU (synchronize(), a stream or event wait, item(), to(cpu())...), as CUDA
// reports a kernel's fault, but recoverable: the word is cleared when the error is thrown. A check captured
// in a CUDA graph checks every replay.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/array.hpp"

namespace kiln::detail {

/// The exception a failed check throws.
enum class CheckError { Shape, Value };

/// Every value of `values` (an integer array of any layout and device) lies in [lo, hi); otherwise throws
/// (CPU) or queues the error (GPU) `message`, in which "{value}" is replaced by the first offending value.
void check_range(const Array& values, int64_t lo, int64_t hi, CheckError kind, const std::string& message);

/// The code of a message (the same text and kind give the same code; codes are > 0), for a backend's check
/// kernel. Thread-safe.
int32_t deferred_check_code(CheckError kind, const std::string& message);
/// Throws the error registered under `code` (from deferred_check_code), "{value}" replaced by `value`, with
/// " (found on <device> at a synchronisation; the kernel that checked it ran before)" appended.
[[noreturn]] void throw_deferred_check(int32_t code, int64_t value, Device device);

}  // namespace kiln::detail
