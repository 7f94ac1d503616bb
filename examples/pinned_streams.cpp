// Walkthrough 5: overlap transfers and compute with pinned memory, two streams and events.
//
//   build/cuda/examples/example_pinned_streams
//
// Chunks of a host array go to the GPU, are computed on (x = x * 2 + 1, ten times) and
// come back. One stream ("copies") does the host->device and device->host copies, the
// other ("compute") the arithmetic; events order them: compute on chunk i waits for its
// upload, the download of chunk i waits for its compute. The next chunk is uploaded
// while this one computes, and the previous one downloads meanwhile, so copies in both
// directions hide behind compute. Copies are asynchronous only from and to pinned
// (page-locked) host memory. The results are checked against the same arithmetic on
// the CPU; without a GPU the same pipeline runs on the CPU, where streams are no-ops.
#include <kiln/kiln.hpp>

#include <cstdio>
#include <string>
#include <vector>

using namespace kiln;

namespace {

constexpr int kChunks = 8;
constexpr int kSteps = 10;

// x = x * 2 + 1, kSteps times, in place on the current stream.
void compute(const Array& x) {
  for (int s = 0; s < kSteps; ++s) {
    multiply(x, 2.0f, x);
    add(x, 1.0f, x);
  }
}

// Runs the pipeline on streams `copies` and `work` (the same stream gives the serial
// version) and returns the milliseconds between its first and last event.
double pipeline(Device d, const Stream& copies, const Stream& work, const Array& h_in, const Array& h_out,
                const std::vector<Array>& buffers) {
  std::vector<Event> uploaded, computed;
  for (int i = 0; i < kChunks; ++i) {
    uploaded.push_back(Event::create(d, /*timing=*/false));
    computed.push_back(Event::create(d, /*timing=*/false));
  }
  Event start = Event::create(d), end = Event::create(d);
  auto upload = [&](int i) {
    StreamGuard g(copies);
    Array buffer = buffers[i];  // a handle to the same storage
    buffer.copy_from(h_in[i], {.non_blocking = true});  // pinned -> device: returns at once
    uploaded[i].record(copies);
  };
  start.record(copies);
  upload(0);
  for (int i = 0; i < kChunks; ++i) {
    if (i + 1 < kChunks) upload(i + 1);  // prefetch the next chunk while this one computes
    uploaded[i].wait(work);              // compute waits for this chunk's upload (the host does not)
    {
      StreamGuard g(work);
      compute(buffers[i]);
      computed[i].record(work);
    }
    computed[i].wait(copies);  // the download waits for the compute
    {
      StreamGuard g(copies);
      Array row = h_out[i];
      row.copy_from(buffers[i], {.non_blocking = true});  // device -> pinned: returns at once
    }
  }
  end.record(copies);  // the last download is the last work of all
  end.synchronize();   // only now may the host read h_out
  return start.elapsed_ms(end);
}

}  // namespace

int main() {
  const bool have_gpu = num_gpus() > 0;
  const Device d = try_gpu();
  const int64_t n = have_gpu ? (int64_t{1} << 22) : (int64_t{1} << 14);  // 16 MiB chunks on a GPU
  if (!have_gpu) std::printf("no GPU: running the same pipeline on the CPU (streams and events are no-ops there)\n");

  random::seed(7);
  Array source = random::uniform({kChunks, n}, -1.0, 1.0, float32, cpu());
  // Page-locked buffers on both ends of the copies (pinned memory needs the CUDA backend).
  Array h_in = have_gpu ? source.pin_memory() : source;
  Array h_out = empty({kChunks, n}, float32, cpu(), {.pinned = have_gpu});
  std::printf("host buffers pinned: %s, %d chunks of %.2f MiB\n", h_in.is_pinned() && h_out.is_pinned() ? "yes" : "no",
              kChunks, static_cast<double>(n) * 4 / 1048576.0);

  // The reference: the same float32 operations on the CPU (each step rounds once, exactly as on the GPU).
  Array want = source.copy();
  compute(want);
  const std::vector<float> want_values = want.to_vector<float>();

  Stream copies = Stream::create(d, {.non_blocking = true});
  Stream work = Stream::create(d, {.non_blocking = true});
  std::vector<Array> buffers;
  {
    StreamGuard g(work);  // device buffers belong to the compute stream; copies record their use
    for (int i = 0; i < kChunks; ++i) buffers.push_back(empty({n}, float32, d));
  }

  int failures = 0;
  auto run = [&](const char* name, const Stream& c, const Stream& w) {
    h_out.fill(0);
    (void)pipeline(d, c, w, h_in, h_out, buffers);  // warm-up: kernels compiled, memory touched
    h_out.fill(0);
    double ms = pipeline(d, c, w, h_in, h_out, buffers);
    std::vector<float> got = h_out.to_vector<float>();
    int64_t wrong = 0;
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want_values[i];
    std::printf("%-10s %8.3f ms  (%lld of %zu values wrong)\n", name, ms, static_cast<long long>(wrong), got.size());
    if (wrong) ++failures;
    return ms;
  };
  double serial = run("one stream", work, work);
  double overlapped = run("two streams", copies, work);
  if (have_gpu)
    std::printf("overlap saved %.0f%% of the serial time (copies in both directions hidden behind compute)\n",
                100.0 * (serial - overlapped) / serial);

  if (failures) {
    std::fprintf(stderr, "example_pinned_streams: results differ from the CPU reference\n");
    return 1;
  }
  std::printf("example_pinned_streams: all results match the CPU reference\n");
  return 0;
}
