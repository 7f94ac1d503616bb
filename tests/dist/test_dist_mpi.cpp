// kiln::dist across processes: this binary runs under `mpirun -np N` (ctest starts it with 2, 3 and 4 ranks).
// Every rank runs every test; references are computed locally in float64 from what each rank contributes, so a
// test checks the collective against an independent sum, not against another collective.
// CPU arrays go over MPI; when the machine has a GPU per rank, the same checks run on GPU arrays over NCCL.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "kiln/data.hpp"
#include "kiln/dist.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"
#include "kiln/train.hpp"
#include "gpt2_step.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif

using namespace kiln;
namespace dist = kiln::dist;

namespace {

dist::ProcessGroup& G() { return dist::default_group(); }

/// The value rank r contributes at element i (exact in every dtype tested: small integers and halves).
double contribution(int r, int64_t i) { return static_cast<double>((r + 1) * ((i % 7) - 3)) + (r % 2 ? 0.5 : 0.0); }

Array contributed(int r, int64_t n, DType t, Device d) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = contribution(r, i);
  return from_data(v, Shape{n}).astype(t).to(d);
}

/// Whether every rank works on a GPU (the same answer on every rank: with fewer GPUs than local ranks, rank 0
/// has a GPU and rank 1 does not, and a GPU case run by one rank alone would wait for the other forever).
bool every_rank_has_a_gpu() { return G().device().is_cuda() && num_gpus() >= G().size(); }

std::vector<Device> devices_to_test() {
  std::vector<Device> out{cpu()};
  if (every_rank_has_a_gpu()) out.push_back(G().device());
  return out;
}

double reference(dist::ReduceOp op, int64_t i, DType t, int size) {
  double acc = op == dist::ReduceOp::max ? -1e300 : op == dist::ReduceOp::min ? 1e300 : 0.0;
  for (int r = 0; r < size; ++r) {
    double v = contribution(r, i);
    if (!is_floating(t)) v = std::trunc(v);  // astype to an integer truncates the .5
    if (op == dist::ReduceOp::max)
      acc = std::max(acc, v);
    else if (op == dist::ReduceOp::min)
      acc = std::min(acc, v);
    else
      acc += v;
  }
  return op == dist::ReduceOp::avg ? acc / size : acc;
}

}  // namespace

TEST(DistMpi, the_group_is_mpiruns_world) {
  const auto env = dist::launch_environment();
  EXPECT_TRUE(env.from_mpirun);
  EXPECT_EQ(G().size(), env.world_size);
  EXPECT_EQ(G().rank(), env.rank);
  EXPECT_EQ(G().backend(cpu()), "mpi");
}

TEST(DistMpi, all_reduce_matches_a_float64_reference_for_every_op_and_dtype) {
  const int size = G().size();
  for (Device d : devices_to_test())
    for (DType t : {float32, float64, float16, bfloat16, int32, int64})
      for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max, dist::ReduceOp::min}) {
        if (op == dist::ReduceOp::avg && !is_floating(t)) continue;
        Array x = contributed(G().rank(), 1000, t, d);
        G().all_reduce(x, op).wait();
        const std::vector<double> got = x.astype(float64).to(cpu()).to_vector<double>();
        for (int64_t i = 0; i < 1000; ++i) {
          const double want = reference(op, i, t, size);
          // Sums of these values are exact in every dtype; an average over 3 ranks rounds once in t.
          const double rel = t == bfloat16 ? 8e-3 : t == float16 ? 1e-3 : t == float32 ? 2e-7 : 1e-15;
          ASSERT_NEAR(got[static_cast<size_t>(i)], want, rel * std::abs(want) + 1e-12)
              << d.str() << " " << dtype_name(t) << " " << dist::reduce_op_name(op) << " at " << i;
        }
      }
}

TEST(DistMpi, bool_all_reduce_is_any_and_all) {
  for (Device d : devices_to_test()) {
    // Element 0: true on rank 0 only; element 1: true everywhere.
    Array x = from_data(std::vector<uint8_t>{G().rank() == 0, 1}, Shape{2}).astype(bool_).to(d);
    Array any = x.copy(), all = x.copy();
    G().all_reduce(any, dist::ReduceOp::max).wait();
    G().all_reduce(all, dist::ReduceOp::min).wait();
    EXPECT_EQ(any.astype(int32).to(cpu()).to_vector<int32_t>(), (std::vector<int32_t>{1, 1})) << d.str();
    EXPECT_EQ(all.astype(int32).to(cpu()).to_vector<int32_t>(), (std::vector<int32_t>{G().size() == 1 ? 1 : 0, 1}))
        << d.str();
  }
}

TEST(DistMpi, broadcast_from_every_root) {
  for (Device d : devices_to_test())
    for (int root = 0; root < G().size(); ++root) {
      Array x = contributed(G().rank(), 33, float32, d);
      G().broadcast(x, root).wait();
      EXPECT_EQ(x.to(cpu()).to_vector<float>(), contributed(root, 33, float32, cpu()).to_vector<float>())
          << d.str() << " root " << root;
    }
}

TEST(DistMpi, all_gather_puts_each_ranks_array_in_its_row) {
  for (Device d : devices_to_test()) {
    Array in = contributed(G().rank(), 10, float64, d).reshape({2, 5});
    Array out = empty({G().size(), 2, 5}, float64, d);
    G().all_gather(out, in).wait();
    for (int r = 0; r < G().size(); ++r)
      EXPECT_EQ(out.index({r}).to(cpu()).flatten().to_vector<double>(),
                contributed(r, 10, float64, cpu()).to_vector<double>())
          << d.str() << " row " << r;
  }
}

TEST(DistMpi, reduce_scatter_gives_rank_r_the_sum_of_row_r) {
  const int size = G().size();
  for (Device d : devices_to_test())
    for (DType t : {float32, bfloat16}) {
      // Row j of rank r holds contribution(r, 8 j + i).
      Array in = contributed(G().rank(), 8 * size, t, d).reshape({size, 8});
      Array out = empty({8}, t, d);
      G().reduce_scatter(out, in, dist::ReduceOp::sum).wait();
      const std::vector<double> got = out.astype(float64).to(cpu()).to_vector<double>();
      for (int64_t i = 0; i < 8; ++i)
        EXPECT_NEAR(got[static_cast<size_t>(i)], reference(dist::ReduceOp::sum, 8 * G().rank() + i, t, size), 1e-6)
            << d.str() << " " << dtype_name(t);
    }
}

TEST(DistMpi, send_and_recv_pass_arrays_around_a_ring) {
  if (G().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (Device d : devices_to_test()) {
    const int next = (G().rank() + 1) % G().size(), prev = (G().rank() + G().size() - 1) % G().size();
    Array mine = contributed(G().rank(), 64, int64, d), got = empty({64}, int64, d);
    // Even ranks send first, odd ranks receive first: no rank waits on a rank that waits on it.
    if (G().rank() % 2 == 0) {
      G().send(mine, next).synchronize();
      G().recv(got, prev).synchronize();
    } else {
      G().recv(got, prev).synchronize();
      G().send(mine, next).synchronize();
    }
    EXPECT_EQ(got.to(cpu()).to_vector<int64_t>(), contributed(prev, 64, int64, cpu()).to_vector<int64_t>()) << d.str();
  }
}

TEST(DistMpi, several_operations_in_flight_complete_in_any_wait_order) {
  std::vector<Array> xs;
  std::vector<dist::Work> works;
  for (int k = 0; k < 6; ++k) {
    xs.push_back(full({257}, static_cast<double>(k + G().rank()), float32, cpu()));
    works.push_back(G().all_reduce(xs.back()));
  }
  for (int k = 5; k >= 0; --k) {
    works[static_cast<size_t>(k)].wait();
    EXPECT_TRUE(works[static_cast<size_t>(k)].is_completed());
    const double want = G().size() * k + G().size() * (G().size() - 1) / 2.0;
    EXPECT_EQ(xs[static_cast<size_t>(k)].to_vector<float>()[256], want);
  }
}

TEST(DistMpi, barrier_returns_on_every_rank) {
  G().barrier();
  G().barrier();
  SUCCEED();
}

TEST(DistMpi, bad_operands_are_refused_before_anything_is_sent) {
  Array strided = zeros({8}, float32, cpu()).slice(0, 0, 8, 2);
  EXPECT_THROW(G().all_reduce(strided), ValueError);
  Array ints = zeros({4}, int32, cpu());
  EXPECT_THROW(G().all_reduce(ints, dist::ReduceOp::avg), DTypeError);
  Array out = empty({G().size() + 1, 4}, float32, cpu());
  Array in = zeros({4}, float32, cpu());
  EXPECT_THROW(G().all_gather(out, in), ShapeError);
  EXPECT_THROW(G().broadcast(in, G().size()), ValueError);
  // Nothing was started: a collective afterwards still matches across ranks.
  Array x = ones({3}, float32, cpu());
  G().all_reduce(x).wait();
  EXPECT_EQ(x.to_vector<float>()[0], static_cast<float>(G().size()));
}

// ---------------------------------------------------------------- DistributedDataParallel

namespace {

std::shared_ptr<nn::Sequential> mlp(uint64_t seed, int64_t hidden = 16) {
  random::seed(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(8, hidden));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(hidden, 4));
  return m;
}

/// A fixed batch of 24 samples, the same on every rank.
std::pair<Array, Array> batch() {
  random::seed(1234);
  Array x = random::normal({24, 8}, float32, cpu());
  Array y = random::randint(0, 4, {24}, int64, cpu());
  return {x, y};
}

}  // namespace

TEST(DistMpi, ddp_training_equals_one_process_on_the_full_batch) {
  const int size = G().size();
  if (24 % size != 0) GTEST_SKIP() << "the batch of 24 does not split evenly over " << size << " ranks";
  for (Device d : devices_to_test()) {
    // Each rank starts from a different initialisation: DDP must broadcast rank 0's.
    auto local = mlp(100 + static_cast<uint64_t>(G().rank()));
    local->to(d);
    dist::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.0002});  // 209 bytes: 4 buckets
    ASSERT_GE(ddp.buckets().size(), 3u);
    auto reference = mlp(100);  // rank 0's initialisation, trained on the whole batch in this process
    reference->to(d);
    optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    auto [x, y] = batch();
    const int64_t share = 24 / size;
    for (int step = 0; step < 3; ++step) {
      opt.zero_grad();
      Array xs = x.slice(0, G().rank() * share, (G().rank() + 1) * share).to(d);
      Array ys = y.slice(0, G().rank() * share, (G().rank() + 1) * share).to(d);
      nn::cross_entropy(ddp(xs), ys).backward();
      ref_opt.zero_grad();
      nn::cross_entropy((*reference)(x.to(d)), y.to(d)).backward();
      const auto got = ddp.parameters(), want = reference->parameters();
      for (size_t k = 0; k < got.size(); ++k) {
        const auto g = got[k].grad().to(cpu()).flatten().to_vector<float>();
        const auto w = want[k].grad().to(cpu()).flatten().to_vector<float>();
        for (size_t i = 0; i < g.size(); ++i)
          ASSERT_NEAR(g[i], w[i], 2e-6 + 1e-4 * std::abs(w[i])) << d.str() << " step " << step << " param " << k;
      }
      opt.step();
      ref_opt.step();
    }
    const auto got = ddp.parameters(), want = reference->parameters();
    for (size_t k = 0; k < got.size(); ++k)
      EXPECT_LT(max(abs(got[k].to(cpu()) - want[k].to(cpu()))).item<float>(), 1e-5f) << d.str() << " param " << k;
    EXPECT_EQ(ddp.named_parameters().front().first.rfind("module.", 0), 0u);
  }
}

TEST(DistMpi, ddp_no_sync_accumulates_locally_then_averages_the_sums) {
  const int size = G().size();
  if (24 % (2 * size) != 0) GTEST_SKIP() << "needs 2 equal micro-batches per rank";
  auto local = mlp(7);
  dist::DistributedDataParallel ddp(local);
  auto reference = mlp(7);
  auto [x, y] = batch();
  const int64_t share = 24 / size, half = share / 2;
  const int64_t base = G().rank() * share;
  {
    auto guard = ddp.no_sync();
    nn::cross_entropy(ddp(x.slice(0, base, base + half)), y.slice(0, base, base + half)).backward();
    // No all-reduce happened: the gradient is this rank's own.
    auto solo = mlp(7);
    nn::cross_entropy((*solo)(x.slice(0, base, base + half)), y.slice(0, base, base + half)).backward();
    EXPECT_LT(max(abs(ddp.parameters()[0].grad() - solo->parameters()[0].grad())).item<float>(), 1e-7f);
  }
  nn::cross_entropy(ddp(x.slice(0, base + half, base + share)), y.slice(0, base + half, base + share)).backward();
  // Reference: the sum over micro-batches of mean losses, averaged over ranks = mean over micro-batch halves.
  for (int r = 0; r < size; ++r)
    for (int h = 0; h < 2; ++h) {
      const int64_t b = r * share + h * half;
      (nn::cross_entropy((*reference)(x.slice(0, b, b + half)), y.slice(0, b, b + half)) / static_cast<double>(size))
          .backward();
    }
  const auto got = ddp.parameters(), want = reference->parameters();
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_LT(max(abs(got[k].grad() - want[k].grad())).item<float>(), 1e-5f) << "param " << k;
}

// A DDP step captured in a CUDA graph (train::TrainStep): each replay all-reduces the ranks' gradients, so
// after replays the replicas still equal one process trained on the whole batch; and a lone captured
// all_reduce sums every rank's array at each replay.
#ifdef KILN_WITH_CUDA
TEST(DistMpi, a_ddp_step_captured_in_a_graph_averages_gradients_at_every_replay) {
  const int size = G().size();
  if (!every_rank_has_a_gpu()) GTEST_SKIP() << "needs a GPU per rank (NCCL; CUDA graphs)";
  if (24 % size != 0) GTEST_SKIP() << "the batch of 24 does not split evenly over " << size << " ranks";
  const Device d = G().device();
  Stream side = Stream::create(d);
  StreamGuard on(side);
  {
    Array x = full({1000}, static_cast<double>(G().rank() + 1), float32, d);
    cuda::Graph graph;
    {
      cuda::GraphCapture capture(graph, side);
      x += 1.0;
      G().all_reduce(x, dist::ReduceOp::sum).wait();
    }
    for (int r = 0; r < 3; ++r) graph.replay();
    double want = 0;  // float64 reference of v <- sum over ranks of (v_r + 1), three times
    for (int r = 0; r < size; ++r) want += r + 2;
    for (int k = 1; k < 3; ++k) want = size * (want + 1);
    EXPECT_TRUE(array_equal(x.to(cpu()), full({1000}, want, float32))) << "want " << want;
  }
  auto local = mlp(200 + static_cast<uint64_t>(G().rank()));  // DDP broadcasts rank 0's initialisation
  local->to(d);
  dist::DistributedDataParallel ddp(local, {.bucket_cap_mb = 0.0002});  // several buckets
  auto reference = mlp(200);
  reference->to(d);
  optim::SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  train::TrainStep graphed(ddp, opt, {.accuracy = false, .graph = true, .warmup = 2});
  train::TrainStep whole(*reference, ref_opt, {.accuracy = false});
  const int64_t share = 24 / size;
  for (int step = 0; step < 6; ++step) {
    // A new batch each step (the same on every rank), so a replay that reused the capture's would diverge.
    random::seed(500 + static_cast<uint64_t>(step));
    Array xs = random::normal({24, 8}, float32, cpu());
    Array ys = random::randint(0, 4, {24}, int64, cpu());
    graphed(xs.slice(0, G().rank() * share, (G().rank() + 1) * share).to(d),
            ys.slice(0, G().rank() * share, (G().rank() + 1) * share).to(d));
    whole(xs.to(d), ys.to(d));
  }
  EXPECT_EQ(graphed.replays(), 4);
  const auto got = ddp.parameters(), want = reference->parameters();
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_LT(max(abs(got[k].to(cpu()) - want[k].to(cpu()))).item<float>(), 1e-5f) << "param " << k;
}
#endif  // KILN_WITH_CUDA

// bench_dist's ddp_gpt2 step (bench/gpt2_step.hpp: GPT-2, two AdamW groups, clip_grad_norm) on a tiny config:
// each rank draws its own batch (seed + rank), and after the steps every rank's parameters equal those of one
// process training the same step on the ranks' batches concatenated. The tied embedding/head weight gets its
// gradient from two uses, and clipping acts on the averaged gradients.
TEST(DistMpi, ddp_gpt2_step_equals_one_process_on_the_concatenated_batch) {
  const int size = G().size();
  for (Device d : devices_to_test()) {
    kiln_bench::Gpt2StepOptions o;
    o.config = {.vocab_size = 64, .n_positions = 16, .n_embd = 32, .n_layer = 2, .n_head = 2};
    o.config.embd_pdrop = o.config.attn_pdrop = o.config.resid_pdrop = 0.0;
    o.bf16 = false;
    o.clip = 0.5;
    o.ddp = true;
    o.ddp_options.bucket_cap_mb = 0.01;  // 10 kB: several buckets
    o.seed = 300 + static_cast<uint64_t>(G().rank());  // DDP must broadcast rank 0's initialisation
    kiln_bench::Gpt2Step step(o, d);
    kiln_bench::Gpt2StepOptions whole_options = o;
    whole_options.ddp = false;
    whole_options.seed = 300;
    kiln_bench::Gpt2Step whole(whole_options, d);
    std::vector<Array> initial;
    for (const Array& p : whole.parameters()) initial.push_back(p.to(cpu()).copy());
    const int64_t batch = 2, seq = 16;
    for (int s = 0; s < 3; ++s) {
      std::vector<Array> xs, ys;
      for (int r = 0; r < size; ++r) {
        auto [x, y] = kiln_bench::gpt2_random_batch(64, batch, seq, 1000 * static_cast<uint64_t>(s) + r, d);
        xs.push_back(x);
        ys.push_back(y);
      }
      const Array loss = step(xs[static_cast<size_t>(G().rank())], ys[static_cast<size_t>(G().rank())]);
      const Array whole_loss = whole(concatenate(xs, 0), concatenate(ys, 0));
      ASSERT_TRUE(std::isfinite(loss.item<double>()));
      // The clipping acts: the averaged gradients' norm is above the bound, as the whole batch's.
      EXPECT_GT(whole.grad_norm().item<double>(), o.clip) << d.str() << " step " << s;
      EXPECT_NEAR(step.grad_norm().item<double>(), whole.grad_norm().item<double>(),
                  1e-5 * whole.grad_norm().item<double>())
          << d.str() << " step " << s;
    }
    const auto got = step.parameters(), want = whole.parameters();
    ASSERT_EQ(got.size(), want.size());
    float moved = 0;
    for (size_t k = 0; k < got.size(); ++k) {
      // One AdamW step moves a parameter by up to lr = 6e-4, and Adam's normalisation lets rounding grow (an
      // average over 3 ranks is not exact: 6e-6 seen); a rank that trained on its own batch only ends 3e-3 off.
      EXPECT_LT(max(abs(got[k].to(cpu()) - want[k].to(cpu()))).item<float>(), 3e-5f) << d.str() << " param " << k;
      moved = std::max(moved, max(abs(want[k].to(cpu()) - initial[k])).item<float>());
    }
    EXPECT_GT(moved, 1e-3f) << "three steps should move some parameter by more than one lr";
  }
}

TEST(DistMpi, ddp_reports_a_model_that_differs_across_ranks) {
  if (G().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  auto local = mlp(1, G().rank() == 1 ? 17 : 16);
  try {
    dist::DistributedDataParallel ddp(local);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 1"), std::string::npos) << m;
    EXPECT_NE(m.find("0.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("(16, 8)"), std::string::npos) << m;
    EXPECT_NE(m.find("(17, 8)"), std::string::npos) << m;
  }
}

TEST(DistMpi, distributed_sampler_shares_are_disjoint_and_cover_the_data) {
  const int size = G().size();
  data::DistributedSampler s{.num_replicas = size, .rank = G().rank(), .shuffle = true, .seed = 5};
  const int64_t n = 103;
  const auto mine = s.indices(n, 2);
  ASSERT_EQ(static_cast<int64_t>(mine.size()), s.num_samples(n));
  Array all = empty({size, s.num_samples(n)}, int64, cpu());
  G().all_gather(all, from_data(mine, Shape{s.num_samples(n)})).wait();
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t v : all.to_vector<int64_t>()) ++seen[static_cast<size_t>(v)];
  const int64_t padding = s.num_samples(n) * size - n;
  int64_t twice = 0;
  for (int c : seen) {
    EXPECT_GE(c, 1);
    EXPECT_LE(c, 2);
    twice += c == 2;
  }
  EXPECT_EQ(twice, padding);
}

// ---------------------------------------------------------------- failure

TEST(DistMpi, a_rank_that_joins_too_late_makes_the_others_time_out_with_a_clear_error) {
  if (G().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Rank 0 waits 0.5 s; the late rank waits long enough for rank 0 to make MPI progress again (its abandoned
  // request completes when rank 0 next calls into MPI, in the next test: on a 16-core GPU machine that came
  // more than 0.5 s after rank 1's call, and a 0.5 s timeout on rank 1 failed the test).
  const bool late = G().rank() != 0;
  dist::ProcessGroup g({.timeout = std::chrono::milliseconds(late ? 30000 : 500)});
  Array x = ones({16}, float32, cpu());
  if (!late) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g.all_reduce(x).synchronize();
      FAIL() << "expected DistError";
    } catch (const DistError& e) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      EXPECT_LT(s, 1.5);
      const std::string m = e.what();
      EXPECT_NE(m.find("all_reduce"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0 of"), std::string::npos) << m;
      EXPECT_NE(m.find("KILN_DIST_TIMEOUT"), std::string::npos) << m;
    }
    EXPECT_TRUE(g.aborted());
    EXPECT_THROW(g.all_reduce(x), DistError);  // the group stays failed
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    g.all_reduce(x).synchronize();  // joins late: rank 0's abandoned request completes, so teardown is clean
  }
}

TEST(DistMpi, kiln_dist_debug_reports_ranks_that_call_different_collectives) {
  if (G().size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (Device d : devices_to_test()) {
    dist::ProcessGroup g({.device = d.is_cuda() ? d : cpu(), .check_calls = true});
    Array x = zeros({G().rank() == 1 ? 5 : 4}, float32, d);
    try {
      g.all_reduce(x);
      FAIL() << "expected ShapeError on every rank";
    } catch (const ShapeError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("rank 1 made call #1 on (5,) float32"), std::string::npos) << m;
      EXPECT_NE(m.find("rank 0 made call #1 on (4,) float32"), std::string::npos) << m;
    }
    Array y = ones({3}, float32, d);  // nothing was started: the next matching call works
    g.all_reduce(y).synchronize();
    EXPECT_EQ(y.to(cpu()).to_vector<float>()[0], static_cast<float>(G().size())) << d.str();
  }
}

TEST(DistMpi, a_nccl_collective_that_a_rank_skips_is_aborted_by_the_watchdog) {
  if (G().size() < 2 || !every_rank_has_a_gpu()) GTEST_SKIP() << "needs a GPU per rank (NCCL)";
  dist::ProcessGroup g({.timeout = std::chrono::milliseconds(500)});
  Array x = ones({1 << 20}, float32, g.device());
  const auto t0 = std::chrono::steady_clock::now();
  if (g.rank() == 0) {
    try {
      g.all_reduce(x).synchronize();
      FAIL() << "expected DistError";
    } catch (const DistError& e) {
      EXPECT_NE(std::string(e.what()).find("all_reduce"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
    EXPECT_TRUE(g.aborted());
    EXPECT_THROW(g.all_reduce(x), DistError);
  } else {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    // Rank 0 has aborted: this rank's collective waits for nobody and its own watchdog ends it.
    try {
      g.all_reduce(x).synchronize();
    } catch (const DistError&) {
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  }
  synchronize(g.device());  // the aborted kernels have returned: the GPU is usable
}

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // A GPU per rank, or the CPU only (several ranks on one GPU is not something NCCL allows).
  dist::InitOptions options;
  const auto env = dist::launch_environment();
  if (num_gpus() < env.world_size) options.device = cpu();
  dist::init_process_group(options);
  if (std::getenv("KILN_TEST_DIST_DIE")) {
    // The failure test (ctest dist.mpi.rank_dies): rank 1 dies; rank 0 must not hang.
    if (dist::rank() == 1) std::_Exit(3);
    Array x = ones({4}, float32, cpu());
    dist::default_group().all_reduce(x).synchronize();
    return 0;
  }
  const int rc = RUN_ALL_TESTS();
  dist::destroy_process_group();
  return rc;
}
