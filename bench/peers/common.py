"""Shared parts of the peer benchmarks (torch_bench.py, cupy_bench.py): the list of
workloads, cases and metrics of `kiln bench` (docs/bench-schema.md), the JSON record
writer, the command line, the timing helpers, and the library-independent halves of
some workloads (what is recorded from the timings).
Tensor creation, streams, graphs, pinned memory and the ops stay in each script.

Imports nothing beyond the standard library, so `--dry-run` works anywhere.
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

WORKLOADS = ["matmul", "timing", "transfer", "overlap", "logging", "elementwise", "reduction", "overhead",
             "fusion", "alloc", "multigpu", "train", "resnet50", "lstm", "generate", "gpt2"]

# The train workload (kiln bench train): seconds per epoch of Chainer's MNIST MLP (784-100-100-10, dropout 0.5)
# and of 784-1000-1000-10 with Adam on Fashion-MNIST's 60000 images, batch 100, as ../shared/anchors/peers_nn.py
# runs them: hostbatches = each batch gathered on the host and copied at the step; device = the set on the GPU,
# batches gathered there; graph = the whole step captured in a CUDA graph, batches copied into its static inputs;
# cpu_ = the same on the CPU (all cores), host batches.
TRAIN_CASES = ["mlp100_sgd_hostbatches", "mlp100_sgdm_device", "mlp1000_adam_device", "mlp1000_adam_graph",
               "cpu_mlp100_sgd", "cpu_mlp1000_adam"]
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"

# The resnet50 workload (kiln bench resnet50): torchvision's ResNet-50 at 224x224, float32, random weights;
# infer_fp32 = batch-128 inference on the GPU (eval, no grad), train_fp32 = one SGD-momentum training step at
# batch 128 on the GPU, *_bf16_cl = the same under bfloat16 autocast with network and images channels-last,
# cpu_infer_b16 = batch-16 inference on the CPU (all cores). cuDNN benchmark mode on and
# TF32 convolutions allowed (PyTorch's defaults), float32 matmul without TF32. --quick: batches 32 and 4.
RESNET_CASES = ["infer_fp32", "infer_fp32_folded", "train_fp32", "infer_bf16_cl", "infer_bf16_cl_folded", "train_bf16_cl",
                "cpu_infer_b16"]


# The lstm workload (kiln bench lstm): torch.nn.LSTM / nn::LSTM, 2 layers, input and hidden 1024, float32, T 256,
# batch 64, input (T, N, 1024); fwd_fp32 = forward under no_grad on the GPU, fwd_bwd_fp32 = forward, sum of the
# output, backward (every parameter and the input) on the GPU; cpu_fwd / cpu_fwd_bwd = the same with input and
# hidden 256, T 32, batch 16 on the CPU, and small_fwd_bwd_fp32 that shape on the GPU. --quick: T 64 on the GPU.
LSTM_CASES = ["fwd_fp32", "fwd_bwd_fp32", "small_fwd_bwd_fp32", "cpu_fwd", "cpu_fwd_bwd"]


# The generate workload (kiln bench generate): GPT-2 (Hugging Face's layout, float32, dropout 0) continuing a
# prompt of 16 tokens greedily with a KV cache, batch 1; gpt2_124m_token = 124M on the GPU, cpu_d6_token = llm.c's
# d6 (6 layers of 384) on the CPU; seconds per generated token.
GENERATE_CASES = ["gpt2_124m_token", "cpu_d6_token"]

# The gpt2 workload (kiln bench gpt2): one GPT-2 training step (zero_grad, forward, cross entropy, backward,
# clip 1.0, AdamW with weight decay 0.1 on matrices) as ../shared/anchors/peers_gpt.py runs it: 124M, vocabulary
# padded to 50304, batch 16 x 1024 random tokens, bfloat16 autocast on the GPU; llm.c's d6 (6 layers of 384),
# batch 4 x 128, float32 on the CPU. torch_bench.py --compile adds gpt2_124m_step_compiled (torch.compile).
GPT2_CASES = ["gpt2_124m_step", "cpu_gpt2_d6_step"]
GPT2_METRICS = ["seconds", "tokens_per_s", "first_fast_s"]


def gpt2_sizes(mode):
    """((batch, seq) on the GPU, (batch, seq) on the CPU, timed steps) of the gpt2 workload for a size mode."""
    return {"full": ((16, 1024), (4, 128), 20), "quick": ((4, 1024), (2, 128), 6), "smoke": ((2, 128), (2, 64), 2)}[mode]


def generate_tokens(mode):
    """(new tokens on the GPU, on the CPU) of the generate workload for a size mode."""
    return {"full": (256, 64), "quick": (32, 16), "smoke": (4, 4)}[mode]


def lstm_sizes(mode):
    """((T, N, input, hidden) on the GPU, the same on the CPU) of the lstm workload for a size mode."""
    return {"full": ((256, 64, 1024, 1024), (32, 16, 256, 256)), "quick": ((64, 64, 1024, 1024), (32, 16, 256, 256)),
            "smoke": ((8, 4, 32, 32), (4, 2, 16, 16))}[mode]


def resnet_sizes(mode):
    """(image side, GPU batch, CPU batch) of the resnet50 workload for a size mode."""
    return {"full": (224, 128, 16), "quick": (224, 32, 4), "smoke": (64, 2, 1)}[mode]

# metric -> (unit, higher_is_better)
METRICS = {
    "seconds": ("s", False),
    "tflops": ("TFLOP/s", True),
    "x": ("x", True),
    "gbps": ("GB/s", True),
    "hidden_copy_fraction": ("fraction", True),
    "us_per_op": ("us/op", False),
    "ms": ("ms", False),
    "x_floor": ("x", False),
    "us": ("us", False),
    "speedup": ("x", True),
    "tokens_per_s": ("tokens/s", True),
    "mfu": ("fraction", True),
    "peak_gib": ("GiB", False),
    "first_fast_s": ("s", False),
    "fused_ops": ("calls", True),
    "record_gib": ("GiB", False),
}


class Sizes:
    """Problem sizes: "full" (docs/bench-schema.md), "quick" (fewer matmul and transfer sizes, as
    `kiln bench --quick`) or "smoke" (tiny everything: checks that a script runs end to end in
    seconds before a long GPU run; its numbers mean nothing and scripts/compare says so)."""

    def __init__(self, mode="full"):
        if mode not in ("full", "quick", "smoke"):
            raise ValueError(f"unknown size mode {mode!r}")
        smoke = mode == "smoke"
        self.mode = mode
        self.matmul = {"full": [1024, 2048, 4096, 8192, 15360], "quick": [1024, 4096], "smoke": [64]}[mode]
        self.transfer_mb = {"full": [1, 16, 256, 1024], "quick": [16, 256], "smoke": [1]}[mode]
        self.timing_n = 128 if smoke else 4096
        self.overlap_chunks = 16
        self.overlap_chunk_n = (1 << 12) if smoke else 64 * (1 << 20) // 4  # 64 MiB of float32
        self.logging_steps = 50 if smoke else 1000
        self.elementwise_n = (1 << 16) if smoke else (1 << 28)
        self.fusion_n = (1 << 14) if smoke else (1 << 26)
        self.overhead_calls = 200 if smoke else 10000
        self.alloc_calls = 200 if smoke else 10000
        self.multigpu_n = 128 if smoke else 8192


def plan(sizes):
    """Every (workload, case, metric) a peer run writes, in order (a skipped one is written with value null)."""
    rows = []
    for n in sizes.matmul:
        rows += [("matmul", f"cpu_{n}", "seconds"), ("matmul", f"cpu_{n}", "tflops"),
                 ("matmul", f"gpu_{n}", "seconds"), ("matmul", f"gpu_{n}", "tflops"),
                 ("matmul", f"speedup_{n}", "x")]
    rows += [("timing", c, "seconds") for c in ("host_clock_no_sync", "host_clock_sync", "events")]
    for direction in ("h2d", "d2h"):
        for memory in ("pageable", "pinned"):
            rows += [("transfer", f"{direction}_{memory}_{mb}", "gbps") for mb in sizes.transfer_mb]
    rows += [("overlap", "serial", "seconds"), ("overlap", "overlapped", "seconds"), ("overlap", "copy_only", "seconds"),
             ("overlap", "overlapped", "hidden_copy_fraction")]
    rows += [("logging", "copy_every_step", "seconds"), ("logging", "on_device", "seconds")]
    rows += [("elementwise", c, "gbps") for c in ("copy", "add", "add_scalar")]
    rows += [("reduction", "sum", "gbps")]
    rows += [("overhead", c, "us_per_op") for c in ("small_add", "small_add_out", "graph_replay", "empty_launch")]
    rows += [("fusion", "eager", "ms"), ("fusion", "floor", "ms"), ("fusion", "eager", "x_floor"), ("fusion", "fused", "ms"),
             ("fusion", "fused", "x_floor")]
    rows += [("alloc", "alloc_free_1MB", "us")]
    rows += [("multigpu", "one_gpu", "seconds"), ("multigpu", "two_gpus", "seconds"), ("multigpu", "two_gpus", "speedup")]
    rows += [("train", c, "seconds") for c in TRAIN_CASES]
    rows += [("resnet50", c, "seconds") for c in RESNET_CASES]
    rows += [("lstm", c, "seconds") for c in LSTM_CASES]
    rows += [("generate", c, "seconds") for c in GENERATE_CASES]
    rows += [("gpt2", c, m) for c in GPT2_CASES for m in GPT2_METRICS]
    return rows


def parse_args(tool, argv=None):
    p = argparse.ArgumentParser(
        prog=f"{tool}_bench.py",
        description=f"The workloads of `kiln bench` in {'PyTorch' if tool == 'torch' else 'CuPy'}, "
                    f"written as the same JSON (tool \"{tool}\"). Needs a CUDA GPU; exits 0 with a note without one.")
    p.add_argument("--json", metavar="FILE", help="write the records to FILE")
    p.add_argument("--quick", action="store_true", help="fewer sizes (matmul 1024 4096, transfers 16 256 MiB)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes: check that the script runs end to end in seconds (numbers meaningless)")
    p.add_argument("--workloads", metavar="LIST", default=",".join(WORKLOADS),
                   help="comma-separated workloads to run (default: all): " + " ".join(WORKLOADS))
    p.add_argument("--dry-run", action="store_true", help="list the cases that would be measured, measure nothing")
    p.add_argument("--data", metavar="DIR", default=os.environ.get("KILN_FASHION_MNIST", FASHION_MNIST_DIR),
                   help="Fashion-MNIST's .gz files for the train workload (default: $KILN_FASHION_MNIST, else "
                        f"{FASHION_MNIST_DIR}); without them it trains on random data of the same shape")
    p.add_argument("--compile", action="store_true",
                   help="gpt2 (torch only): also the step under torch.compile (gpt2_124m_step_compiled, with its wait)")
    p.add_argument("--cpu-only", action="store_true",
                   help="train (torch only): the CPU cases alone (cpu_mlp100_sgd, cpu_mlp1000_adam)")
    args = p.parse_args(argv)
    args.sizes = Sizes("smoke" if args.smoke else "quick" if args.quick else "full")
    args.workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    return args


def print_plan(tool, args):
    rows = [r for r in plan(args.sizes) if r[0] in args.workloads]
    mode = "" if args.sizes.mode == "full" else f" (--{args.sizes.mode})"
    print(f"{tool}_bench: {len(rows)} records{mode}:")
    for workload, case, metric in rows:
        unit, hib = METRICS[metric]
        print(f"  {workload:12s} {case:24s} {metric:22s} {unit:9s} {'higher' if hib else 'lower'} is better")


class Recorder:
    """Collects records and writes the JSON of docs/bench-schema.md."""

    def __init__(self, tool, version, device, sizes, host_threads=None):
        self.doc = {"tool": tool, "version": version, "device": device,
                    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "host_threads": host_threads or os.cpu_count(), "quick": sizes.mode == "quick",
                    "smoke": sizes.mode == "smoke", "records": []}
        self.sizes = sizes
        self.tool = tool

    def add(self, workload, case, metric, value, note=None, check=None):
        unit, hib = METRICS[metric]
        r = {"workload": workload, "case": case, "metric": metric, "unit": unit, "value": float(value),
             "higher_is_better": hib}
        if note:
            r["note"] = note
        if check:
            r["check"] = check
        self.doc["records"].append(r)
        extra = f"  [{check}]" if check and check != "ok" else ""
        print(f"  {workload:12s} {case:24s} {metric:22s} {value:14.6g} {unit}{extra}", flush=True)

    def skip(self, workload, case, metric, reason):
        unit, hib = METRICS[metric]
        self.doc["records"].append({"workload": workload, "case": case, "metric": metric, "unit": unit, "value": None,
                                    "higher_is_better": hib, "skipped": reason})
        print(f"  {workload:12s} {case:24s} {metric:22s} {'skipped':>14s}  ({reason})", flush=True)

    def skip_workload(self, workload, reason):
        for w, case, metric in plan(self.sizes):
            if w == workload and not self.has(w, case, metric):
                self.skip(w, case, metric, reason)

    def has(self, workload, case, metric):
        return any(r["workload"] == workload and r["case"] == case and r["metric"] == metric
                   for r in self.doc["records"])

    def missing(self, workloads):
        return [r for r in plan(self.sizes) if r[0] in workloads and not self.has(*r)]

    def write(self, path):
        with open(path, "w") as f:
            json.dump(self.doc, f, indent=1)
            f.write("\n")
        print(f"wrote {len(self.doc['records'])} records to {path}")


class Timer:
    """Timing as ../shared/anchors/peers.py does it: device work between two events recorded in the
    stream (median after warm-up), host wall time around a call that ends in a device synchronise."""

    def __init__(self, synchronize, new_event, elapsed_ms):
        self.synchronize = synchronize    # () -> None: waits for every stream of the device
        self.new_event = new_event        # () -> event with .record() and .synchronize()
        self.elapsed_ms = elapsed_ms      # (start, end) -> float

    def events(self, fn, warm=3, rep=20):
        """Median seconds of `rep` calls of fn, each between two events, after `warm` calls."""
        for _ in range(warm):
            fn()
        self.synchronize()
        samples = []
        for _ in range(rep):
            start, end = self.new_event(), self.new_event()
            start.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(self.elapsed_ms(start, end) / 1e3)
        return statistics.median(samples)

    def wall(self, fn, warm=2, rep=5):
        """Median host seconds of fn() followed by a device synchronise, after `warm` calls."""
        for _ in range(warm):
            fn()
        self.synchronize()
        samples = []
        for _ in range(rep):
            t0 = time.perf_counter()
            fn()
            self.synchronize()
            samples.append(time.perf_counter() - t0)
        return statistics.median(samples)

    @staticmethod
    def median_of(fn, rep=5):
        """Median of `rep` calls of fn, which returns the seconds it measured itself, after one warm-up call."""
        fn()
        return statistics.median([fn() for _ in range(rep)])


def host_median(fn, warm, rep):
    """(median seconds, last result) of a synchronous host call (the CPU side of matmul)."""
    for _ in range(warm):
        fn()
    samples = []
    result = None
    for _ in range(rep):
        t0 = time.perf_counter()
        result = fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), result


def cpu_matmul_reps(n):
    """(warm-up, repeats) for the CPU matmul: the large sizes take seconds each, and the BLAS thread
    pool is warm from the smaller sizes by then."""
    if n <= 2048:
        return 1, 5
    if n <= 4096:
        return 1, 3
    if n <= 8192:
        return 0, 2
    return 0, 1


def relative_error(got, want):
    """max |got - want| / max |want| of two NumPy arrays, in float64."""
    import numpy as np
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    scale = float(np.max(np.abs(want))) or 1.0
    return float(np.max(np.abs(got - want))) / scale


def check_text(ok, detail):
    return "ok" if ok else detail


def failure_reason(e):
    """What a failed part is recorded with: the exception's type and the first line of its message (160 characters)."""
    text = str(e)
    return f"{type(e).__name__}: {text.splitlines()[0][:160] if text else ''}"


def timing(rec, timer, synchronize, matmul):
    """The timing workload: `matmul()` (queues one matmul) timed wrongly (host clock around the launch only, each
    sample from an idle GPU), with the host clock and a synchronise, and with events (20 samples each)."""
    for _ in range(3):
        matmul()
    no_sync, with_sync = [], []
    for _ in range(20):
        synchronize()  # each sample starts from an idle GPU
        t0 = time.perf_counter()
        matmul()
        no_sync.append(time.perf_counter() - t0)  # the wrong way: only the launch
    synchronize()
    for _ in range(20):
        t0 = time.perf_counter()
        matmul()
        synchronize()
        with_sync.append(time.perf_counter() - t0)
    rec.add("timing", "host_clock_no_sync", "seconds", statistics.median(no_sync))
    rec.add("timing", "host_clock_sync", "seconds", statistics.median(with_sync))
    rec.add("timing", "events", "seconds", timer.events(matmul, warm=3, rep=20))


def record_overlap(rec, serial, overlapped, copy_only, ok):
    """The overlap records from the three pipeline times (seconds) and whether the outputs were right."""
    check = check_text(ok, "output chunks differ from the same ops run directly")
    rec.add("overlap", "serial", "seconds", serial, check=check)
    rec.add("overlap", "overlapped", "seconds", overlapped, check=check)
    rec.add("overlap", "copy_only", "seconds", copy_only)
    hidden = min(1.0, max(0.0, (serial - overlapped) / copy_only))  # as `kiln bench`: clamped to [0, 1]
    rec.add("overlap", "overlapped", "hidden_copy_fraction", hidden)


def record_fusion(rec, n, eager_ms, copy_gbps, fused, label):
    """The fusion records: eager, the floor (2*4*n bytes at `copy_gbps`), and the fused chain. `fused()` compiles
    the fused chain (outside any timing) and returns (seconds, relative error against eager); when it raises,
    the fused records are skipped with "<label> failed: <reason>"."""
    floor_ms = 2 * 4 * n / (copy_gbps * 1e9) * 1e3
    rec.add("fusion", "eager", "ms", eager_ms)
    rec.add("fusion", "floor", "ms", floor_ms, note="2*4*2^26 bytes at the device copy bandwidth")
    rec.add("fusion", "eager", "x_floor", eager_ms / floor_ms)
    try:
        fused_s, err = fused()
    except Exception as e:  # torch.compile without Triton or a C compiler, a guard failure, a cupy.fuse error...
        reason = f"{label} failed: {failure_reason(e)}"
        rec.skip("fusion", "fused", "ms", reason)
        rec.skip("fusion", "fused", "x_floor", reason)
        return
    check = check_text(err < 1e-5, f"{label} result differs from eager by {err:.2e}")
    rec.add("fusion", "fused", "ms", fused_s * 1e3, note=label, check=check)
    rec.add("fusion", "fused", "x_floor", fused_s * 1e3 / floor_ms)


def multigpu(rec, sync_all, one_gpu, two_gpus):
    """The multigpu records: wall time (ending when every GPU is synchronised) of one_gpu() and two_gpus()."""
    timer = Timer(sync_all, None, None)
    one = timer.wall(one_gpu)
    two = timer.wall(two_gpus)
    rec.add("multigpu", "one_gpu", "seconds", one)
    rec.add("multigpu", "two_gpus", "seconds", two)
    rec.add("multigpu", "two_gpus", "speedup", one / two)


def finish(rec, args):
    missing = rec.missing(args.workloads)
    for workload, case, metric in missing:  # a workload that failed part-way: say so in the file
        rec.skip(workload, case, metric, "not measured (see the log for the error)")
    if args.json:
        rec.write(args.json)
    return 0


def run_workloads(rec, args, table):
    """Runs each selected workload; an exception skips that workload's remaining records with the reason."""
    for name in args.workloads:
        print(f"== {name}", flush=True)
        try:
            table[name]()
        except Exception as e:  # a failing workload must not lose the others' numbers
            reason = failure_reason(e)
            print(f"  {name} failed: {reason}", file=sys.stderr, flush=True)
            rec.skip_workload(name, reason)


def read_idx(path):
    """(shape, bytes) of an IDX file (gzip or not): its dimensions and its unsigned-byte payload."""
    import gzip
    import struct
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, dtype, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    shape = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return shape, data[4 + 4 * ndim:]


def fashion_mnist_files(directory):
    """The training images' and labels' paths in `directory` (.gz or not), or None when either is missing."""
    found = []
    for stem in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"):
        path = next((os.path.join(directory, stem + ext) for ext in (".gz", "")
                     if os.path.exists(os.path.join(directory, stem + ext))), None)
        if path is None:
            return None
        found.append(path)
    return found
