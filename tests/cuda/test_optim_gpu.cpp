// The optimizers' multi-tensor kernels (Fused::each on a GPU): the same bits as the same fused functions on the
// CPU, over many tensors and chunks (several launches, a tensor split across launches), a few kernels per step,
// and the version bump that protects arrays saved for backward.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <memory>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

/// Parameters of the given sizes with gradients, on `d`, the same values on every device.
std::vector<Array> params_with_grads(Device d, const std::vector<int64_t>& sizes, uint64_t seed) {
  random::seed(seed);
  std::vector<Array> ps;
  for (int64_t n : sizes) {
    Array p = random::normal({n}, 0.0, 1.0, float32, cpu()).to(d).set_requires_grad();
    p.set_grad(random::normal({n}, 0.0, 1.0, float32, cpu()).to(d));
    ps.push_back(p);
  }
  return ps;
}

template <class Make>
void same_bits_as_the_cpu(const std::vector<int64_t>& sizes, Make make) {
  std::vector<std::vector<float>> results[2];
  int k = 0;
  for (Device d : {cpu(), gpu(0)}) {
    std::vector<Array> ps = params_with_grads(d, sizes, 3);
    auto opt = make(ps);
    for (int step = 0; step < 3; ++step) opt->step();  // the same gradients each step
    for (const Array& p : ps) results[k].push_back(p.to_vector<float>());
    ++k;
  }
  for (size_t i = 0; i < sizes.size(); ++i)
    EXPECT_EQ(results[0][i], results[1][i]) << "tensor " << i << " of " << sizes[i];
}

TEST(OptimGpu, MultiTensorStepsGiveTheCpusBits) {
  KILN_REQUIRE_GPU();
  // 40 tensors (two tables), one of 25M elements (more chunks than one launch takes), sizes off the chunk size (8192).
  std::vector<int64_t> sizes = {1, 7, 8192, 8193, 200000, 25'000'000};
  for (int i = 0; i < 34; ++i) sizes.push_back(10 + 3 * i);
  same_bits_as_the_cpu(sizes, [](auto& ps) {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .weight_decay = 0.01});
  });
  same_bits_as_the_cpu(sizes, [](auto& ps) {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.1});
  });
  same_bits_as_the_cpu(sizes, [](auto& ps) {
    return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .nesterov = true});
  });
  same_bits_as_the_cpu(sizes, [](auto& ps) {
    return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1});
  });
  same_bits_as_the_cpu(sizes,
                       [](auto& ps) { return std::make_unique<optim::AdamW>(ps, optim::AdamOptions{.lr = 0.01}); });
}

TEST(OptimGpu, AStepOfManyParametersIsAFewKernels) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  std::vector<int64_t> sizes;
  for (int i = 0; i < 30; ++i) sizes.push_back(1000 + i);
  std::vector<Array> ps = params_with_grads(d, sizes, 4);
  optim::Adam adam(ps, {.lr = 0.01, .capturable = true});
  adam.step();  // creates the state; compiles
  synchronize(d);
  Stream s = Stream::create(d);
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph, s);
    adam.step();
  }
  EXPECT_EQ(graph.num_nodes(), 2u);  // the step count and bias corrections, then 30 parameters in one launch
  graph.replay(s);
  s.synchronize();
  optim::SGD sgd(ps, {.lr = 0.01});
  cuda::Graph sgd_graph;
  {
    cuda::GraphCapture capture(sgd_graph, s);
    sgd.step();
  }
  EXPECT_EQ(sgd_graph.num_nodes(), 1u);
}

TEST(OptimGpu, CapturableAdamGivesTheSameBitsAndAdvancesInReplays) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const std::vector<int64_t> sizes = {5, 8193, 40000};
  std::vector<Array> plain = params_with_grads(d, sizes, 5), eager = params_with_grads(d, sizes, 5),
                     graphed = params_with_grads(d, sizes, 5);
  plain.push_back(random::normal({6}, 0.0, 1.0, float64, d).set_requires_grad());  // a fused (non-multi) parameter
  plain.back().set_grad(ones({6}, float64, d));
  for (auto* set : {&eager, &graphed}) {
    set->push_back(plain.back().detach().copy().set_requires_grad());
    set->back().set_grad(ones({6}, float64, d));
  }
  optim::Adam a(plain, {.lr = 0.01, .weight_decay = 0.1});
  optim::Adam b(eager, {.lr = 0.01, .weight_decay = 0.1, .capturable = true});
  optim::Adam c(graphed, {.lr = 0.01, .weight_decay = 0.1, .capturable = true});
  c.step();  // the eager first step creates the state
  Stream s = Stream::create(d);
  synchronize(d);
  cuda::Graph graph;
  {
    cuda::GraphCapture capture(graph, s);
    c.step();
  }
  for (int step = 0; step < 6; ++step) {
    a.step();
    b.step();
    if (step > 0) graph.replay(s);  // step 0 was c's eager step
  }
  s.synchronize();
  for (size_t i = 0; i < plain.size(); ++i) {
    if (plain[i].dtype() == float32) {
      EXPECT_EQ(plain[i].to_vector<float>(), eager[i].to_vector<float>()) << "tensor " << i;
      EXPECT_EQ(plain[i].to_vector<float>(), graphed[i].to_vector<float>()) << "tensor " << i;
    } else {
      const std::vector<double> want = plain[i].to_vector<double>(), e = eager[i].to_vector<double>(),
                                g = graphed[i].to_vector<double>();
      for (size_t k = 0; k < want.size(); ++k) {
        EXPECT_NEAR(e[k], want[k], 1e-12) << "float64 parameter, capturable, element " << k;
        EXPECT_NEAR(g[k], want[k], 1e-12) << "float64 parameter, replayed, element " << k;
      }
    }
  }
  EXPECT_EQ(c.state_dict().at("step").item<int64_t>(), 6) << "the replays advanced the saved step count";
}

TEST(OptimGpu, CapturingAStepThatWouldFreezeItsStateThrows) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  std::vector<Array> ps = params_with_grads(d, {10}, 6);
  Stream s = Stream::create(d);
  synchronize(d);
  optim::Adam adam(ps, {.lr = 0.01});
  adam.step();
  {
    cuda::Graph graph;
    kiln_test::expect_error<ValueError>(
        [&] {
          cuda::GraphCapture capture(graph, s);
          adam.step();
        },
        {"Adam::step", "capturable = true"});
  }
  optim::Adam fresh(ps, {.lr = 0.01, .capturable = true});
  {
    cuda::Graph graph;
    kiln_test::expect_error<ValueError>(
        [&] {
          cuda::GraphCapture capture(graph, s);
          fresh.step();
        },
        {"Adam::step", "first step", "eagerly first"});
  }
  optim::SGD sgd(ps, {.lr = 0.01, .momentum = 0.9});
  {
    cuda::Graph graph;
    kiln_test::expect_error<ValueError>(
        [&] {
          cuda::GraphCapture capture(graph, s);
          sgd.step();
        },
        {"SGD::step with momentum", "eagerly first"});
  }
}

TEST(OptimGpu, AMultiTensorStepBumpsTheVersionOfParametersSavedForBackward) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  nn::Linear layer(4, 3, true, float32, d);
  optim::SGD opt(layer.parameters(), {.lr = 0.1});
  const Array x = ones({2, 4}, float32, d);
  sum(layer(x)).backward();
  const Array loss = sum(layer(x));  // saves the weight
  opt.step();                        // changes it in place
  EXPECT_THROW(loss.backward(), ValueError);
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
