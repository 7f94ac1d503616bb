#!/usr/bin/env python3
"""The workloads of `kiln bench` in CuPy, written as the same JSON (tool "cupy").

    python3 bench/peers/cupy_bench.py [--quick|--smoke] [--json FILE] [--workloads matmul,fusion] [--dry-run]

Methods follow ../shared/anchors/peers.py (the reference baselines): GPU work is timed
between two CUDA events (median after warm-up), host overheads and transfers by the
host clock around a call that ends in a device synchronise. float32 throughout, TF32
off (CUPY_TF32=0). CuPy has no CPU backend: the matmul "cpu_N" cases use NumPy, CuPy's
CPU counterpart. Without CuPy or a GPU it prints why and exits 0. See bench/README.md.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main(argv=None):
    args = common.parse_args("cupy", argv)
    if args.dry_run:
        common.print_plan("cupy", args)
        return 0
    os.environ["CUPY_TF32"] = "0"  # read when CuPy loads: plain float32 GEMM, as kiln's default
    try:
        import numpy
        import cupy
        import cupyx
    except ImportError as e:
        print(f"cupy_bench: CuPy (or NumPy) is not installed ({e}); nothing measured. "
              "Run this on the GPU machine, where python3 has cupy.")
        return 0
    try:
        gpus = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # no driver: CUDARuntimeError
        print(f"cupy_bench: CuPy sees no CUDA GPU ({common.failure_reason(e)}); nothing measured.")
        return 0
    if gpus == 0:
        print("cupy_bench: CuPy sees no CUDA GPU; nothing measured.")
        return 0
    return CupyBench(numpy, cupy, cupyx, args).run()


class CupyBench:
    def __init__(self, np, cp, cupyx, args):
        self.np, self.cp, self.cupyx = np, cp, cupyx
        self.args = args
        self.sizes = args.sizes
        name = cp.cuda.runtime.getDeviceProperties(0)["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        self.rec = common.Recorder("cupy", cp.__version__, name, args.sizes)
        self.rec.doc["numpy_version"] = np.__version__
        self.timer = common.Timer(self.sync, lambda: cp.cuda.Event(), cp.cuda.get_elapsed_time)
        self.copy_gbps = None

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def run(self):
        print(f"cupy {self.cp.__version__} (NumPy {self.np.__version__}) on {self.rec.doc['device']}")
        table = {name: (lambda n=name: self.workload(n)) for name in common.WORKLOADS}
        common.run_workloads(self.rec, self.args, table)
        return common.finish(self.rec, self.args)

    def workload(self, name):
        try:
            with self.cp.cuda.Device(0):
                getattr(self, name)()
        finally:
            self.sync()
            self.cp.get_default_memory_pool().free_all_blocks()
            self.cp.get_default_pinned_memory_pool().free_all_blocks()

    def randn(self, *shape):
        return self.cp.random.standard_normal(shape, dtype=self.cp.float32)

    # ------------------------------------------------------------------ matmul
    def matmul(self):
        np, cp = self.np, self.cp
        rng = np.random.default_rng(0)
        for n in self.sizes.matmul:
            ha = rng.standard_normal((n, n), dtype=np.float32)
            hb = rng.standard_normal((n, n), dtype=np.float32)
            warm, rep = common.cpu_matmul_reps(n)
            cpu_s, hc = common.host_median(lambda: ha @ hb, warm, rep)
            a, b = cp.asarray(ha), cp.asarray(hb)
            gpu_s = self.timer.events(lambda: a @ b, warm=2, rep=5)
            err = common.relative_error((a @ b).get(), hc)
            check = common.check_text(err < 1e-4, f"GPU vs CPU relative error {err:.2e}")
            flops = 2.0 * n ** 3
            self.rec.add("matmul", f"cpu_{n}", "seconds", cpu_s, note="NumPy (CuPy's CPU counterpart), all threads")
            self.rec.add("matmul", f"cpu_{n}", "tflops", flops / cpu_s / 1e12, note="NumPy")
            self.rec.add("matmul", f"gpu_{n}", "seconds", gpu_s, check=check)
            self.rec.add("matmul", f"gpu_{n}", "tflops", flops / gpu_s / 1e12)
            self.rec.add("matmul", f"speedup_{n}", "x", cpu_s / gpu_s, note="NumPy time / CuPy time")

    # ------------------------------------------------------------------ timing
    def timing(self):
        n = self.sizes.timing_n
        a, b = self.randn(n, n), self.randn(n, n)
        common.timing(self.rec, self.timer, self.sync, lambda: a @ b)

    # ------------------------------------------------------------------ transfer
    def transfer(self):
        np, cp, cupyx = self.np, self.cp, self.cupyx
        rng = np.random.default_rng(0)
        for mb in self.sizes.transfer_mb:
            n = mb * (1 << 20) // 4
            h = rng.random(n, dtype=np.float32)
            hp = cupyx.empty_pinned(n, dtype=np.float32)
            hp[...] = h
            d = cp.empty(n, dtype=cp.float32)
            rep = 5 if mb >= 256 else 20
            nbytes = 4.0 * n
            cases = [("h2d_pageable", lambda: d.set(h)),
                     ("h2d_pinned", lambda: d.set(hp)),  # cudaMemcpyAsync on the current stream
                     ("d2h_pageable", lambda: d.get(out=h)),
                     ("d2h_pinned", lambda: d.get(out=hp, blocking=False))]
            for name, fn in cases:
                s = self.timer.wall(fn, warm=2, rep=rep)
                self.rec.add("transfer", f"{name}_{mb}", "gbps", nbytes / s / 1e9)

    # ------------------------------------------------------------------ overlap
    def overlap(self):
        np, cp, cupyx = self.np, self.cp, self.cupyx
        chunks, n = self.sizes.overlap_chunks, self.sizes.overlap_chunk_n
        h_in = cupyx.empty_pinned((chunks, n), dtype=np.float32)
        cp.random.random((chunks, n), dtype=cp.float32).get(out=h_in)
        h_out = cupyx.empty_pinned((chunks, n), dtype=np.float32)
        bufs = [cp.empty(n, dtype=cp.float32) for _ in range(2)]
        streams = [cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)]

        def compute(x):
            for _ in range(10):
                cp.multiply(x, 2.0, out=x)
                cp.add(x, 1.0, out=x)

        def pipeline(nstreams, with_compute=True):
            main = cp.cuda.get_current_stream()
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(main)
            for s in streams[:nstreams]:
                s.wait_event(start)
            for i in range(chunks):
                k = i % nstreams
                s = streams[k]
                with s:  # stream k reuses buffer k, in stream order
                    bufs[k].set(h_in[i], stream=s)
                    if with_compute:
                        compute(bufs[k])
                    bufs[k].get(stream=s, out=h_out[i], blocking=False)
            for s in streams[:nstreams]:
                main.wait_event(s.record())
            end.record(main)
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) / 1e3

        def chunk_ok(i):
            ref = cp.asarray(h_in[i])
            compute(ref)
            return bool(np.array_equal(h_out[i], ref.get()))

        median_of = common.Timer.median_of
        copy_only = median_of(lambda: pipeline(1, with_compute=False))
        serial = median_of(lambda: pipeline(1))
        ok = chunk_ok(0)
        h_out[...] = 0
        overlapped = median_of(lambda: pipeline(2))
        ok = ok and chunk_ok(0) and chunk_ok(chunks - 1)
        common.record_overlap(self.rec, serial, overlapped, copy_only, ok)

    # ------------------------------------------------------------------ logging
    def logging(self):
        cp = self.cp
        steps = self.sizes.logging_steps
        # As `kiln bench`: x = tanh(x @ w) on 100x100, w ~ N(0, 0.1), logging ||x||_F every step.
        cp.random.seed(1)
        x0 = self.randn(100, 100)
        w = self.randn(100, 100) * 0.1

        def copy_every_step():
            norms = []
            x = x0
            for _ in range(steps):
                x = cp.tanh(x @ w)
                norms.append(float(cp.linalg.norm(x)))  # synchronises every step
            return norms

        def on_device():
            log = cp.empty(steps, dtype=cp.float32)
            x = x0
            for i in range(steps):
                x = cp.tanh(x @ w)
                log[i] = cp.linalg.norm(x)
            return log.get().tolist()  # one copy at the end

        out = {}
        t_every = self.timer.wall(lambda: out.__setitem__("every", copy_every_step()), warm=1, rep=5)
        t_device = self.timer.wall(lambda: out.__setitem__("device", on_device()), warm=1, rep=5)
        err = common.relative_error(out["device"], out["every"])
        check = common.check_text(err <= 1e-5, f"the two logs differ by {err:.2e}")
        self.rec.add("logging", "copy_every_step", "seconds", t_every, check=check)
        self.rec.add("logging", "on_device", "seconds", t_device, check=check)

    # ------------------------------------------------------------------ elementwise, reduction
    def measure_copy(self, n):
        a = self.randn(n)
        b = self.cp.empty_like(a)
        t = self.timer.events(lambda: b.data.copy_from_device_async(a.data, a.nbytes))  # cudaMemcpyAsync
        return 2 * 4 * n / t / 1e9

    def elementwise(self):
        cp = self.cp
        n = self.sizes.elementwise_n
        self.copy_gbps = self.measure_copy(n)
        self.rec.add("elementwise", "copy", "gbps", self.copy_gbps, note="cudaMemcpyAsync device to device")
        a, c = self.randn(n), self.randn(n)
        b = cp.empty_like(a)
        t = self.timer.events(lambda: cp.add(a, c, out=b))
        self.rec.add("elementwise", "add", "gbps", 3 * 4 * n / t / 1e9)
        t = self.timer.events(lambda: cp.add(a, 1.0, out=b))
        self.rec.add("elementwise", "add_scalar", "gbps", 2 * 4 * n / t / 1e9)

    def reduction(self):
        cp = self.cp
        n = self.sizes.elementwise_n
        a = self.randn(n)
        t = self.timer.events(lambda: a.sum())
        got, want = float(a.sum()), float(a.sum(dtype=cp.float64))
        ok = abs(got - want) <= 1e-4 * n ** 0.5
        self.rec.add("reduction", "sum", "gbps", 4 * n / t / 1e9, check=common.check_text(ok, f"sum {got} vs {want}"))

    # ------------------------------------------------------------------ overhead
    def overhead(self):
        cp = self.cp
        calls = self.sizes.overhead_calls
        x, y = self.randn(1000), self.randn(1000)

        def small_add():
            z = x
            for _ in range(calls):
                z = z + y
            return z

        def small_add_out():
            for _ in range(calls):
                cp.add(x, y, out=x)

        self.rec.add("overhead", "small_add", "us_per_op", self.timer.wall(small_add) / calls * 1e6)
        self.rec.add("overhead", "small_add_out", "us_per_op", self.timer.wall(small_add_out) / calls * 1e6)
        # A CUDA graph of 100 adds captured on a stream (cupy.cuda.Graph), replayed 100 times.
        try:
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                for _ in range(3):
                    cp.add(x, y, out=x)  # compiles and loads the kernel before the capture
                s.synchronize()
                s.begin_capture()
                for _ in range(100):
                    cp.add(x, y, out=x)
                graph = s.end_capture()

            def replay():
                for _ in range(calls // 100):
                    graph.launch(s)

            self.rec.add("overhead", "graph_replay", "us_per_op", self.timer.wall(replay) / calls * 1e6,
                         note="cupy.cuda.Graph from stream capture")
        except Exception as e:  # older CuPy without stream capture
            self.rec.skip("overhead", "graph_replay", "us_per_op",
                          f"CUDA graph capture failed: {common.failure_reason(e)}")
        empty = cp.RawKernel(r'extern "C" __global__ void kiln_peer_empty() {}', "kiln_peer_empty")

        def empty_launch():
            for _ in range(calls):
                empty((1,), (32,), ())

        self.rec.add("overhead", "empty_launch", "us_per_op", self.timer.wall(empty_launch) / calls * 1e6,
                     note="cupy.RawKernel")

    # ------------------------------------------------------------------ fusion
    def fusion(self):
        cp = self.cp
        n = self.sizes.fusion_n
        x = self.randn(n)

        def chain(x):
            return cp.tanh(x * 1.5 + 0.3) * x - cp.exp(-x * x) * 0.5

        eager_ms = self.timer.events(lambda: chain(x)) * 1e3
        if self.copy_gbps is None:  # elementwise not run: measure the copy bandwidth here, as there
            self.copy_gbps = self.measure_copy(self.sizes.elementwise_n)

        def fused():
            fused_chain = cp.fuse(chain)
            err = common.relative_error(fused_chain(x).get(), chain(x).get())  # compiles here, outside the timing
            return self.timer.events(lambda: fused_chain(x)), err

        common.record_fusion(self.rec, n, eager_ms, self.copy_gbps, fused, "cupy.fuse")

    # ------------------------------------------------------------------ alloc
    def alloc(self):
        cp = self.cp
        calls = self.sizes.alloc_calls

        def alloc_free():
            for _ in range(calls):
                cp.empty(1 << 18, dtype=cp.float32)  # 1 MiB, back to the memory pool at once

        self.rec.add("alloc", "alloc_free_1MB", "us", self.timer.wall(alloc_free) / calls * 1e6)

    # ------------------------------------------------------------------ multigpu
    def multigpu(self):
        cp = self.cp
        gpus = cp.cuda.runtime.getDeviceCount()
        if gpus < 2:
            self.rec.skip_workload("multigpu", f"needs two GPUs, this machine has {gpus}")
            return
        n = self.sizes.multigpu_n
        dev0, dev1 = cp.cuda.Device(0), cp.cuda.Device(1)
        with dev0:
            a0, b0 = self.randn(n, n), self.randn(n, n)
        with dev1:
            a1, b1 = cp.asarray(a0), cp.asarray(b0)

        def sync_all():
            for i in range(gpus):
                cp.cuda.Device(i).synchronize()

        def one_gpu():
            with dev0:
                for _ in range(10):
                    a0 @ b0
                    a0 @ b0

        def two_gpus():
            for _ in range(10):
                with dev0:
                    a0 @ b0
                with dev1:
                    a1 @ b1

        common.multigpu(self.rec, sync_all, one_gpu, two_gpus)

    # ------------------------------------------------------------------ train
    def train(self):
        self.rec.skip_workload("train", "CuPy has no autograd, layers or optimizers: PyTorch is the train peer")

    def resnet50(self):
        self.rec.skip_workload("resnet50", "CuPy has no autograd, layers or optimizers: PyTorch is the resnet50 peer")

    def lstm(self):
        self.rec.skip_workload("lstm", "CuPy has no autograd or recurrent layers: PyTorch is the lstm peer")

    def generate(self):
        self.rec.skip_workload("generate", "CuPy has no layers: PyTorch is the generate peer")

    def gpt2(self):
        self.rec.skip_workload("gpt2", "CuPy has no layers: PyTorch (and llm.c) are the gpt2 peers")


if __name__ == "__main__":
    sys.exit(main())
