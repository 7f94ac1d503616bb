// The CPU's convolution engine (CpuBackend::convolution): oneDNN (Debian's libdnnl-dev) for float32 forward
// convolutions. oneDNN picks its own blocked layouts for the problem (format_tag::any, e.g. nChw16c with
// AVX-512), kiln's NCHW or channels-last operands are reordered in and out around the primitive, as PyTorch's
// mkldnn_convolution does for plain tensors; 1x1 kernels run on the plain layouts (no reorders). Primitives are made
// once per (shapes, geometry, layout) and cached (making one costs milliseconds). Other dtypes and the backward steps
// return false: the core's reference (im2col + BLAS) runs them. Built only when CMake finds oneDNN (KILN_HAVE_ONEDNN).
#include "cpu/onednn.hpp"

#include "cpu/parallel.hpp"

#ifdef KILN_HAVE_ONEDNN
#include <array>
#include <dnnl.hpp>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/kernel_memo.hpp"
#include "kiln/ops.hpp"

namespace kiln::cpu_impl {
namespace {

struct ConvKey {
  std::array<int64_t, 4> x{}, w{};
  std::array<int64_t, 2> stride{}, padding{}, dilation{};
  int64_t groups = 1;
  bool channels_last = false;
  bool operator==(const ConvKey&) const = default;
};

}  // namespace
}  // namespace kiln::cpu_impl

KILN_HASH_EVERY_FIELD(kiln::cpu_impl::ConvKey, x, w, stride, padding, dilation, groups, channels_last);

namespace kiln::cpu_impl {
namespace {

using dnnl::memory;
using tag = memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct Entry {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  memory::desc user_x, user_w, user_y;
};

std::shared_ptr<const Entry> make_entry(const ConvKey& k, const memory::dims& y_dims) {
  const memory::dims x_dims(k.x.begin(), k.x.end());
  memory::dims w_dims;
  if (k.groups == 1)
    w_dims.assign(k.w.begin(), k.w.end());
  else
    w_dims = {k.groups, k.w[0] / k.groups, k.w[1], k.w[2], k.w[3]};
  const memory::dims strides{k.stride[0], k.stride[1]};
  const memory::dims dilates{k.dilation[0] - 1, k.dilation[1] - 1};  // oneDNN counts the gaps
  const memory::dims pad_l{k.padding[0], k.padding[1]};
  // The right/bottom padding that makes oneDNN's output size kiln's (the last window may end before the edge).
  const memory::dims pad_r{(y_dims[2] - 1) * k.stride[0] + (k.w[2] - 1) * k.dilation[0] + 1 - k.x[2] - k.padding[0],
                           (y_dims[3] - 1) * k.stride[1] + (k.w[3] - 1) * k.dilation[1] + 1 - k.x[3] - k.padding[1]};
  const auto f32 = memory::data_type::f32;
  const tag act = k.channels_last ? tag::nhwc : tag::nchw;
  // 1x1 kernels read and write the user's plain layout (oneDNN then runs them as matrix products, and the
  // reorders to and from blocked layouts would cost more than the product). Larger kernels keep the blocked
  // layouts, where oneDNN's direct convolution gains more than the reorders cost.
  const bool one_by_one = k.w[2] == 1 && k.w[3] == 1;
  const tag io = one_by_one ? act : tag::any;
  const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                          memory::desc(x_dims, f32, io), memory::desc(w_dims, f32, tag::any),
                                          memory::desc(y_dims, f32, io), strides, dilates, pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc pd(d, engine());
  const tag wt =
      k.groups == 1 ? (k.channels_last ? tag::ohwi : tag::oihw) : (k.channels_last ? tag::gohwi : tag::goihw);
  return std::make_shared<const Entry>(Entry{pd, dnnl::convolution_forward(pd), memory::desc(x_dims, f32, act),
                                             memory::desc(w_dims, f32, wt), memory::desc(y_dims, f32, act)});
}

std::shared_ptr<const Entry> entry_for(const ConvKey& key, const memory::dims& y_dims) {
  static std::mutex mutex;
  static auto* cache = new std::unordered_map<ConvKey, std::shared_ptr<const Entry>>;  // leaked: lives to exit
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache->find(key); it != cache->end()) return it->second;
  }
  std::shared_ptr<const Entry> e = make_entry(key, y_dims);
  std::lock_guard<std::mutex> lock(mutex);
  return cache->try_emplace(key, e).first->second;
}

/// Memory of `desc` in a block of kiln's host allocator, which keeps freed large blocks for reuse (a oneDNN
/// allocation of its own was fresh pages, faulted in at every call: the reordered weights and activations of each
/// convolution). `block` holds it until the primitive is done.
memory scratch(const memory::desc& desc, Array& block) {
  block = empty({static_cast<int64_t>(desc.get_size())}, DType::UInt8, cpu());
  return memory(desc, engine(), block.data_ptr());
}

/// `user` as the primitive wants it: the same memory when the layouts agree, else a reordered copy in `block`.
memory as_wanted(const memory& user, const memory::desc& wanted, dnnl::stream& s, Array& block) {
  if (user.get_desc() == wanted) return user;
  memory out = scratch(wanted, block);
  dnnl::reorder(user, out).execute(s, const_cast<memory&>(user), out);
  return out;
}

}  // namespace

bool onednn_convolution(const detail::ConvCall& call) {
  if (call.kind != detail::ConvKind::Forward || call.out.dtype() != DType::Float32) return false;
  const Array &x = *call.x, &w = *call.w;
  ConvKey key;
  for (int i = 0; i < 4; ++i) key.x[static_cast<size_t>(i)] = x.shape(i), key.w[static_cast<size_t>(i)] = w.shape(i);
  for (size_t i = 0; i < 2; ++i)
    key.stride[i] = call.stride[i], key.padding[i] = call.padding[i], key.dilation[i] = call.dilation[i];
  key.groups = call.groups;
  key.channels_last = call.channels_last;
  const memory::dims y_dims{call.out.shape(0), call.out.shape(1), call.out.shape(2), call.out.shape(3)};
  try {
    const std::shared_ptr<const Entry> e = entry_for(key, y_dims);
    dnnl::stream s(engine());
    memory ux(e->user_x, engine(), const_cast<void*>(x.data_ptr()));
    memory uw(e->user_w, engine(), const_cast<void*>(w.data_ptr()));
    memory uy(e->user_y, engine(), call.out.data_ptr());
    Array x_block, w_block, y_block;
    memory mx = as_wanted(ux, e->pd.src_desc(), s, x_block), mw = as_wanted(uw, e->pd.weights_desc(), s, w_block);
    const bool direct_out = e->pd.dst_desc() == e->user_y;
    memory my = direct_out ? uy : scratch(e->pd.dst_desc(), y_block);
    e->prim.execute(s, {{DNNL_ARG_SRC, mx}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, my}});
    if (!direct_out) dnnl::reorder(my, uy).execute(s, my, uy);
    s.wait();
    note_openmp_library_call();
  } catch (const dnnl::error&) {
    return false;  // a problem oneDNN does not implement: the reference runs it
  }
  return true;
}

}  // namespace kiln::cpu_impl

#else

namespace kiln::cpu_impl {
bool onednn_convolution(const detail::ConvCall&) { return false; }
}  // namespace kiln::cpu_impl

#endif
