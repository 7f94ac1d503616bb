// Kernel fusion: kiln::fuse(f) turns a function of Arrays and scalars made of
// elementwise ops and reductions into generated GPU kernels per input signature,
// as cupy.fuse does (one kernel in the common cases below).
//
//   auto f = kiln::fuse([](auto x) { return tanh(x * 1.5f + 0.3f) * x - exp(-x * x) * 0.5f; });
//   Array y = f(x);  // GPU: one kernel, traced and compiled on the first call; CPU: one blocked pass
//   auto dot = kiln::fuse([](auto a, auto b) { return sum(a * b); });
//   auto softmax = kiln::fuse([](auto x) { auto e = exp(x - max(x, -1, true)); return e / sum(e, -1, true); });
//   auto sgd = kiln::fuse([](auto p, auto g, auto v, auto lr) { auto v2 = v * 0.9f + g; return std::tuple{p - lr * v2,
//   v2}; }); sgd.out({p, v}, p, g, v, 0.1f);  // updates p and v in place: one kernel
//
// Layout: a new result of the full shape is channels-last when an array argument of that shape is (as the unfused
// ops' results), else C-contiguous.
// Several outputs: return a std::tuple (or std::pair) of values; the call returns a std::tuple of Arrays.
// Fused::out(outputs, args...) writes into existing arrays instead (an undefined Array entry: allocate it).
// Aliasing rule: an output array may be the very array (same view: data, shape, strides) of an input that
// has the output's shape (it is read and written element by element); any other overlap between an output
// and an input or another output throws ValueError.
// CPU: one pass over the arrays in blocks of up to 1024 elements split over kiln's threads, each block
// evaluating the graph's nodes into small per-thread buffers with the unfused ops' own kernels (elementwise
// results equal the unfused ops' bits); no temporary of the array's size.
// Reductions: elementwise work may follow reductions (softmax, log_softmax, norms). A function whose
// reductions all reduce the same axes of arrays of the broadcast shape, returning values of that shape or of the
// reduced shape, runs in one pass per row (GPU: one group of threads per row, CPU: one thread per row, making a
// pass over it per reduction and one to write); a single final reduction feeds the reduction as it computes
// (GPU: its own kernel, split over many blocks when rows are few and long); anything else runs op by op.
//
// On the first call with a new signature (argument dtypes, ranks, which arguments are
// scalars) the function is called once with FusionValue arguments: symbolic values with
// the Array API's operators and function names, which record an expression graph. Every
// later call with that signature reuses the graph (and on a GPU, the compiled kernel).
// Results equal the unfused ops dtype for dtype (same NumPy 2 / NEP 50 promotion, float16
// and bfloat16 intermediates rounded where the unfused ops round them). Values the function
// captures (C++ constants) are read when it is traced; pass values that change as arguments.
#pragma once

#include <concepts>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace detail {
class FusionTrace;
struct FusionGraph;
class FusionCache;
}  // namespace detail

/// A symbolic value in a function traced by fuse(): an array value (dtype and rank known, data
/// not) or a weak scalar (an argument or constant that was a C++ number). Use it like an Array;
/// it is only valid while fuse() traces the function (do not keep it).
class FusionValue {
 public:
  /// Storage dtype of the value (for a weak scalar: bool, int64 or float64, as NumPy types it).
  DType dtype() const;
  /// Rank of the value (0 for a weak scalar).
  int64_t ndim() const;
  /// True for a weak scalar (a C++ number or a scalar argument).
  bool is_scalar() const;
  /// The value converted to `t`.
  FusionValue astype(DType t) const;
  // Reductions (Array's members of the same names).
  FusionValue sum(Axes axes = {}, bool keepdims = false) const;
  FusionValue mean(Axes axes = {}, bool keepdims = false) const;
  FusionValue max(Axes axes = {}, bool keepdims = false) const;
  FusionValue min(Axes axes = {}, bool keepdims = false) const;

  /// Internal: the value of node `node` of `trace`.
  FusionValue(detail::FusionTrace* trace, int node) : trace_(trace), node_(node) {}
  detail::FusionTrace* trace() const { return trace_; }
  int node() const { return node_; }

 private:
  detail::FusionTrace* trace_;
  int node_;
};

namespace detail {

/// One operand of a traced op: a FusionValue, a C++ number (a weak constant), or an Array the
/// function captured instead of taking it as an argument (rejected with ValueError).
class FusionOperand {
 public:
  FusionOperand(const FusionValue& v) : value_(v) {}  // NOLINT
  template <Arithmetic T>
  FusionOperand(T v) : scalar_(v) {}                      // NOLINT
  FusionOperand(const Scalar& s) : scalar_(s) {}          // NOLINT
  FusionOperand(const Array&) : captured_array_(true) {}  // NOLINT
  bool is_value() const { return value_.trace() != nullptr; }
  const FusionValue& value() const { return value_; }
  const Scalar& scalar() const { return scalar_; }
  bool captured_array() const { return captured_array_; }

 private:
  FusionValue value_{nullptr, -1};
  Scalar scalar_;
  bool captured_array_ = false;
};

template <class T>
constexpr bool is_fusion_value = std::is_same_v<std::remove_cvref_t<T>, FusionValue>;
template <class T>
concept FusionArg = is_fusion_value<T> || Arithmetic<std::remove_cvref_t<T>> ||
    std::is_same_v<std::remove_cvref_t<T>, Array> || std::is_same_v<std::remove_cvref_t<T>, Scalar>;
/// Operands of a traced op: each a FusionValue, number or Array, at least one a FusionValue.
template <class... T>
concept FusionArgs = (FusionArg<T> && ...) && (is_fusion_value<T> || ...);

/// Records op `name` (an elementwise op of ops.hpp) over the operands; throws like the op would.
FusionValue fusion_apply(const char* name, std::initializer_list<FusionOperand> operands);
/// Records the reduction `name` (a reduction of kiln/reductions.def that kiln::fuse traces) of `x`.
FusionValue fusion_reduce(const char* name, const FusionValue& x, const Axes& axes, bool keepdims);
/// Throws ValueError: `op` cannot be part of a fused function.
[[noreturn]] void fusion_not_fusable(const char* op);

/// An argument of a fused call: an Array or a scalar.
struct FusionArgument {
  const Array* array = nullptr;
  Scalar scalar;
};
/// The graph for these arguments' signature from `cache`, or nullptr when it has none yet.
std::shared_ptr<const FusionGraph> fusion_lookup(FusionCache& cache, const std::vector<FusionArgument>& args);
/// Runs the traced function: `trace_fn(values)` calls the user's function on one FusionValue per argument and
/// returns its results. Stores the graph in `cache` and returns it.
std::shared_ptr<const FusionGraph> fusion_trace(
    FusionCache& cache, const std::string& name, const std::vector<FusionArgument>& args,
    std::vector<FusionValue> (*trace_fn)(void*, const std::vector<FusionValue>&), void* context);
/// Runs `graph` on the arguments into `results` (one per output; a defined entry is an out= array written in
/// place, an undefined one is set to a new array): generated kernels on a GPU, one blocked pass on the CPU, else
/// kiln's ops one by one (autograd recording, empty arrays, shapes one pass cannot serve).
void fusion_run(const FusionGraph& graph, const std::vector<FusionArgument>& args, Array* results, size_t count);
/// One argument of a multi-tensor call (Fused::each): one array per tensor, one array shared by every tensor, or
/// a scalar.
struct FusionEachArgument {
  const std::vector<Array>* list = nullptr;
  const Array* array = nullptr;
  Scalar scalar;
};
inline FusionEachArgument each_argument(const std::vector<Array>& list) { return {&list, nullptr, {}}; }
inline FusionEachArgument each_argument(const Array& a) { return {nullptr, &a, {}}; }
inline FusionEachArgument each_argument(const Scalar& s) { return {nullptr, nullptr, s}; }
template <Arithmetic T>
FusionEachArgument each_argument(T v) {
  return {nullptr, nullptr, Scalar(v)};
}
/// The number of tensors of a Fused::each call: the common length of the output lists and list arguments
/// (ValueError naming `fuse(<name>).each` when they differ).
size_t fusion_each_count(const std::string& name, const std::vector<FusionEachArgument>& args,
                         const std::vector<std::vector<Array>>& outputs);
/// Runs the elementwise `graph` over every tensor: output k of tensor i is written into outputs[k][i]. Checks the
/// lists (see Fused::each) and throws naming `fuse(<name>).each` and the fix.
void fusion_run_each(const FusionGraph& graph, const std::vector<FusionEachArgument>& args,
                     const std::vector<std::vector<Array>>& outputs);

std::shared_ptr<FusionCache> make_fusion_cache();
size_t fusion_cache_size(const FusionCache& cache);
/// A traced graph as text, one node a line (for tests and debugging).
std::string fusion_describe(const FusionGraph& graph);

inline FusionArgument fusion_argument(const Array& a) { return {&a, {}}; }
template <Arithmetic T>
FusionArgument fusion_argument(T v) {
  return {nullptr, Scalar(v)};
}
inline FusionArgument fusion_argument(const Scalar& s) { return {nullptr, s}; }

/// What a fused function returns: one FusionValue (the call returns an Array) or a std::tuple/std::pair of them
/// (the call returns a std::tuple of Arrays).
template <class R>
struct FusionResult {
  static constexpr size_t count = 0;
};
template <>
struct FusionResult<FusionValue> {
  static constexpr size_t count = 1;
  using type = Array;
  static void values(const FusionValue& r, std::vector<FusionValue>& out) { out.push_back(r); }
  static Array arrays(Array* results) { return std::move(results[0]); }
};
template <class... T>
requires(is_fusion_value<T>&&...) struct FusionResult<std::tuple<T...>> {
  static constexpr size_t count = sizeof...(T);
  using type = std::tuple<decltype((void)std::declval<T>(), Array())...>;
  static void values(const std::tuple<T...>& r, std::vector<FusionValue>& out) {
    std::apply([&](const auto&... v) { (out.push_back(v), ...); }, r);
  }
  static type arrays(Array* results) {
    return [&]<size_t... I>(std::index_sequence<I...>) { return type(std::move(results[I])...); }
    (std::index_sequence_for<T...>());
  }
};
template <class A, class B>
struct FusionResult<std::pair<A, B>> : FusionResult<std::tuple<A, B>> {
  static void values(const std::pair<A, B>& r, std::vector<FusionValue>& out) {
    out.push_back(r.first);
    out.push_back(r.second);
  }
};

}  // namespace detail

/// A fused function (made by fuse()). Copies share the traced-signature cache; thread-safe.
template <class F>
class Fused {
 public:
  explicit Fused(F f, std::string name = "fused")
      : f_(std::move(f)), name_(std::move(name)), cache_(detail::make_fusion_cache()) {}

  /// Calls the function on Arrays and C++ numbers; returns an Array, or a std::tuple of Arrays when the function
  /// returns a tuple. Traces it on the first call of a signature; throws ValueError for ops that cannot be fused,
  /// DeviceError for Arrays on different devices, and what the ops themselves throw (ShapeError, DTypeError, ...).
  /// Asynchronous on a GPU, like the ops.
  template <class... Args>
  auto operator()(const Args&... args) const {
    return call<Args...>(std::initializer_list<Array>{}, args...);
  }
  /// As operator(), writing output k into outputs[k] in place (out=; an undefined entry: a new array) and
  /// returning them. Each must have the output's shape, dtype and device (ShapeError, DTypeError, DeviceError);
  /// it may alias only the input it replaces element by element (same view), else ValueError (see the top).
  template <class... Args>
  auto out(std::initializer_list<Array> outputs, const Args&... args) const {
    return call<Args...>(outputs, args...);
  }
  /// Multi-tensor apply (ATen's MultiTensorApply, PyTorch's foreach): the function over a list of tensors, each
  /// argument a std::vector<Array> (one per tensor), an Array every tensor reads (e.g. a 0-d step size on the
  /// device) or a C++ number; output k of tensor i is written in place into outputs[k][i]:
  ///   static const auto sgd = kiln::fuse([](auto p, auto g, auto lr) { return p - g * lr; }, "sgd");
  ///   sgd.each({params}, params, grads, 0.1);  // every parameter updated, a few GPU launches in all
  /// Every list has one array per tensor; tensor i's arrays broadcast to its outputs' shape, and every tensor
  /// has tensor 0's dtypes and device (call each() once per dtype and device). An output may be the very array
  /// of an input of its own tensor and may overlap nothing else. Elementwise functions only (no reductions).
  /// Throws ValueError, ShapeError, DTypeError or DeviceError naming the list and the fix; the results are bit
  /// for bit those of calling out() once per tensor, except that the CPU flushes subnormals to zero (x86 FTZ/DAZ:
  /// decaying optimizer moments would otherwise slow every operation on them). Asynchronous on a GPU.
  template <class... Args>
  void each(std::initializer_list<std::vector<Array>> outputs, const Args&... args) const {
    static_assert(sizeof...(Args) > 0, "kiln::fuse: call each() with at least one list of arrays");
    static_assert(Result<sizeof...(Args)>::count > 0,
                  "kiln::fuse: the function must return the result of fusable ops on its arguments (one value, or a "
                  "std::tuple of values)");
    const std::vector<detail::FusionEachArgument> arguments{detail::each_argument(args)...};
    const std::vector<std::vector<Array>> lists(outputs);
    if (detail::fusion_each_count(name_, arguments, lists) == 0) return;
    // The signature is tensor 0's: each() checks that every other tensor has its dtypes.
    std::vector<detail::FusionArgument> first;
    for (const detail::FusionEachArgument& a : arguments)
      first.push_back(a.list ? detail::fusion_argument((*a.list)[0])
                      : a.array ? detail::fusion_argument(*a.array)
                                : detail::fusion_argument(a.scalar));
    detail::fusion_run_each(*graph_for<sizeof...(Args)>(first), arguments, lists);
  }
  /// The traced graph for these arguments' signature (traced when new) without running it; for tests and
  /// tools (detail::fusion_describe prints it).
  template <class... Args>
  std::shared_ptr<const detail::FusionGraph> graph(const Args&... args) const {
    return graph_for<sizeof...(Args)>({detail::fusion_argument(args)...});
  }
  /// Number of signatures traced so far.
  size_t cache_size() const { return detail::fusion_cache_size(*cache_); }
  const std::string& name() const { return name_; }

 private:
  template <size_t N>
  struct Traced {
    template <size_t... I>
    static auto result(std::index_sequence<I...>) -> std::remove_cvref_t<
        std::invoke_result_t<const F&, decltype((void)I, std::declval<const FusionValue&>())...>>;
    using type = decltype(result(std::make_index_sequence<N>()));
  };
  template <size_t N>
  using Result = detail::FusionResult<typename Traced<N>::type>;

  template <class... Args>
  auto call(std::initializer_list<Array> outputs, const Args&... args) const {
    static_assert(sizeof...(Args) > 0, "kiln::fuse: call the fused function with at least one Array");
    using R = Result<sizeof...(Args)>;
    static_assert(R::count > 0,
                  "kiln::fuse: the function must return the result of fusable ops on its arguments (one value, or a "
                  "std::tuple of values)");
    std::vector<detail::FusionArgument> arguments{detail::fusion_argument(args)...};
    Array results[R::count];
    if (outputs.size() > R::count)
      throw ValueError("fuse(" + name_ + "): " + std::to_string(outputs.size()) + " out= arrays for " +
                       std::to_string(R::count) + " outputs; pass one array (or an undefined Array) per output");
    size_t k = 0;
    for (const Array& o : outputs) results[k++] = o;
    detail::fusion_run(*graph_for<sizeof...(Args)>(arguments), arguments, results, R::count);
    return R::arrays(results);
  }
  template <size_t N>
  std::shared_ptr<const detail::FusionGraph> graph_for(const std::vector<detail::FusionArgument>& arguments) const {
    if (std::shared_ptr<const detail::FusionGraph> graph = detail::fusion_lookup(*cache_, arguments)) return graph;
    return detail::fusion_trace(*cache_, name_, arguments, &call_traced<N>, const_cast<F*>(&f_));
  }
  template <size_t N>
  static std::vector<FusionValue> call_traced(void* f, const std::vector<FusionValue>& values) {
    std::vector<FusionValue> results;
    Result<N>::values(apply(*static_cast<const F*>(f), values, std::make_index_sequence<N>()), results);
    return results;
  }
  template <size_t... I>
  static auto apply(const F& f, const std::vector<FusionValue>& values, std::index_sequence<I...>) {
    return f(values[I]...);
  }

  F f_;
  std::string name_;
  std::shared_ptr<detail::FusionCache> cache_;
};

/// Fuses `f` (a generic callable over Arrays and scalars; `name` appears in kernel names and messages).
template <class F>
Fused<std::decay_t<F>> fuse(F&& f, std::string name = "fused") {
  return Fused<std::decay_t<F>>(std::forward<F>(f), std::move(name));
}

// ---------------------------------------------------------------- traced ops (the Array API's names)
// clang-format off
// One traced op per `Fn` row of kiln/ops.def.
#define KILN_FUSION_Fn1(name) \
  inline FusionValue name(const FusionValue& a) { return detail::fusion_apply(#name, {a}); }
#define KILN_FUSION_Fn2(name)                                                                 \
  template <class A, class B>                                                                 \
  requires detail::FusionArgs<A, B> FusionValue name(const A& a, const B& b) {                \
    return detail::fusion_apply(#name, {detail::FusionOperand(a), detail::FusionOperand(b)}); \
  }
#define KILN_FUSION_Own3(name)
#define KILN_FUSION_None0(name)
#define KILN_FUSION_None1(name)
#define KILN_FUSION(name, arity, api) KILN_FUSION_##api##arity(name)
#define KILN_OP(Code, name, arity, api, ...) KILN_FUSION(name, arity, api)
#include "kiln/ops.def"
#undef KILN_FUSION
#undef KILN_FUSION_Fn1
#undef KILN_FUSION_Fn2
#undef KILN_FUSION_Own3
#undef KILN_FUSION_None0
#undef KILN_FUSION_None1

#define KILN_FUSION_OPERATOR(sym, name)                                                       \
  template <class A, class B>                                                                 \
  requires detail::FusionArgs<A, B> FusionValue operator sym(const A& a, const B& b) {        \
    return detail::fusion_apply(#name, {detail::FusionOperand(a), detail::FusionOperand(b)}); \
  }
KILN_FUSION_OPERATOR(+, add)
KILN_FUSION_OPERATOR(-, subtract)
KILN_FUSION_OPERATOR(*, multiply)
KILN_FUSION_OPERATOR(/, divide)
KILN_FUSION_OPERATOR(%, remainder)
KILN_FUSION_OPERATOR(==, equal)
KILN_FUSION_OPERATOR(!=, not_equal)
KILN_FUSION_OPERATOR(<, less)
KILN_FUSION_OPERATOR(<=, less_equal)
KILN_FUSION_OPERATOR(>, greater)
KILN_FUSION_OPERATOR(>=, greater_equal)
KILN_FUSION_OPERATOR(&, bitwise_and)
KILN_FUSION_OPERATOR(|, bitwise_or)
KILN_FUSION_OPERATOR(^, bitwise_xor)
#undef KILN_FUSION_OPERATOR
// clang-format on

inline FusionValue operator-(const FusionValue& a) { return detail::fusion_apply("negative", {a}); }
inline FusionValue operator!(const FusionValue& a) { return detail::fusion_apply("logical_not", {a}); }
inline FusionValue operator~(const FusionValue& a) { return detail::fusion_apply("bitwise_not", {a}); }

/// cond ? x : y elementwise (where's rules: the condition is read as bool, x and y promoted).
template <class C, class X, class Y>
requires detail::FusionArgs<C, X, Y> FusionValue where(const C& cond, const X& x, const Y& y) {
  return detail::fusion_apply("where",
                              {detail::FusionOperand(cond), detail::FusionOperand(x), detail::FusionOperand(y)});
}
/// min(max(a, lo), hi) elementwise.
template <class L, class H>
requires detail::FusionArg<L> && detail::FusionArg<H> FusionValue clip(const FusionValue& a, const L& lo, const H& hi) {
  return detail::fusion_apply("clip", {a, detail::FusionOperand(lo), detail::FusionOperand(hi)});
}
inline FusionValue astype(const FusionValue& a, DType t) { return a.astype(t); }

// Reductions: one traced function per `Axes` row of kiln/reductions.def (elementwise work may follow them;
// a row that kiln::fuse cannot trace throws ValueError saying so). logsumexp is traced as its parts.
#define KILN_REDUCTION(Code, name, api) KILN_TRACED_REDUCTION_##api(name)
#define KILN_TRACED_REDUCTION_Axes(name)                                                \
  inline FusionValue name(const FusionValue& a, Axes axes = {}, bool keepdims = false) { \
    return detail::fusion_reduce(#name, a, axes, keepdims);                              \
  }
#define KILN_TRACED_REDUCTION_Own(name)
#define KILN_TRACED_REDUCTION_None(name)
#include "kiln/reductions.def"
#undef KILN_TRACED_REDUCTION_Axes
#undef KILN_TRACED_REDUCTION_Own
#undef KILN_TRACED_REDUCTION_None

// Ops that cannot be fused: they compile, so the error can say which op and what to do (ValueError).
template <class A, class B>
requires detail::FusionArgs<A, B> FusionValue matmul(const A&, const B&) { detail::fusion_not_fusable("matmul"); }
template <class A, class B>
requires detail::FusionArgs<A, B> FusionValue dot(const A&, const B&) { detail::fusion_not_fusable("dot"); }
inline FusionValue argmax(const FusionValue&, std::optional<int64_t> = {}, bool = false) {
  detail::fusion_not_fusable("argmax");
}
inline FusionValue argmin(const FusionValue&, std::optional<int64_t> = {}, bool = false) {
  detail::fusion_not_fusable("argmin");
}
inline FusionValue var(const FusionValue&, Axes = {}, int64_t = 0, bool = false) { detail::fusion_not_fusable("var"); }
inline FusionValue std(const FusionValue&, Axes = {}, int64_t = 0, bool = false) { detail::fusion_not_fusable("std"); }
inline FusionValue reshape(const FusionValue&, const Shape&) { detail::fusion_not_fusable("reshape"); }
inline FusionValue transpose(const FusionValue&) { detail::fusion_not_fusable("transpose"); }

}  // namespace kiln
