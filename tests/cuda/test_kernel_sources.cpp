// The kernel sources of src/cuda/kernels and the template helper, without a GPU: every embedded file is byte for
// byte its source file (cmake/KilnEmbed.cmake), fill_template substitutes `${name}` placeholders and names the
// placeholders a template and its generator disagree on, and every file is part of a generated source that NVRTC
// compiles to PTX (every template filled by some generator).
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "cuda/codegen.hpp"
#include "cuda/codegen_user.hpp"
#include "cuda/compiler.hpp"
#include "cuda/fusion.hpp"
#include "cuda/matmul.hpp"
#include "cuda/ops.hpp"
#include "cuda/random.hpp"
#include "cuda/template.hpp"
#include "kernel_sources/all.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string message_of(const auto& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no exception)";
}

}  // namespace

TEST(KernelSources, EveryEmbeddedFileIsByteIdenticalToItsSourceFile) {
  ASSERT_GT(std::size(kernel_sources::kAll), 0u);
  for (const kernel_sources::File& file : kernel_sources::kAll) {
    const std::string expected = read_file(std::string(KILN_KERNEL_SOURCE_DIR) + "/" + std::string(file.name));
    EXPECT_FALSE(expected.empty()) << file.name;
    EXPECT_EQ(file.text.size(), expected.size()) << file.name;
    EXPECT_TRUE(file.text == expected) << file.name << " differs from its embedded copy: rebuild";
  }
}

TEST(KernelSources, PreludeAndKernelFilesAreEmbedded) {
  for (const char* name :
       {"prelude.cuh", "prelude_reductions.cuh", "batch_norm.cuh", "cross_entropy.cuh", "layer_norm.cuh", "scan.cuh",
        "sort.cuh", "user_prelude.cuh"}) {
    bool found = false;
    for (const kernel_sources::File& file : kernel_sources::kAll) found = found || file.name == name;
    EXPECT_TRUE(found) << name;
  }
}

TEST(KernelTemplate, FillsEveryPlaceholderWithItsValue) {
  EXPECT_EQ(fill_template("t.cuh.in", "a ${x} b ${y_2}${x}.", {{"x", "1"}, {"y_2", "two"}}), "a 1 b two1.");
  EXPECT_EQ(fill_template("t.cuh.in", "no placeholders", {}), "no placeholders");
  EXPECT_EQ(fill_template("t.cuh.in", "${a}", {{"a", ""}}), "");
  // A value is inserted as it is, never scanned for placeholders.
  EXPECT_EQ(fill_template("t.cuh.in", "[${a}]", {{"a", "${b}"}}), "[${b}]");
  // A lone '$' or '{' is text (CUDA code has braces everywhere).
  EXPECT_EQ(fill_template("t.cuh.in", "{ $ } ${a}", {{"a", "x"}}), "{ $ } x");
}

TEST(KernelTemplate, VectorOfValuesFillsLikeAList) {
  const std::vector<TemplateValue> values = {{"name", "k"}, {"n", "4"}};
  EXPECT_EQ(fill_template("t.cuh.in", "${name}<${n}>", values), "k<4>");
}

TEST(KernelTemplate, UnfilledPlaceholdersThrowNamingThem) {
  const std::string m = message_of([] { (void)fill_template("t.cuh.in", "${a} ${b} ${c} ${b}", {{"a", "1"}}); });
  EXPECT_NE(m.find("internal error"), std::string::npos) << m;
  EXPECT_NE(m.find("t.cuh.in"), std::string::npos) << m;
  EXPECT_NE(m.find("no value for placeholder(s) ${b}, ${c}"), std::string::npos) << m;
}

TEST(KernelTemplate, UnknownPlaceholdersThrowNamingThem) {
  const std::string m = message_of([] {
    (void)fill_template("t.cuh.in", "${a}", {{"a", "1"}, {"zz", "2"}, {"yy", "3"}});
  });
  EXPECT_NE(m.find("internal error"), std::string::npos) << m;
  EXPECT_NE(m.find("unknown placeholder(s) ${zz}, ${yy}"), std::string::npos) << m;
}

TEST(KernelTemplate, MalformedAndRepeatedPlaceholdersThrow) {
  EXPECT_NE(message_of([] {
              (void)fill_template("t.cuh.in", "x ${a", {{"a", "1"}});
            }).find("byte 2"),
            std::string::npos);
  EXPECT_NE(message_of([] { (void)fill_template("t.cuh.in", "${}", {}); }).find("does not open"), std::string::npos);
  EXPECT_NE(message_of([] { (void)fill_template("t.cuh.in", "${a b}", {}); }).find("does not open"), std::string::npos);
  EXPECT_NE(message_of([] {
              (void)fill_template("t.cuh.in", "${a}", {{"a", "1"}, {"a", "2"}});
            }).find("twice"),
            std::string::npos);
  EXPECT_THROW((void)fill_template("t.cuh.in", "${a}", {}), Error);
}

namespace {

/// One kernel of each shape every generator has: together they fill every template of src/cuda/kernels.
std::vector<std::pair<std::string, std::string>> one_source_per_kernel_shape() {
  std::vector<std::pair<std::string, std::string>> sources;  // (kernel name, complete source)
  ElementwiseSpec e;
  e.op = detail::OpCode::Add;
  e.num_inputs = 2;
  e.vector_width = 4;
  sources.emplace_back(elementwise_kernel_name(e), elementwise_source(e));
  e.layout = EwLayout::Strided;
  e.ndim = 3;
  e.unroll = 4;
  e.vector_width = 1;
  sources.emplace_back(elementwise_kernel_name(e), elementwise_source(e));
  e.layout = EwLayout::Tiled;
  e.tiled_inputs = 2;
  sources.emplace_back(elementwise_kernel_name(e), elementwise_source(e));
  ElementwiseSpec q;
  q.layout = EwLayout::Sequence;
  sources.emplace_back(elementwise_kernel_name(q), elementwise_source(q));
  ReduceSpec r;
  r.vector_width = 4;
  sources.emplace_back(reduce_kernel_name(r), reduce_source(r));  // rows, vector loads, warp combine
  r.vector_width = 1;
  r.group = kBlockSize;
  r.kept_ndim = 2;
  sources.emplace_back(reduce_kernel_name(r), reduce_source(r));  // rows, one strided axis, block combine
  r.layout = ReduceLayout::Columns;
  r.reduced_ndim = 2;
  sources.emplace_back(reduce_kernel_name(r), reduce_source(r));

  auto chain = fuse([](auto x, auto y) { return exp(x * y) + 1; }, "chain");
  auto g = chain.graph(zeros({8}, float32, cpu()), zeros({8}, float32, cpu()));
  FusionKernelSpec f;
  f.vector_width = 4;
  sources.emplace_back(fusion_kernel_name(*g, f), fusion_source(*g, f));
  f.layout = FusionLayout::Strided;
  f.vector_width = 1;
  f.ndim = 2;
  sources.emplace_back(fusion_kernel_name(*g, f), fusion_source(*g, f));
  f.layout = FusionLayout::Broadcast;  // x dense in vectors, y per element
  f.vector_width = 4;
  f.broadcast_mask = 2;
  sources.emplace_back(fusion_kernel_name(*g, f), fusion_source(*g, f));
  auto dot = fuse([](auto x, auto y) { return sum(x * y); }, "dot");
  auto gd = dot.graph(zeros({8}, float32, cpu()), zeros({8}, float32, cpu()));
  FusionKernelSpec d;
  d.layout = FusionLayout::Reduce;
  d.group = 32;
  sources.emplace_back(fusion_kernel_name(*gd, d), fusion_source(*gd, d));
  auto softmax = fuse(
      [](auto v) {
        auto m = max(v, -1, true);
        auto ex = exp(v - m);
        return ex / sum(ex, -1, true);
      },
      "softmax");
  auto gs = softmax.graph(zeros({4, 6}, float32, cpu()));
  FusionKernelSpec s;
  s.layout = FusionLayout::Rows;
  s.group = kBlockSize;
  s.kept_ndim = 1;
  sources.emplace_back(fusion_kernel_name(*gs, s), fusion_source(*gs, s));
  FusionKernelSpec m;  // multi-tensor apply of the chain, y read as one element per tensor
  m.layout = FusionLayout::MultiTensor;
  m.broadcast_mask = 2;
  sources.emplace_back(fusion_kernel_name(*g, m), fusion_source(*g, m));

  const auto param = [](const char* name, bool output) {
    UserParamSpec p;
    p.name = name;
    p.output = output;
    return p;
  };
  UserElementwiseSpec ue;
  ue.name = "user_twice";
  ue.operation = "y = 2 * x";
  ue.params = {param("x", false), param("y", true)};
  ue.contiguous = false;
  ue.ndim = 2;
  sources.emplace_back(ue.name, user_elementwise_source(ue));
  UserReductionSpec ur;
  ur.name = "user_sum";
  ur.map_expr = "x";
  ur.reduce_expr = "a + b";
  ur.post_map_expr = "y = a";
  ur.identity = "0";
  ur.params = {param("x", false), param("y", true)};
  ur.kept_ndim = 1;
  sources.emplace_back(ur.name, user_reduction_source(ur));
  ur.name = "user_max";  // no identity: the first element seeds each accumulator
  ur.reduce_expr = "a > b ? a : b";
  ur.identity = "";
  ur.group = 32;
  sources.emplace_back(ur.name, user_reduction_source(ur));
  return sources;
}

}  // namespace

TEST(KernelSources, EveryFileIsCompiledByNvrtcInSomeGeneratedSource) {
  std::vector<std::pair<std::string, std::string>> sources = one_source_per_kernel_shape();
  sources.emplace_back("bn_apply", batch_norm_source(DType::Float32, DType::Float32));
  sources.emplace_back("ln_backward_rows", layer_norm_source(4, 6, true));
  sources.emplace_back("scan_segments", scan_source(detail::ReduceOp::CumSum, DType::Float32, DType::Float32));
  sources.emplace_back("sort_block", sort_source(DType::Float32));
  sources.emplace_back("ce_forward_block", cross_entropy_source(DType::BFloat16));
  sources.emplace_back(matmul_fallback_kernel_name(DType::Int32), matmul_fallback_source(DType::Int32));
  const RandomKernelSpec normal{detail::RandomDistribution::Normal, DType::Float32, false};
  sources.emplace_back(random_kernel_name(normal), random_source(normal));
  sources.emplace_back("kiln_random_graph_state", graph_state_source());
  CompileOptions options;
  options.options = builtin_kernel_options();
  for (const auto& [name, source] : sources) {
    std::string ptx;
    try {
      ptx = compile_ptx(source, name, 90, options);
    } catch (const std::exception& e) {
      ADD_FAILURE() << name << ": " << e.what();
      continue;
    }
    EXPECT_NE(ptx.find(".entry " + name + "("), std::string::npos) << name;
  }
  const std::vector<std::string> filled = filled_template_files();
  for (const kernel_sources::File& file : kernel_sources::kAll) {
    if (file.name.ends_with(".cuh.in")) {
      EXPECT_NE(std::find(filled.begin(), filled.end(), file.name), filled.end())
          << file.name << " is filled by no generator above: add its kernel shape";
    } else {  // a fixed file: part of one of the compiled sources
      bool found = false;
      for (const auto& entry : sources) found = found || entry.second.find(file.text) != std::string::npos;
      EXPECT_TRUE(found) << file.name << " is in no compiled source";
    }
  }
}

#endif  // KILN_WITH_CUDA
