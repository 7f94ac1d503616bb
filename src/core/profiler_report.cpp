// What a kiln::profiler::Profile reports: the default kernel classes, GPU busy time, the summary table and
// the Chrome trace (include/kiln/profiler.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kiln/io.hpp"
#include "kiln/profiler.hpp"

namespace kiln::profiler {
namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// kiln's reduction kernels, its fused kernels that end in a reduction and its rows kernels all carry
// "_k<kept axes>_r<reduced axes>" (src/cuda/codegen_reduce.cpp, codegen_fusion.cpp); elementwise names never do.
bool has_reduce_axes(std::string_view name) {
  const auto after_digits = [&](size_t j) {
    while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
    return j;
  };
  for (size_t i = name.find("_k"); i != std::string_view::npos; i = name.find("_k", i + 1)) {
    const size_t j = after_digits(i + 2);
    if (j > i + 2 && name.substr(j, 2) == "_r" && after_digits(j + 2) > j + 2) return true;
  }
  return false;
}

// A kiln kernel: kiln_<op>_<dtypes>_<layout> (elementwise), kiln_copy_..., kiln_sequence_... (arange),
// kiln_<reduction>_..._k<n>_r<n>, kiln_fused_<graph>_..., kiln_matmul_tiled_<dtype>, kiln_random_<dtype>,
// kiln_check_range (index checks).
std::string classify_kiln(std::string_view name) {
  if (name.starts_with("kiln_matmul")) return "gemm";
  if (name.starts_with("kiln_copy_")) return "copy";
  if (name.starts_with("kiln_random") || name.starts_with("kiln_philox")) return "random";
  if (has_reduce_axes(name)) return "reduction";
  return "elementwise";
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string shorten(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

struct Group {
  int64_t count = 0, total_ns = 0, bytes = 0;
};

// Groups ordered by total time, longest first (ties by name, so the order is stable).
std::vector<std::pair<std::string, Group>> by_total(const std::map<std::string, Group>& groups) {
  std::vector<std::pair<std::string, Group>> rows(groups.begin(), groups.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.total_ns > b.second.total_ns; });
  return rows;
}

double ms(int64_t ns) { return static_cast<double>(ns) * 1e-6; }
double us(int64_t ns) { return static_cast<double>(ns) * 1e-3; }

// One table of timed groups: calls, total ms, [% of `share_of`], mean us, name.
void timed_table(std::string& out, const std::string& title, const std::map<std::string, Group>& groups,
                 int64_t share_of, int max_rows, const char* empty) {
  out += "\n" + title + "\n";
  if (groups.empty()) {
    out += fmt::format("  ({})\n", empty);
    return;
  }
  const bool share = share_of > 0;
  out += share ? fmt::format("  {:>7}  {:>10}  {:>6}  {:>10}  {}\n", "calls", "total ms", "%", "mean us", "name")
               : fmt::format("  {:>7}  {:>10}  {:>10}  {}\n", "calls", "total ms", "mean us", "name");
  const auto rows = by_total(groups);
  const size_t shown = max_rows > 0 ? std::min(rows.size(), static_cast<size_t>(max_rows)) : rows.size();
  for (size_t i = 0; i < shown; ++i) {
    const auto& [name, g] = rows[i];
    const double mean = us(g.total_ns) / static_cast<double>(std::max<int64_t>(g.count, 1));
    const std::string n = shorten(name, 100);
    if (share)
      out += fmt::format("  {:>7}  {:>10.3f}  {:>5.1f}%  {:>10.2f}  {}\n", g.count, ms(g.total_ns),
                         100.0 * static_cast<double>(g.total_ns) / static_cast<double>(share_of), mean, n);
    else
      out += fmt::format("  {:>7}  {:>10.3f}  {:>10.2f}  {}\n", g.count, ms(g.total_ns), mean, n);
  }
  if (shown < rows.size()) out += fmt::format("  ... {} more\n", rows.size() - shown);
}

std::string bytes_str(int64_t b) {
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.2f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

}  // namespace

std::string default_classifier(std::string_view kernel_name) {
  if (kernel_name.starts_with("kiln_")) return classify_kiln(kernel_name);
  const std::string n = lower(kernel_name);
  // Attention before the rest: cuDNN's SDPA kernels also say "fprop", flash kernels may say "gemm".
  if (contains(n, "attention") || contains(n, "attn") || contains(n, "fmha") || contains(n, "flash") ||
      contains(n, "sdpa"))
    return "attention";
  // Convolutions before gemm: cuDNN's are implicit gemms (sm90_xmma_fprop_implicit_gemm_...).
  if (contains(n, "conv") || contains(n, "fprop") || contains(n, "dgrad") || contains(n, "wgrad") ||
      contains(n, "implicit_gemm") || contains(n, "winograd"))
    return "convolution";
  if (contains(n, "gemm") || contains(n, "gemv") || contains(n, "cutlass") || contains(n, "xmma") ||
      contains(n, "nvjet") || contains(n, "cublas") || contains(n, "splitkreduce"))
    return "gemm";
  if (n.starts_with("bn_") || contains(n, "batch_norm") || contains(n, "batchnorm") || contains(n, "bn_fw") ||
      contains(n, "bn_bw") || contains(n, "layer_norm") || contains(n, "layernorm") || contains(n, "rms_norm") ||
      contains(n, "rmsnorm"))
    return "normalization";
  if (contains(n, "sort")) return "sort";
  if (contains(n, "pool")) return "pooling";
  if (n.starts_with("scan_") || contains(n, "reduce") || contains(n, "reduction") || contains(n, "softmax"))
    return "reduction";
  if (contains(n, "copy") || contains(n, "transpose")) return "copy";
  if (contains(n, "random") || contains(n, "philox") || contains(n, "curand")) return "random";
  if (contains(n, "elementwise")) return "elementwise";
  return "other";
}

int64_t Profile::gpu_busy_ns() const {
  std::vector<std::pair<int64_t, int64_t>> spans;
  spans.reserve(kernels.size() + transfers.size());
  for (const KernelRecord& k : kernels) spans.emplace_back(k.start_ns, k.end_ns);
  for (const TransferRecord& t : transfers) spans.emplace_back(t.start_ns, t.end_ns);
  std::sort(spans.begin(), spans.end());
  int64_t busy = 0, open = 0, close = 0;
  bool any = false;
  for (const auto& [b, e] : spans) {
    if (!any || b > close) {
      if (any) busy += close - open;
      open = b;
      close = e;
      any = true;
    } else {
      close = std::max(close, e);
    }
  }
  if (any) busy += close - open;
  return busy;
}

int64_t Profile::memcpy_bytes() const {
  int64_t bytes = 0;
  for (const TransferRecord& t : transfers)
    if (t.kind != "memset") bytes += t.bytes;
  return bytes;
}

std::string Profile::summary(const Classifier& classify, int max_rows) const {
  std::map<std::string, Group> names, classes, kinds, host_ranges, apis;
  int64_t kernel_ns = 0;
  for (const KernelRecord& k : kernels) {
    Group& g = names[k.name];
    ++g.count;
    g.total_ns += k.duration_ns();
    kernel_ns += k.duration_ns();
    if (classify) {
      Group& c = classes[classify(k.name)];
      ++c.count;
      c.total_ns += k.duration_ns();
    }
  }
  int64_t copies = 0, memsets = 0;
  for (const TransferRecord& t : transfers) {
    Group& g = kinds[t.kind];
    ++g.count;
    g.total_ns += t.duration_ns();
    g.bytes += t.bytes;
    ++(t.kind == "memset" ? memsets : copies);
  }
  for (const RangeRecord& r : ranges) {
    Group& g = host_ranges[r.name];
    ++g.count;
    g.total_ns += r.duration_ns();
  }
  for (const ApiRecord& a : api_calls) {
    Group& g = apis[a.name];
    ++g.count;
    g.total_ns += a.duration_ns();
  }
  const int64_t busy = gpu_busy_ns(), wall = wall_ns();
  std::string out = fmt::format(
      "kiln profile: wall {:.3f} ms, GPU busy {:.3f} ms ({:.1f}% of wall), {} kernels, "
      "{} copies ({}), {} memsets\n",
      ms(wall), ms(busy), wall > 0 ? 100.0 * static_cast<double>(busy) / static_cast<double>(wall) : 0.0,
      kernels.size(), copies, bytes_str(memcpy_bytes()), memsets);
  if (!gpu_note.empty()) out += gpu_note + "\n";
  timed_table(out, "Kernels by name (% of kernel time)", names, std::max<int64_t>(kernel_ns, 1), max_rows,
              "no kernels");
  if (classify && !classes.empty())
    timed_table(out, "Kernels by class (% of kernel time)", classes, std::max<int64_t>(kernel_ns, 1), 0, "");
  if (!kinds.empty()) {
    out += "\nCopies and memsets\n";
    out += fmt::format("  {:>7}  {:>10}  {:>12}  {}\n", "count", "total ms", "bytes", "kind");
    for (const auto& [kind, g] : by_total(kinds))
      out += fmt::format("  {:>7}  {:>10.3f}  {:>12}  {}\n", g.count, ms(g.total_ns), bytes_str(g.bytes), kind);
  }
  if (!host_ranges.empty()) timed_table(out, "Host ranges", host_ranges, 0, max_rows, "");
  if (!apis.empty()) timed_table(out, "CUDA API calls (host time)", apis, 0, max_rows, "");
  return out;
}

std::string Profile::chrome_trace() const {
  using nlohmann::json;
  // Fixed process ids, named by metadata events: the trace describes one process and its GPUs.
  constexpr int kHostPid = 1, kGpuPid = 2;
  const auto ts = [&](int64_t t) { return static_cast<double>(t - start_ns) * 1e-3; };
  const auto dur = [](int64_t b, int64_t e) { return static_cast<double>(std::max<int64_t>(e - b, 0)) * 1e-3; };
  // A GPU thread per (device, stream): CUPTI's stream ids are small per device.
  const auto gpu_tid = [](int device, uint32_t stream) { return int64_t{device} * 1000000 + stream; };
  json events = json::array();
  const auto meta = [&](const char* what, int pid, int64_t tid, const std::string& name) {
    json e = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
    if (tid >= 0) e["tid"] = tid;
    events.push_back(std::move(e));
  };
  meta("process_name", kHostPid, -1, "host (pid " + std::to_string(::getpid()) + ")");
  meta("process_name", kGpuPid, -1, "GPU");
  std::map<int64_t, std::string> gpu_threads;
  std::map<uint32_t, bool> host_threads;
  for (const KernelRecord& k : kernels) {
    const int64_t tid = gpu_tid(k.device, k.stream);
    gpu_threads[tid] = fmt::format("cuda:{} stream {}", k.device, k.stream);
    events.push_back({{"name", k.name},
                      {"cat", "kernel"},
                      {"ph", "X"},
                      {"ts", ts(k.start_ns)},
                      {"dur", dur(k.start_ns, k.end_ns)},
                      {"pid", kGpuPid},
                      {"tid", tid},
                      {"args",
                       {{"device", k.device},
                        {"stream", k.stream},
                        {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                        {"block", {k.block[0], k.block[1], k.block[2]}},
                        {"correlation", k.correlation}}}});
  }
  for (const TransferRecord& t : transfers) {
    const int64_t tid = gpu_tid(t.device, t.stream);
    gpu_threads[tid] = fmt::format("cuda:{} stream {}", t.device, t.stream);
    events.push_back({{"name", t.kind == "memset" ? std::string("memset") : "memcpy " + t.kind},
                      {"cat", t.kind == "memset" ? "memset" : "memcpy"},
                      {"ph", "X"},
                      {"ts", ts(t.start_ns)},
                      {"dur", dur(t.start_ns, t.end_ns)},
                      {"pid", kGpuPid},
                      {"tid", tid},
                      {"args", {{"bytes", t.bytes}, {"device", t.device}, {"stream", t.stream}}}});
  }
  for (const RangeRecord& r : ranges) {
    host_threads[r.thread] = true;
    events.push_back({{"name", r.name},
                      {"cat", "range"},
                      {"ph", "X"},
                      {"ts", ts(r.start_ns)},
                      {"dur", dur(r.start_ns, r.end_ns)},
                      {"pid", kHostPid},
                      {"tid", r.thread},
                      {"args", {{"depth", r.depth}}}});
  }
  for (const ApiRecord& a : api_calls) {
    host_threads[a.thread] = true;
    events.push_back({{"name", a.name},
                      {"cat", "cuda_api"},
                      {"ph", "X"},
                      {"ts", ts(a.start_ns)},
                      {"dur", dur(a.start_ns, a.end_ns)},
                      {"pid", kHostPid},
                      {"tid", a.thread},
                      {"args", {{"correlation", a.correlation}}}});
  }
  for (const auto& [tid, name] : gpu_threads) meta("thread_name", kGpuPid, tid, name);
  for (const auto& [tid, seen] : host_threads) meta("thread_name", kHostPid, tid, "thread " + std::to_string(tid));
  // Range names come from users: bytes that are not UTF-8 are replaced rather than refused.
  return events.dump(-1, ' ', false, json::error_handler_t::replace);
}

void Profile::save_chrome_trace(const std::string& path) const {
  const std::string text = chrome_trace();
  write_file_atomically(path, {FileBytes{text.data(), text.size()}}, "kiln::profiler::Profile::save_chrome_trace");
}

}  // namespace kiln::profiler
