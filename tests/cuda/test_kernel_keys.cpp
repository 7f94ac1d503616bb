// Kernel keys cannot collide: every spec the built-in elementwise, reduction and
// fused-kernel generators accept (op x the dtypes each accepts x layout x vector
// width x rank x unroll x scalar flags x index width ...) is enumerated and put
// into the real key types (KernelTable, a graph's FusionKernelMemo, a user
// kernel's variant memo), without compiling anything and without a GPU:
// - distinct specs give distinct entries and equal specs one entry (the count of
//   entries is the count of distinct specs the loops build);
// - the lookup of every spec finds the kernel stored for that spec (by its name);
// - a kernel name identifies its code: two specs with one name generate the same
//   source (every generated kernel is named after its spec).
// The products of all fields are too large (billions), so each family crosses the
// fields that interact (all dtypes of one op with each other; every layout, rank
// and flag with each other) and a base of the rest.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/fuse_test_util.hpp"  // tests/core
#include "core/fusion.hpp"
#include "cuda/codegen.hpp"
#include "cuda/codegen_user.hpp"
#include "cuda/fusion.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using detail::OpCode;
using detail::ReduceOp;

namespace {

constexpr DType kAllTypes[] = {DType::Bool,  DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                               DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

/// Names seen so far, each with the first spec that had it: a second spec with the same name must generate the
/// same code (checked by generating both; that happens only where a field does not reach the code).
template <class Spec>
class NameChecker {
 public:
  explicit NameChecker(std::function<std::string(const Spec&)> code) : code_(std::move(code)) {}
  void add(const std::string& name, const Spec& spec) {
    auto [it, inserted] = first_.try_emplace(name, spec);
    if (inserted || it->second == spec) return;
    ++shared_;
    if (code_(it->second) != code_(spec)) {
      ++clashes_;
      if (clashes_ <= 5) ADD_FAILURE() << "two specs are both named " << name << " but generate different code";
    }
  }
  size_t names() const { return first_.size(); }
  int shared() const { return shared_; }
  int clashes() const { return clashes_; }

 private:
  std::function<std::string(const Spec&)> code_;
  std::unordered_map<std::string, Spec> first_;
  int shared_ = 0, clashes_ = 0;
};

/// Inserts specs into a KernelTable as their kernels (named after the spec), counting the inserts; then checks
/// that the table holds one entry per distinct spec and that every lookup finds its own spec's kernel.
class TableCheck {
 public:
  void insert(int device, const ElementwiseSpec& s) { add({device, s}, elementwise_kernel_name(s)); }
  void insert(int device, const ReduceSpec& s) { add({device, s}, reduce_kernel_name(s)); }
  void expect_one_entry_per_spec() {
    EXPECT_EQ(table_.size(), keys_.size());
    int wrong = 0;
    for (size_t i = 0; i < keys_.size(); ++i) {
      const KernelTable::Entry* e = table_.find(keys_[i]);
      if (e == nullptr || e->name != names_[i] || e->blocks_per_multiprocessor != static_cast<int>(i))
        if (++wrong <= 5) ADD_FAILURE() << "the lookup of spec " << i << " (" << names_[i] << ") finds another entry";
    }
    EXPECT_EQ(wrong, 0);
    for (size_t i = 0; i < keys_.size(); ++i) table_.insert(keys_[i], KernelTable::Entry{});  // equal keys: no entry
    EXPECT_EQ(table_.size(), keys_.size());
  }
  size_t size() const { return keys_.size(); }

 private:
  void add(const BuiltinKernelKey& key, std::string name) {
    KernelTable::Entry e;
    e.name = name;
    e.blocks_per_multiprocessor = static_cast<int>(keys_.size());  // which insert this was
    table_.insert(key, std::move(e));
    keys_.push_back(key);
    names_.push_back(std::move(name));
  }
  KernelTable table_;  // a table of its own: the process-wide one holds real kernels
  std::vector<BuiltinKernelKey> keys_;
  std::vector<std::string> names_;
};

std::vector<int> contiguous_widths(const ElementwiseSpec& s) {
  int64_t widest = itemsize(s.out);
  for (int k = 0; k < s.num_inputs; ++k) widest = std::max(widest, itemsize(s.in[k]));
  std::vector<int> widths;
  for (int v = 1; v * widest <= 16; v *= 2) widths.push_back(v);
  return widths;
}

/// Every layout of an elementwise spec: contiguous with each vector width that fits 16 bytes, strided with each
/// rank and unroll, tiled with each set of tiled inputs, each with 32- and 64-bit indices.
template <class F>
void for_each_layout(ElementwiseSpec s, F f) {
  for (bool index64 : {false, true}) {
    s.index64 = index64;
    s.layout = EwLayout::Contiguous;
    for (int v : contiguous_widths(s)) {
      s.vector_width = v;
      f(s);
    }
    s.vector_width = 1;
    s.layout = EwLayout::Strided;
    for (int nd = 1; nd <= kMaxRank; ++nd)
      for (int unroll : {1, 2, 4}) {
        s.ndim = nd;
        s.unroll = unroll;
        f(s);
      }
    s.ndim = 1;
    s.unroll = 1;
    // Tiled (an input transposed relative to the output): ranks 2..4 and the largest, each non-empty set of
    // array inputs read through tiles.
    int arrays = 0;
    for (int k = 0; k < s.num_inputs; ++k) arrays |= s.scalar[k] ? 0 : 1 << k;
    s.layout = EwLayout::Tiled;
    for (int nd : {2, 3, 4, kMaxRank})
      for (int tiled = 1; tiled <= arrays; ++tiled) {
        if ((tiled & ~arrays) != 0) continue;
        s.ndim = nd;
        s.tiled_inputs = tiled;
        f(s);
      }
    s.ndim = 1;
    s.tiled_inputs = 0;
  }
}

/// The result dtype the front-end gives an op computing in `c` (bool for comparisons and predicates).
DType natural_out(OpCode op, DType c) {
  const detail::TypeRule r = detail::op_info(op).rule;
  return r == detail::TypeRule::Compare || r == detail::TypeRule::Predicate ? DType::Bool : c;
}

}  // namespace

TEST(KernelKeys, EveryElementwiseSpecHasItsOwnEntryAndName) {
  TableCheck table;
  NameChecker<ElementwiseSpec> names([](const ElementwiseSpec& s) { return elementwise_kernel_code(s); });
  size_t generated = 0;
  const auto add = [&](const ElementwiseSpec& s) {
    for (int device : {0, 1}) table.insert(device, s);
    names.add(elementwise_kernel_name(s), s);
    // The generator accepts what the loops build (a sample: generating is what the test avoids).
    if (++generated % 211 == 0) {
      EXPECT_NO_THROW((void)elementwise_kernel_code(s)) << elementwise_kernel_name(s);
    }
  };
  for (int o = 0; o < static_cast<int>(OpCode::Fill); ++o) {
    const OpCode op = static_cast<OpCode>(o);
    const int arity = detail::op_info(op).arity;
    for (DType c : kAllTypes) {
      if (!elementwise_op_supported(op, kernel_compute_dtype(c))) continue;
      ElementwiseSpec s;
      s.op = op;
      s.num_inputs = arity;
      s.compute = c;
      // (1) Every layout x every scalar-flag mask, the inputs in the compute dtype (a scalar as its argument dtype).
      for (int mask = 0; mask < (1 << arity); ++mask) {
        for (int k = 0; k < arity; ++k) {
          s.scalar[k] = (mask >> k & 1) != 0;
          s.in[k] = s.scalar[k] ? scalar_argument_dtype(op, k, c) : (op == OpCode::Where && k == 0 ? DType::Bool : c);
        }
        s.out = natural_out(op, c);
        for_each_layout(s, add);
      }
      // (2) Every output dtype x every storage dtype of one array input at a time, one layout; the mask-0
      // contiguous v1 spec of (1) is skipped, it is there already.
      for (int k = 0; k < arity; ++k) s.scalar[k] = false;
      const int combos = arity == 1 ? 10 : arity == 2 ? 100 : 1000;
      for (DType out : kAllTypes)
        for (int combo = 0; combo < combos; ++combo) {
          for (int k = 0, rest = combo; k < arity; ++k, rest /= 10) s.in[k] = kAllTypes[rest % 10];
          s.out = out;
          int other_inputs = 0;
          for (int k = 0; k < arity; ++k) other_inputs += s.in[k] != (op == OpCode::Where && k == 0 ? DType::Bool : c);
          if ((other_inputs > 0 || out != natural_out(op, c)) && other_inputs <= 1) add(s);
        }
    }
  }
  // Raw copies (casts are the identity op above), then the sequences (arange, linspace).
  for (DType t : kAllTypes) {
    ElementwiseSpec s;
    s.op = OpCode::Identity;
    s.num_inputs = 1;
    s.in[0] = s.out = s.compute = t;
    s.raw_copy = true;
    for_each_layout(s, add);
  }
  for (DType out : kAllTypes) {
    ElementwiseSpec s;
    s.op = OpCode::Arange;
    s.out = s.compute = out;
    s.layout = EwLayout::Sequence;
    add(s);
  }
  table.expect_one_entry_per_spec();
  EXPECT_EQ(table.size(), 2 * generated);
  EXPECT_EQ(names.shared(), 0) << "distinct elementwise specs share a kernel name";
  EXPECT_GT(generated, 100000u);
}

TEST(KernelKeys, EveryReductionSpecHasItsOwnEntryAndName) {
  TableCheck table;
  NameChecker<ReduceSpec> names([](const ReduceSpec& s) { return reduce_kernel_code(s); });
  size_t generated = 0;
  const auto add = [&](const ReduceSpec& s) {
    for (int device : {0, 1}) table.insert(device, s);
    names.add(reduce_kernel_name(s), s);
    if (++generated % 97 == 0) {
      EXPECT_NO_THROW((void)reduce_kernel_code(s)) << reduce_kernel_name(s);
    }
  };
  const int groups[] = {1, 2, 4, 8, 16, 32, kBlockSize};
  struct Pass {
    bool from, to;
  };
  const Pass passes[] = {{false, false}, {false, true}, {true, false}};
  for (int o = 0; o < detail::kNumReduceKernels; ++o) {
    const ReduceOp op = static_cast<ReduceOp>(o);
    for (DType in : kAllTypes) {
      ReduceSpec s;
      s.op = op;
      s.in = in;
      // (1) Every output dtype x pass x index width (a warp per row of a matrix).
      s.group = 32;
      s.kept_ndim = 1;
      for (DType out : kAllTypes)
        for (const Pass& p : passes)
          for (bool index64 : {false, true}) {
            s.out = out;
            s.acc = reduce_accumulator_dtype(op, in, out);
            s.from_partials = p.from;
            s.to_partials = p.to;
            s.index64 = index64;
            add(s);
          }
      // (2) Vector loads: every width of 4..16 bytes x every Rows group (one contiguous reduced axis).
      s.out = in;
      s.acc = reduce_accumulator_dtype(op, in, in);
      s.from_partials = false;
      for (int v = 2; v * itemsize(in) <= 16; v *= 2) {
        if (v * itemsize(in) < 4) continue;
        s.vector_width = v;
        for (int g : groups)
          for (bool to : {false, true}) {
            s.group = g;
            s.to_partials = to;
            s.index64 = false;
            add(s);
          }
      }
    }
    // (3) Every layout x group x kept rank x reduced rank x pass x index width, float32 in and out.
    ReduceSpec s;
    s.op = op;
    s.acc = reduce_accumulator_dtype(op, DType::Float32, DType::Float32);
    s.out = op == ReduceOp::ArgMax || op == ReduceOp::ArgMin ? DType::Int64 : DType::Float32;
    if (op == ReduceOp::All || op == ReduceOp::Any) s.out = DType::Bool;
    for (int g = 0; g <= 7; ++g)  // 7: Columns
      for (int kn = 0; kn <= kMaxRank; ++kn)
        for (int rn = 1; rn <= kMaxRank; ++rn)
          for (const Pass& p : passes)
            for (bool index64 : {false, true}) {
              s.layout = g == 7 ? ReduceLayout::Columns : ReduceLayout::Rows;
              s.group = g == 7 ? 32 : groups[g];
              s.kept_ndim = kn;
              s.reduced_ndim = rn;
              s.from_partials = p.from;
              s.to_partials = p.to;
              s.index64 = index64;
              if (s.layout == ReduceLayout::Rows && s.group == 32 && kn == 1 && rn == 1) continue;  // in (1)
              add(s);
            }
  }
  table.expect_one_entry_per_spec();
  EXPECT_EQ(table.size(), 2 * generated);
  EXPECT_EQ(names.clashes(), 0);
  EXPECT_GT(generated, 50000u);
}

TEST(KernelKeys, EveryFusedKernelSpecHasItsOwnEntryAndName) {
  auto f = fuse(kiln_test::chain_fn, "chain");
  auto graph = f.graph(zeros({8}, DType::Float32, cpu()));
  auto dot = fuse([](auto x, auto y) { return sum(x * y); }, "dot");
  auto reduce_graph = dot.graph(zeros({8}, DType::Float32, cpu()), zeros({8}, DType::Float32, cpu()));
  // Elementwise work after reductions, with a reduced-shape second output: the rows layout.
  auto softmax = fuse(
      [](auto x) {
        auto e = exp(x - max(x, -1, true));
        auto total = sum(e, -1, true);
        return std::tuple{e / total, total};
      },
      "softmax_and_total");
  auto rows_graph = softmax.graph(zeros({4, 8}, DType::Float32, cpu()));
  const auto graph_of = [&](const FusionKernelSpec& s) -> const detail::FusionGraph& {
    return s.layout == FusionLayout::Reduce ? *reduce_graph : s.layout == FusionLayout::Rows ? *rows_graph : *graph;
  };
  FusionKernelMemo memo;
  std::vector<FusionKernelKey> keys;
  NameChecker<FusionKernelSpec> names([&](const FusionKernelSpec& s) { return fusion_kernel_code(graph_of(s), s); });
  const auto add = [&](const FusionKernelSpec& s) {
    for (int device : {0, 1, 7}) {
      keys.push_back({device, s});
      memo.insert(keys.back(), std::make_shared<size_t>(keys.size() - 1));
    }
    names.add(fusion_kernel_name(graph_of(s), s), s);
  };
  FusionKernelSpec s;
  for (bool aliased : {false, true})  // an output that is an input's array (out=): no __restrict__
    for (bool index64 : {false, true}) {
      s.aliased = aliased;
      s.index64 = index64;
      s.layout = FusionLayout::Contiguous;
      for (int v : {1, 2, 4, 8, 16}) {
        s.vector_width = v;
        add(s);
      }
      s.vector_width = 1;
      s.layout = FusionLayout::Strided;
      for (int nd = 1; nd <= kMaxRank; ++nd)
        for (int unroll : {1, 2, 4}) {
          s.ndim = nd;
          s.unroll = unroll;
          add(s);
        }
      s.ndim = s.unroll = 1;
    }
  s.aliased = false;
  // Rows: every group x kept rank x reduced rank x which outputs have the reduced shape x aliasing x index width.
  FusionKernelSpec w;
  w.layout = FusionLayout::Rows;
  for (int g : {1, 2, 4, 8, 16, 32, kBlockSize})
    for (int kn = 0; kn <= kMaxRank; ++kn)
      for (int rn = 1; rn <= 4; ++rn)
        for (uint32_t mask : {0u, 2u})
          for (bool aliased : {false, true})
            for (bool index64 : {false, true}) {
              w.group = g;
              w.kept_ndim = kn;
              w.reduced_ndim = rn;
              w.kept_mask = mask;
              w.aliased = aliased;
              w.index64 = index64;
              add(w);
            }
  // Rows in vectors: every width x which inputs are constant along the row (one row axis).
  w = FusionKernelSpec{};
  w.layout = FusionLayout::Rows;
  w.kept_ndim = w.reduced_ndim = 1;
  for (int g : {32, kBlockSize})
    for (int v : {2, 4, 8})
      for (uint32_t mask : {0u, 1u}) {
        w.group = g;
        w.vector_width = v;
        w.broadcast_mask = mask;
        add(w);
      }
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Max, ReduceOp::Min, ReduceOp::All, ReduceOp::Any};
  FusionKernelSpec r;
  r.layout = FusionLayout::Reduce;
  for (ReduceOp op : ops) {
    r.op = op;
    // Every output dtype x the accumulator of every element dtype x partials, one layout.
    for (DType out : kAllTypes)
      for (DType element : kAllTypes)
        for (bool to : {false, true}) {
          r.out = out;
          r.acc = reduce_accumulator_dtype(op, element, out);
          r.to_partials = to;
          r.group = 1;
          r.kept_ndim = 1;
          r.reduced_ndim = 1;
          if (memo.find({0, r}) == nullptr) add(r);  // accumulators repeat across element dtypes
        }
    // Every group x kept rank x reduced rank x partials x index width.
    r.out = r.acc = DType::Float32;
    if (op == ReduceOp::All || op == ReduceOp::Any) r.out = r.acc = DType::Bool;
    for (int g : {1, 2, 4, 8, 16, 32, kBlockSize})
      for (int kn = 0; kn <= kMaxRank; ++kn)
        for (int rn = 1; rn <= kMaxRank; ++rn)
          for (bool to : {false, true})
            for (bool index64 : {false, true}) {
              r.group = g;
              r.kept_ndim = kn;
              r.reduced_ndim = rn;
              r.to_partials = to;
              r.index64 = index64;
              if (memo.find({0, r}) == nullptr) add(r);
            }
    r.index64 = false;
  }
  EXPECT_EQ(memo.size(), keys.size());
  int wrong = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    std::shared_ptr<void> found = memo.find(keys[i]);
    if (found == nullptr || *static_cast<size_t*>(found.get()) != i) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "a lookup found another spec's kernel";
  EXPECT_EQ(names.clashes(), 0);
  EXPECT_GT(keys.size(), 10000u);
}

TEST(KernelKeys, EveryUserKernelVariantHasItsOwnEntry) {
  // The key a user ElementwiseKernel call builds (param_specs in user_kernels.cpp): per parameter its kind, dtype,
  // storage dtype and raw layout, then the layout class, rank and index width.
  detail::KernelMemo<UserVariantKey<UserElementwiseSpec>> memo;
  size_t generated = 0;
  const auto add = [&](const UserElementwiseSpec& s) {
    for (int device : {0, 1}) memo.insert({device, s}, std::make_shared<int>(0));
    ++generated;
  };
  for (DType in : kAllTypes)
    for (DType storage : kAllTypes)
      for (DType out : kAllTypes)
        for (int kind = 0; kind < 3; ++kind)
          for (int raw_ndim : {0, 1, 3}) {
            if (kind != 2 && raw_ndim != 0) continue;
            if (kind == 1 && storage != in) continue;  // a scalar has no storage dtype of its own
            UserElementwiseSpec s;
            s.params.resize(2);
            s.params[0].kind = static_cast<UserArgKind>(kind);
            s.params[0].dtype = in;
            s.params[0].storage = storage;
            s.params[0].raw_ndim = raw_ndim;
            s.params[1].dtype = s.params[1].storage = out;
            s.params[1].output = true;
            for (bool contiguous : {true, false})
              for (int nd : {1, 2, kMaxRank})
                for (bool index64 : {false, true}) {
                  if (contiguous && nd != 1) continue;
                  s.contiguous = contiguous;
                  s.ndim = nd;
                  s.index64 = index64;
                  add(s);
                }
          }
  EXPECT_EQ(memo.size(), 2 * generated);
  EXPECT_GT(generated, 10000u);
}

#endif  // KILN_WITH_CUDA
