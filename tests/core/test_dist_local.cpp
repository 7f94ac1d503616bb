// kiln::dist pieces that one process can test: the rendezvous store (ranks as threads), a group of one,
// DistributedDataParallel with world size 1, the backward callbacks it relies on, DistributedSampler, the
// launch environment. The multi-process tests are tests/dist (mpirun, kiln launch).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "dist/store.hpp"
#include "kiln/data.hpp"
#include "kiln/dist.hpp"
#include "kiln/kiln.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

using namespace kiln;
namespace dist = kiln::dist;

namespace {

/// A port unlikely to be in use, different per test (ctest runs tests in parallel): eight per process, so two
/// processes of consecutive pids (ctest's shards) get disjoint ports (pid + k once gave one's k = 2 to the other's
/// k = 1: "Address already in use").
int test_port(int k) { return 20000 + static_cast<int>(getpid() % 4000) * 8 + k; }

/// A loopback port nothing listens on while this object lives: bound here and never listened on, so a connection
/// to it is refused, and no other process (nor a connection's own ephemeral source port) can take it meanwhile.
/// A fixed "unlikely" port was once answered by whatever else on the machine had it open.
struct UnlistenedPort {
  int fd = -1;
  int port = 0;
  UnlistenedPort() {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof a;
    if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size) != 0)
      throw std::runtime_error("test: could not bind a loopback port");
    port = ntohs(a.sin_port);
  }
  ~UnlistenedPort() { close(fd); }
  UnlistenedPort(const UnlistenedPort&) = delete;
  UnlistenedPort& operator=(const UnlistenedPort&) = delete;
};

}  // namespace

TEST(DistStore, ranks_as_threads_gather_and_broadcast_blobs) {
  const int n = 3, port = test_port(1);
  std::vector<std::vector<std::string>> gathered(n);
  std::vector<std::string> broadcasted(n);
  std::vector<std::thread> ranks;
  for (int r = 0; r < n; ++r)
    ranks.emplace_back([&, r] {
      dist::detail::Store s("127.0.0.1", port, r, n, std::chrono::seconds(10));
      gathered[static_cast<size_t>(r)] = s.all_gather("blob of rank " + std::to_string(r), "test");
      broadcasted[static_cast<size_t>(r)] = s.broadcast(r == 0 ? std::string(1000, 'x') : "ignored", "test");
      s.barrier("test");
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < n; ++r) {
    EXPECT_EQ(gathered[static_cast<size_t>(r)],
              (std::vector<std::string>{"blob of rank 0", "blob of rank 1", "blob of rank 2"}));
    EXPECT_EQ(broadcasted[static_cast<size_t>(r)], std::string(1000, 'x'));
  }
}

TEST(DistStore, rank_zero_names_the_ranks_that_never_joined) {
  const int port = test_port(2);
  std::thread one([&] { dist::detail::Store s("127.0.0.1", port, 1, 3, std::chrono::seconds(5)); });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    dist::detail::Store s("127.0.0.1", port, 0, 3, std::chrono::milliseconds(400));
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("rank(s) 2 of 3 did not join"), std::string::npos) << m;
    EXPECT_NE(m.find("MASTER_PORT"), std::string::npos) << m;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 3.0);
  one.join();
}

TEST(DistStore, a_rank_that_cannot_reach_rank_zero_says_where_it_looked) {
  try {
    const UnlistenedPort nobody;
    dist::detail::Store s("127.0.0.1", nobody.port, 1, 2, std::chrono::milliseconds(200));
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("could not reach rank 0 at 127.0.0.1:"), std::string::npos) << m;
  }
}

TEST(DistStore, a_connection_that_reached_itself_is_told_apart_from_one_to_another_process) {
  // A socket bound to a loopback port and connected to that same port: Linux completes it by simultaneous open.
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t size = sizeof a;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&a), &size), 0);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  EXPECT_TRUE(dist::detail::connected_to_itself(fd));
  close(fd);
  // Two ranks' real connection is not.
  const int port = test_port(6);
  std::thread one([&] { dist::detail::Store s("127.0.0.1", port, 1, 2, std::chrono::seconds(5)); });
  dist::detail::Store s("127.0.0.1", port, 0, 2, std::chrono::seconds(5));
  one.join();
}

TEST(DistStore, a_peer_that_exits_is_reported_not_waited_for) {
  const int port = test_port(4);
  std::thread one([&] { dist::detail::Store s("127.0.0.1", port, 1, 2, std::chrono::seconds(5)); });  // leaves
  dist::detail::Store s("127.0.0.1", port, 0, 2, std::chrono::seconds(5));
  one.join();
  try {
    s.barrier("barrier");
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("lost its connection to rank 1"), std::string::npos) << e.what();
  }
}

TEST(DistStore, departed_names_the_ranks_whose_connection_closed_and_only_those) {
  const int port = test_port(5), n = 3;
  std::atomic<int> joined{0};
  std::atomic<bool> release{false};
  std::string seen_by_two;
  // Rank 1 leaves at once; rank 2 stays until rank 0 has looked, then asks who left (rank 0 has not).
  std::thread one([&] {
    dist::detail::Store s("127.0.0.1", port, 1, n, std::chrono::seconds(5));
    ++joined;
  });
  std::thread two([&] {
    dist::detail::Store s("127.0.0.1", port, 2, n, std::chrono::seconds(5));
    ++joined;
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    seen_by_two = s.departed();
  });
  dist::detail::Store s("127.0.0.1", port, 0, n, std::chrono::seconds(5));
  one.join();
  std::string who;
  for (int i = 0; i < 200 && who.empty(); ++i) {  // the close travels through the loopback
    who = s.departed();
    if (who.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(who, "rank 1");
  release = true;
  two.join();
  EXPECT_EQ(seen_by_two, "");  // rank 0 is still there
  for (int i = 0; i < 200 && who != "rank 1, rank 2"; ++i) {
    who = s.departed();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(who, "rank 1, rank 2");
}

TEST(DistLaunch, the_environment_is_read_as_torchrun_sets_it) {
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "0", 1);
  auto e = dist::launch_environment();
  EXPECT_TRUE(e.from_launcher);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 0);  // torchrun sets it; unset here
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  EXPECT_EQ(dist::launch_environment().local_world_size, 2);
  unsetenv("LOCAL_WORLD_SIZE");
  setenv("RANK", "two", 1);
  EXPECT_THROW(dist::launch_environment(), ValueError);
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("LOCAL_RANK");
  e = dist::launch_environment();
  EXPECT_FALSE(e.from_launcher);
  EXPECT_EQ(e.world_size, 1);
}

TEST(DistGroup, ranks_work_on_the_cpu_when_the_machine_has_fewer_gpus_than_local_ranks) {
  // A group mixing GPU and CPU ranks would disagree on its engines (NCCL on some ranks only) and hang.
  setenv("RANK", "0", 1);  // as a launcher sets them
  setenv("WORLD_SIZE", "1", 1);
  setenv("LOCAL_WORLD_SIZE", std::to_string(num_gpus() + 1).c_str(), 1);
  {
    dist::ProcessGroup g;
    EXPECT_EQ(g.device(), cpu());
  }
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"}) unsetenv(name);
  dist::ProcessGroup g({.rank = 0, .world_size = 1});
  EXPECT_EQ(g.device(), num_gpus() > 0 ? gpu(0) : cpu());  // a GPU per local rank: rank 0 takes cuda:0
}

TEST(DistGroup, a_group_of_one_reduces_to_the_identity) {
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = cpu()});
  EXPECT_EQ(g.size(), 1);
  Array x = arange(10, float32);
  Array want = x.copy();
  for (auto op : {dist::ReduceOp::sum, dist::ReduceOp::avg, dist::ReduceOp::max, dist::ReduceOp::min}) {
    g.all_reduce(x, op).wait();
    EXPECT_TRUE(array_equal(x, want)) << dist::reduce_op_name(op);
  }
  Array out = empty({1, 10}, float32, cpu());
  g.all_gather(out, x).wait();
  EXPECT_TRUE(array_equal(out.reshape({10}), want));
  Array rs = empty({10}, float32, cpu());
  g.reduce_scatter(rs, out, dist::ReduceOp::sum).wait();
  EXPECT_TRUE(array_equal(rs, want));
  g.barrier();
  EXPECT_THROW(g.send(x, 0), ValueError);
  EXPECT_THROW(g.broadcast(x, 1), ValueError);
}

TEST(DistGroup, without_a_default_group_the_fix_is_named) {
  ASSERT_FALSE(dist::is_initialized());
  EXPECT_EQ(dist::rank(), 0);
  EXPECT_EQ(dist::world_size(), 1);
  Array x = zeros({2});
  try {
    dist::all_reduce(x);
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("init_process_group"), std::string::npos);
  }
  dist::init_process_group({.rank = 0, .world_size = 1, .device = cpu()});
  EXPECT_THROW(dist::init_process_group({.rank = 0, .world_size = 1, .device = cpu()}), DistError);
  dist::all_reduce(x);
  dist::destroy_process_group();
  EXPECT_FALSE(dist::is_initialized());
}

TEST(DistGroup, an_aborted_group_refuses_further_operations) {
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = cpu()});
  g.abort("test");
  EXPECT_TRUE(g.aborted());
  Array x = zeros({2});
  try {
    g.all_reduce(x);
    FAIL();
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("aborted"), std::string::npos) << e.what();
  }
}

TEST(Autograd, queued_callbacks_run_after_every_gradient_is_accumulated) {
  Array w = ones({3}).set_requires_grad();
  Array b = ones({3}).set_requires_grad();
  std::vector<std::string> order;
  w.register_post_accumulate_grad_hook([&](const Array&) {
    order.push_back("w");
    queue_callback([&] {
      // Every leaf has its gradient by now.
      order.push_back(b.grad().defined() && w.grad().defined() ? "callback: all ready" : "callback: too early");
    });
  });
  b.register_post_accumulate_grad_hook([&](const Array&) { order.push_back("b"); });
  sum(w * 2.0 + b).backward();
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order.back(), "callback: all ready");
  EXPECT_THROW(queue_callback([] {}), ValueError);
}

TEST(DistDdp, world_size_one_leaves_gradients_as_one_process_computes_them) {
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = cpu()});
  random::seed(3);
  auto net = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 7), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(7, 2)});
  random::seed(3);
  auto plain = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(5, 7), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(7, 2)});
  dist::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.00003}, &g);  // 31 bytes: a bucket per parameter
  EXPECT_EQ(ddp.buckets().size(), 4u);
  Array x = random::normal({6, 5});
  for (int step = 0; step < 2; ++step) {  // the second backward accumulates onto the first's gradients
    sum(ddp(x) * ddp(x)).backward();
    sum((*plain)(x) * (*plain)(x)).backward();
    const auto a = ddp.parameters(), b = plain->parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t k = 0; k < a.size(); ++k) EXPECT_TRUE(allclose(a[k].grad(), b[k].grad(), 1e-6, 1e-7)) << k;
  }
  EXPECT_EQ(ddp.state_dict().begin()->first, "module.0.weight");
}

TEST(DistDdp, frozen_parameters_are_left_without_gradients) {
  dist::ProcessGroup g({.rank = 0, .world_size = 1, .device = cpu()});
  auto net = std::make_shared<nn::Sequential>(
      std::vector<std::shared_ptr<nn::Module>>{std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Linear>(4, 2)});
  net->parameters()[0].set_requires_grad(false);  // the first layer's weight is frozen
  dist::DistributedDataParallel ddp(net, {}, &g);
  sum(ddp(random::normal({5, 3}))).backward();
  const auto ps = ddp.parameters();
  EXPECT_FALSE(ps[0].grad().defined());
  for (size_t k = 1; k < ps.size(); ++k) EXPECT_TRUE(ps[k].grad().defined()) << k;
}

TEST(DistSampler, shares_are_disjoint_padded_and_reshuffled_per_epoch) {
  const int64_t n = 10;
  std::vector<int> seen(n, 0);
  for (int r = 0; r < 3; ++r) {
    data::DistributedSampler s{.num_replicas = 3, .rank = r, .shuffle = true, .seed = 9};
    EXPECT_EQ(s.num_samples(n), 4);
    for (int64_t i : s.indices(n, 0)) ++seen[static_cast<size_t>(i)];
  }
  int twice = 0;
  for (int c : seen) {
    EXPECT_GE(c, 1);
    twice += c == 2;
  }
  EXPECT_EQ(twice, 2);  // 12 slots for 10 samples: two repeated
  data::DistributedSampler s{.num_replicas = 3, .rank = 1, .shuffle = true, .seed = 9};
  EXPECT_NE(s.indices(n, 0), s.indices(n, 1));
  EXPECT_EQ(s.indices(n, 1), s.indices(n, 1));
  data::DistributedSampler dropped{.num_replicas = 3, .rank = 2, .shuffle = false, .drop_last = true};
  EXPECT_EQ(dropped.indices(n, 0), (std::vector<int64_t>{2, 5, 8}));
  data::DistributedSampler bad{.num_replicas = 2, .rank = 2};
  EXPECT_THROW(bad.indices(n, 0), ValueError);
}

TEST(DistSampler, a_data_loader_with_a_sampler_yields_only_its_rank_s_samples) {
  Array x = arange(20, float32).reshape({20, 1});
  Array y = arange(20, int64);
  data::DistributedSampler s{.num_replicas = 2, .rank = 1, .shuffle = false};
  data::DataLoader loader(x, y, {.batch_size = 4, .sampler = s});
  EXPECT_EQ(loader.num_batches(), 3);
  std::vector<int64_t> got;
  for (const data::Batch& b : loader)
    for (int64_t v : b.y.to_vector<int64_t>()) got.push_back(v);
  EXPECT_EQ(got, (std::vector<int64_t>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19}));
  EXPECT_THROW(data::DataLoader(x, y, {.batch_size = 4, .shuffle = true, .sampler = s}), ValueError);
}
