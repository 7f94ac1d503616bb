// kiln::dist on the GPUs of one process: a NCCL group of one, DistributedDataParallel with world size 1,
// DataParallel over every GPU present (its step equals one model's step on the whole batch), and model
// parallel across cpu() and cuda:0 through the differentiable to(device) copies (the same copies as between two
// GPUs; tests/dist runs NCCL with several ranks when the machine has a GPU per rank).
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <memory>
#include <vector>

#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

std::shared_ptr<nn::Sequential> small_mlp(uint64_t seed, Device d = cpu()) {
  random::seed(seed);
  auto m = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(12, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5)});
  m->to(d);
  return m;
}

void expect_same_parameters(nn::Module& a, nn::Module& b, double tol, const std::string& what) {
  const auto pa = a.parameters(), pb = b.parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t k = 0; k < pa.size(); ++k)
    EXPECT_TRUE(allclose(pa[k].to(cpu()), pb[k].to(cpu()), tol, tol)) << what << ": parameter " << k;
}

TEST(DistGpu, a_nccl_group_of_one_runs_every_collective) {
  KILN_REQUIRE_GPU();
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = gpu(0)});
  EXPECT_EQ(g.backend(gpu(0)), "nccl");
  Array x = arange(1000, float32, gpu(0));
  const Array want = x.copy();
  for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max, dist::ReduceOp::min}) {
    dist::Work w = g.all_reduce(x, op);
    w.wait();  // orders the current stream; the comparison below reads x on it
    EXPECT_TRUE(array_equal(x, want)) << dist::reduce_op_name(op);
    w.synchronize();
    EXPECT_TRUE(w.is_completed());
  }
  Array h = arange(6, bfloat16, gpu(0));
  g.all_reduce(h, dist::ReduceOp::sum).wait();
  EXPECT_TRUE(array_equal(h, arange(6, bfloat16, gpu(0))));
  Array out = empty({1, 1000}, float32, gpu(0));
  g.all_gather(out, x).wait();
  EXPECT_TRUE(array_equal(out.reshape({1000}), want));
  Array rs = empty({1000}, float32, gpu(0));
  g.reduce_scatter(rs, out, dist::ReduceOp::sum).wait();
  EXPECT_TRUE(array_equal(rs, want));
  g.broadcast(x, 0).wait();
  g.barrier();
  // An array on another device than the group's GPU is refused with the fix.
  if (num_gpus() > 1) {
    Array other = zeros({4}, float32, gpu(1));
    kiln_test::expect_error<DeviceError>([&] { g.all_reduce(other); }, {"cuda:1", "cuda:0"});
  }
  Array ints = zeros({4}, int16, gpu(0));
  EXPECT_THROW(g.all_reduce(ints), DTypeError);
}

TEST(DistGpu, work_handles_outlive_their_arrays_safely) {
  KILN_REQUIRE_GPU();
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = gpu(0)});
  std::vector<dist::Work> works;
  for (int k = 0; k < 20; ++k) {
    Array x = full({1 << 16}, k, float32, gpu(0));
    works.push_back(g.all_reduce(x));
  }  // the arrays are gone from here; the group keeps their memory until NCCL is done with it
  for (auto& w : works) w.synchronize();
  Array y = zeros({1 << 16}, float32, gpu(0));
  EXPECT_EQ(sum(y).item<float>(), 0.0f);
}

TEST(DistGpu, ddp_with_world_size_one_matches_the_plain_model_on_the_gpu) {
  KILN_REQUIRE_GPU();
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = gpu(0)});
  auto net = small_mlp(4, gpu(0));
  auto plain = small_mlp(4, gpu(0));
  dist::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.001}, &g);
  optim::SGD a(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD b(plain->parameters(), {.lr = 0.05, .momentum = 0.9});
  Array x = random::normal({16, 12}, float32, gpu(0));
  Array y = random::randint(0, 5, {16}, int64, gpu(0));
  for (int step = 0; step < 3; ++step) {
    a.zero_grad();
    b.zero_grad();
    nn::cross_entropy(ddp(x), y).backward();
    nn::cross_entropy((*plain)(x), y).backward();
    a.step();
    b.step();
  }
  expect_same_parameters(ddp.module(), *plain, 1e-6, "DDP world 1");
}

// The reducer copies a bucket's gradients in with one launch per table of 48 gradients / 384 chunks of 8192
// elements: a bucket of 56 parameters, one of them 3.5M elements (433 chunks), fills two tables and carries a
// gradient over; every dtype width (2, 4, 8 bytes). World size 1 averages over one rank: the gradients must be
// the plain model's bit for bit.
TEST(DistGpu, ddp_copies_a_bucket_of_many_and_large_gradients_exactly) {
  KILN_REQUIRE_GPU();
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = gpu(0)});
  auto build = [](DType t) {
    random::seed(21);
    std::vector<std::shared_ptr<nn::Module>> layers{std::make_shared<nn::Linear>(16, 1536),
                                                    std::make_shared<nn::Linear>(1536, 2304),
                                                    std::make_shared<nn::Linear>(2304, 8)};
    for (int i = 0; i < 25; ++i) layers.push_back(std::make_shared<nn::Linear>(8, 8));
    auto m = std::make_shared<nn::Sequential>(layers);
    m->to(gpu(0));
    m->to(t);
    return m;
  };
  for (DType t : {float32, float64, bfloat16}) {
    auto net = build(t), plain = build(t);
    dist::DistributedDataParallel ddp(net, {.bucket_cap_mb = 1000}, &g);
    ASSERT_EQ(ddp.buckets().size(), 1u);
    ASSERT_EQ(ddp.buckets()[0].size(), 56u);
    Array x = random::normal({4, 16}, float32, gpu(0)).astype(t);
    sum(ddp(x)).backward();
    sum((*plain)(x)).backward();
    const auto pa = ddp.module().parameters(), pb = plain->parameters();
    for (size_t k = 0; k < pa.size(); ++k)
      EXPECT_TRUE(array_equal(pa[k].grad(), pb[k].grad())) << dtype_name(t) << ": parameter " << k;
  }
}

// A collective queued while the stream is captured becomes part of the graph and runs at every replay; its Work
// orders the capture but has nothing to poll, so asking it for completion is an error that says what to do.
TEST(DistGpu, a_collective_captured_in_a_graph_runs_at_every_replay) {
  KILN_REQUIRE_GPU();
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = gpu(0)});
  Array x = arange(1000, float32, gpu(0));
  const Array start = x.copy();
  Stream side = Stream::create(gpu(0));
  synchronize(gpu(0));
  cuda::Graph graph;
  dist::Work w;
  {
    cuda::GraphCapture capture(graph, side);
    x += 1.0;
    w = g.all_reduce(x, dist::ReduceOp::sum);
    w.wait();  // the captured stream joins the communication stream back
    x *= 2.0;
  }
  EXPECT_TRUE(array_equal(x, start)) << "captured work ran during the capture";
  for (int r = 0; r < 3; ++r) graph.replay();
  side.synchronize();
  EXPECT_TRUE(array_equal(x, start * 8.0 + 14.0));  // x -> (x + 1) * 2, three times
  kiln_test::expect_error<ValueError>([&] { (void)w.is_completed(); }, {"all_reduce", "captured", "replay"});
  kiln_test::expect_error<ValueError>([&] { w.synchronize(); }, {"captured", "synchronise the replay's stream"});
  kiln_test::expect_error<ValueError>([&] { w.wait(); }, {"after the capture ended"});
  // The group goes on with eager collectives between replays.
  Array y = ones({8}, float32, gpu(0));
  g.all_reduce(y).synchronize();
  EXPECT_TRUE(array_equal(y, ones({8}, float32, gpu(0))));
}

// A DDP training step captured whole by train::TrainStep (forward, backward with the buckets' copies and
// all-reduces, the optimizer) and replayed gives the eager DDP steps' parameters bit for bit.
TEST(DistGpu, a_ddp_step_captured_in_a_graph_equals_the_eager_steps) {
  KILN_REQUIRE_GPU();
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = gpu(0)});
  auto net = small_mlp(4, gpu(0)), ref = small_mlp(4, gpu(0));
  dist::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.001}, &g);  // 1 KB buckets: 2 all-reduces a step
  dist::DistributedDataParallel ref_ddp(ref, {.bucket_cap_mb = 0.001}, &g);
  ASSERT_GE(ddp.buckets().size(), 2u);
  optim::SGD a(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD b(ref_ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  Stream side = Stream::create(gpu(0));
  StreamGuard on(side);
  train::TrainStep graphed(ddp, a, {.graph = true, .warmup = 2});
  train::TrainStep eager(ref_ddp, b);
  random::seed(8);
  for (int step = 0; step < 7; ++step) {
    Array x = random::normal({16, 12}, float32, gpu(0));
    Array y = random::randint(0, 5, {16}, int64, gpu(0));
    graphed(x, y);
    eager(x, y);
  }
  EXPECT_TRUE(graphed.graphed());
  EXPECT_EQ(graphed.replays(), 5);
  EXPECT_EQ(graphed.mean_loss(), eager.mean_loss());
  const auto pa = ddp.module().parameters(), pb = ref_ddp.module().parameters();
  for (size_t k = 0; k < pa.size(); ++k) EXPECT_TRUE(array_equal(pa[k], pb[k])) << "parameter " << k;
}

TEST(DistGpu, data_parallel_over_the_gpus_present_equals_one_model_on_the_whole_batch) {
  KILN_REQUIRE_GPU();
  const std::vector<Device> gpus = try_all_gpus();
  dist::DataParallel dp(
      [] { return small_mlp(11); },
      [](nn::Module& m) { return std::make_unique<optim::SGD>(m.parameters(), optim::SGDOptions{.lr = 0.1}); }, gpus);
  auto reference = small_mlp(11, gpu(0));
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1});
  random::seed(77);
  // 13 samples: slices of different sizes when there are several GPUs.
  Array x = random::normal({13, 12}, float32, cpu());
  Array y = random::randint(0, 5, {13}, int64, cpu());
  for (int step = 0; step < 3; ++step) {
    Array loss = dp.train_step(x, y, [](const Array& out, const Array& t) { return nn::cross_entropy(out, t); });
    ref_opt.zero_grad();
    Array ref_loss = nn::cross_entropy((*reference)(x.to(gpu(0))), y.to(gpu(0)));
    ref_loss.backward();
    ref_opt.step();
    EXPECT_NEAR(loss.item<float>(), ref_loss.item<float>(), 1e-5) << "step " << step;
  }
  for (size_t i = 0; i < gpus.size(); ++i) {
    expect_same_parameters(dp.replica(i), *reference, 1e-5, "replica " + std::to_string(i));
    EXPECT_EQ(dp.replica(i).parameters()[0].device(), gpus[i]);
  }
  Array out = dp.forward(x);
  EXPECT_EQ(out.shape(), (Shape{13, 5}));
  EXPECT_TRUE(allclose(out.to(cpu()), (*reference)(x.to(gpu(0))).to(cpu()), 1e-5, 1e-5));
}

TEST(DistGpu, model_parallel_across_cpu_and_gpu_trains_like_one_device) {
  KILN_REQUIRE_GPU();
  // The first layer on the CPU, the rest on cuda:0; the activation crosses with a differentiable to().
  auto whole = small_mlp(21);
  random::seed(21);  // the same draws as small_mlp(21)
  auto first = std::make_shared<nn::Linear>(12, 32);
  auto rest = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 5)});
  rest->to(gpu(0));
  std::vector<Array> params = first->parameters();
  for (const Array& p : rest->parameters()) params.push_back(p);
  optim::SGD split_opt(params, {.lr = 0.1});
  optim::SGD whole_opt(whole->parameters(), {.lr = 0.1});
  Array x = random::normal({8, 12}, float32, cpu());
  Array y = random::randint(0, 5, {8}, int64, cpu());
  for (int step = 0; step < 3; ++step) {
    split_opt.zero_grad();
    whole_opt.zero_grad();
    Array split_loss = nn::cross_entropy((*rest)((*first)(x).to(gpu(0))), y.to(gpu(0)));
    Array whole_loss = nn::cross_entropy((*whole)(x), y);
    split_loss.backward();
    whole_loss.backward();
    EXPECT_NEAR(split_loss.item<float>(), whole_loss.item<float>(), 1e-5) << "step " << step;
    EXPECT_EQ(first->parameters()[0].grad().device(), cpu());
    split_opt.step();
    whole_opt.step();
  }
  EXPECT_TRUE(allclose(first->parameters()[0], whole->parameters()[0], 1e-5, 1e-6));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
