// Writes a graph's random state (seed, base offset) before a replay: from the host's arguments,
// or, for a replay captured into another graph, from that graph's state plus the blocks it used before.
// (src/cuda/random.cpp launches it by this name, kGraphStateName.)
extern "C" __global__ void kiln_random_graph_state(unsigned long long* __restrict__ state,
                                                   const unsigned long long* __restrict__ source,
                                                   unsigned long long seed, unsigned long long offset) {
  state[0] = source ? source[0] : seed;
  state[1] = (source ? source[1] : 0ull) + offset;
}
