// The parts of the extension module kiln._kiln, one function per binding file.
#pragma once

#include <nanobind/nanobind.h>

#include <kiln/kiln.hpp>

namespace kiln::python {

namespace nb = nanobind;
using namespace nb::literals;

/// kiln.Array: properties, operators, indexing, exchange protocols (array.cpp).
void bind_array(nb::module_& m);
/// The Array methods that mirror module functions: reductions, shape ops (ops.cpp).
void bind_array_methods(nb::class_<Array>& cls);
/// Creation, the elementwise ops of kiln/ops.def, reductions, shape ops, linear algebra (ops.cpp).
void bind_ops(nb::module_& m);
/// sort, take, tril, tensordot, roll, unique... of kiln/numpy_extra.hpp and kiln/indexing.hpp (extra.cpp).
void bind_extra(nb::module_& m);
/// pad, quantile, percentile, median, histogram, bincount (statistics.cpp).
void bind_statistics(nb::module_& m);
/// kiln.linalg's factorisations, norm with ord, lstsq..., and kiln.kron (linalg.cpp; after bind_ops).
void bind_linalg(nb::module_& m);
/// kiln.fft: numpy.fft's functions (fft.cpp).
void bind_fft(nb::module_& m);
/// requires_grad, grad, backward... on kiln.Array (runtime.cpp).
void bind_autograd_methods(nb::class_<Array>& cls);
/// kiln.nn (modules, losses) and kiln.optim (nn.cpp).
void bind_nn(nb::module_& m);
/// kiln.nn.init: torch.nn.init's initialisers (nn_init.cpp; after bind_nn).
void bind_nn_init(nb::module_& m);
/// Conv2d, pooling, BatchNorm2d, attention, transformer and recurrent layers of kiln.nn (nn_layers.cpp; after bind_nn).
void bind_nn_layers(nb::module_& m);
/// kiln.optim's schedules and GradScaler, optimizer state dicts, and kiln.train (train.cpp; after bind_nn).
void bind_train(nb::module_& m);
/// memory_stats, empty_cache, set_memory_limit... of the GPU allocator (memory.cpp; DeviceError without CUDA).
void bind_memory(nb::module_& m);
/// kiln.compile and kiln.CompiledStep (compile.cpp).
void bind_compile(nb::module_& m);
/// kiln.fuse and kiln.FusionValue (fuse.cpp).
void bind_fuse(nb::module_& m);
/// The FusionValue overloads of the elementwise ops and reductions, registered after their Array forms.
void bind_fusion_overloads(nb::module_& m);
/// Streams, events, pinned memory, device properties, ElementwiseKernel / ReductionKernel / RawModule (gpu.cpp).
void bind_gpu(nb::module_& m);
/// kiln.data: fashion_mnist, read_idx, DataLoader (data.cpp).
void bind_data(nb::module_& m);
/// kiln.text: the BPE tokenizer and token files (text.cpp; after bind_runtime, whose Generator batch takes).
void bind_text(nb::module_& m);
/// kiln.models: resnet18/34/50/101 (models.cpp; after bind_nn, whose Module they derive from).
void bind_models(nb::module_& m);
/// The garbage collector's view of the children of every kiln.nn / kiln.models module type (module_gc.cpp; last).
void bind_module_gc(nb::module_& m);
/// pin_memory() and is_pinned on kiln.Array (gpu.cpp).
void bind_pinned_methods(nb::class_<Array>& cls);
/// kiln.random, autograd switches and the device runtime (runtime.cpp).
void bind_runtime(nb::module_& m);

}  // namespace kiln::python
