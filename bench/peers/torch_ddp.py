#!/usr/bin/env python3
"""bench/bench_dist.cpp's workloads in PyTorch, under torchrun, written as the same JSON.

    python3 -m torch.distributed.run --standalone --nproc_per_node=N bench/peers/torch_ddp.py [--quick] [--json FILE]
        [--workloads allreduce,ddp_mlp,ddp_resnet50,ddp_gpt2] [--mlp-batches 1000,4000]

allreduce: dist.all_reduce of 1 GiB float32 (NCCL), time and bus bandwidth; ddp_mlp: DistributedDataParallel
steps of the 784-1000-1000-10 MLP at batch 100 per GPU (SGD; the median of 5 windows of 300 steps); ddp_resnet50: torchvision's ResNet-50, batch 128
per GPU, 224x224, float32, SGD momentum 0.9, cudnn.benchmark on. --mlp-batches: the MLP's steps again at these
batches per GPU (records ddp_mlp_bB), as bench_dist's. ddp_gpt2: bench_dist's GPT-2 step in plain PyTorch
(nanoGPT's model: GPT-2 124M, vocabulary 50304, dropout 0, tied head, scaled_dot_product_attention), batch
16 x 1024 tokens per GPU (each rank's own random tokens), bfloat16 autocast, torch.optim.AdamW(fused=True) with
two parameter groups (weight decay 0.1 on the matrices, 0 on biases and LayerNorms), clip_grad_norm_ 1.0, DDP;
20 warm-up and 50 timed steps; records seconds and tokens_per_s (over all ranks); --quick: d6, batch 4 x 128.
Timed with CUDA events on rank 0 after a barrier, as bench_dist. Without torch or a GPU it says why and exits 0.
"""

import json
import os
import sys


def gpt2(n_layer, n_head, n_embd, vocab, positions):
    """nanoGPT's GPT-2 (bias, dropout 0, tanh GELU, tied head, normal(0, 0.02) initialisation); forward(idx,
    targets) returns the cross entropy."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1, self.ln_2 = nn.LayerNorm(n_embd), nn.LayerNorm(n_embd)
            self.c_attn, self.attn_proj = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)
            self.c_fc, self.mlp_proj = nn.Linear(n_embd, 4 * n_embd), nn.Linear(4 * n_embd, n_embd)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = (z.view(b, t, n_head, c // n_head).transpose(1, 2)
                       for z in self.c_attn(self.ln_1(x)).split(n_embd, dim=2))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, c)
            x = x + self.attn_proj(y)
            return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(vocab, n_embd), nn.Embedding(positions, n_embd)
            self.h = nn.ModuleList(Block() for _ in range(n_layer))
            self.ln_f = nn.LayerNorm(n_embd)
            self.lm_head = nn.Linear(n_embd, vocab, bias=False)
            self.lm_head.weight = self.wte.weight
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, 0.0, 0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            logits = self.lm_head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    return GPT()


def main():
    quick = "--quick" in sys.argv
    out = sys.argv[sys.argv.index("--json") + 1] if "--json" in sys.argv else ""
    wanted = (sys.argv[sys.argv.index("--workloads") + 1] if "--workloads" in sys.argv
              else "allreduce,ddp_mlp,ddp_resnet50,ddp_gpt2").split(",")
    mlp_batches = ([int(b) for b in sys.argv[sys.argv.index("--mlp-batches") + 1].split(",")]
                   if "--mlp-batches" in sys.argv else [])
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"torch_ddp: PyTorch is not installed ({e}); nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("torch_ddp: no CUDA GPU; nothing measured")
        return 0
    dist.init_process_group("nccl")
    rank, n = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    records = []

    def time_ms(fn, warmup, steps):
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            fn()
        stop.record()
        stop.synchronize()
        return start.elapsed_time(stop)

    if "allreduce" in wanted:
        elems = (1 << 24) if quick else (1 << 28)
        x = torch.ones(elems, device=dev)
        steps = 5 if quick else 20
        ms = time_ms(lambda: dist.all_reduce(x), 5, steps) / steps
        records.append({"workload": "allreduce", "metric": "seconds", "unit": "s", "value": ms / 1000})
        if n > 1:
            records.append({"workload": "allreduce", "metric": "busbw", "unit": "GB/s",
                            "value": elems * 4 * 2 * (n - 1) / n / (ms / 1000) / 1e9})
        del x

    def throughput(model, shape, classes, warmup, steps, momentum, windows=1):
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=momentum)
        xb = torch.randn(*shape, device=dev)
        yb = torch.randint(0, classes, (shape[0],), device=dev)

        def step():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(ddp(xb), yb).backward()
            opt.step()
        # The median of `windows` timings (as bench_dist: sub-millisecond steps move with the host's jitter).
        ms = sorted(time_ms(step, warmup if w == 0 else 0, steps) for w in range(windows))[windows // 2]
        return shape[0] * n * steps / (ms / 1000)

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(784, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 1000),
                              torch.nn.ReLU(), torch.nn.Linear(1000, 10)).to(dev)
    if "ddp_mlp" in wanted:
        records.append({"workload": "ddp_mlp", "metric": "throughput", "unit": "samples/s",
                        "value": throughput(mlp, (100, 784), 10, 20, 50 if quick else 300, 0.0, 1 if quick else 5)})
    for batch in mlp_batches:
        steps = 20 if quick else max(50, 30000 // batch)
        records.append({"workload": f"ddp_mlp_b{batch}", "metric": "throughput", "unit": "samples/s",
                        "value": throughput(mlp, (batch, 784), 10, 10, steps, 0.0, 1 if quick else 5)})
    if not quick and "ddp_resnet50" in wanted:
        try:
            import torchvision
            torch.backends.cudnn.benchmark = True
            net = torchvision.models.resnet50().to(dev)
            records.append({"workload": "ddp_resnet50", "metric": "throughput", "unit": "samples/s",
                            "value": throughput(net, (128, 3, 224, 224), 1000, 5, 15, 0.9)})
        except ImportError as e:
            print(f"torch_ddp: no torchvision ({e}); ddp_resnet50 skipped")
    if "ddp_gpt2" in wanted:
        batch, seq = (4, 128) if quick else (16, 1024)
        layers, width = (6, 384) if quick else (12, 768)  # d6 (heads of 64, as llm.c's depth-d models) or 124M
        torch.manual_seed(0)
        model = gpt2(layers, width // 64, width, 50304, max(seq, 64)).to(dev)
        params = list(model.parameters())  # the tied embedding/head weight once
        opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                 {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local])
        gen = torch.Generator(device=dev)
        gen.manual_seed(1 + rank)  # each rank its own tokens
        xb = torch.randint(0, 50257, (batch, seq), device=dev, generator=gen)
        yb = torch.randint(0, 50257, (batch, seq), device=dev, generator=gen)
        losses = []

        def gpt2_step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = ddp(xb, yb)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            losses[:] = [loss]
        steps = 10 if quick else 50
        seconds = time_ms(gpt2_step, 3 if quick else 20, steps) / steps / 1000
        if not torch.isfinite(losses[0]).item():
            raise RuntimeError("ddp_gpt2: the loss is not finite")
        records.append({"workload": "ddp_gpt2", "metric": "seconds", "unit": "s", "value": seconds})
        records.append({"workload": "ddp_gpt2", "metric": "tokens_per_s", "unit": "tokens/s",
                        "value": batch * seq * n / seconds})
        del ddp, model, opt
    if rank == 0:
        print(f"torch_ddp: {n} rank(s), torch {torch.__version__}")
        for r in records:
            print(f"  {r['workload']:<14} {r['metric']:<11} {r['value']:>12.4g} {r['unit']}")
        if out:
            with open(out, "w") as f:
                json.dump({"world_size": n, "tool": "torch", "version": torch.__version__,
                           "gpu": torch.cuda.get_device_name(dev), "records": records}, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
