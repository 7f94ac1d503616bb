// GPU random kernels (internal): kiln's Philox streams (include/kiln/random.hpp)
// generated from the same shared text as the CPU's (core/philox.hpp), so uniform
// and randint are bit-identical to the CPU and normal agrees within a few ulp.
// The entry point, cuda_random, is declared in cuda/ops.hpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "core/op_table.hpp"
#include "kiln/dtype.hpp"

namespace kiln::cuda_impl {

/// What a random kernel's source depends on.
struct RandomKernelSpec {
  detail::RandomDistribution distribution = detail::RandomDistribution::Uniform;
  DType dtype = DType::Float32;
  bool wide = false;  ///< randint with span > 2^32: 2 elements per Philox block from 64-bit words
};

/// Name of the generated kernel, e.g. "kiln_random_uniform_f32" or "kiln_random_randint_i64_w64".
std::string random_kernel_name(const RandomKernelSpec& spec);
/// Complete CUDA source (the Philox text of core/philox.hpp + one kernel) for `spec`. The kernel takes
/// (T* out, long long n, u64 seed, u64 offset, const u64* state, u64 blocks, double p0, double p1, double p2,
/// long long low, u64 span) and runs one Philox block per thread (grid-stride); a non-null `state` (a
/// draw captured in a CUDA graph) replaces seed by state[0] and adds state[1] to offset. Throws DTypeError
/// for a dtype the distribution does not support. Pure text: compiles to PTX without a GPU.
std::string random_source(const RandomKernelSpec& spec);

/// CUDA source of kiln_random_graph_state(u64* state, const u64* source, u64 seed, u64 offset), the one-thread
/// kernel that writes a graph's (seed, base offset) before a replay: (seed, offset) when source is null, else
/// (source[0], source[1] + offset).
std::string graph_state_source();
/// Queues kiln_random_graph_state on `stream` (stream-ordered, no synchronisation; the values travel as
/// kernel arguments, so no host buffer must outlive the call). Compiles the kernel on first use per device.
void write_graph_random_state(int device, void* state, const void* source, uint64_t seed, uint64_t offset,
                              cudaStream_t stream);

}  // namespace kiln::cuda_impl
