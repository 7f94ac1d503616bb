import sys, time, gzip, numpy as np, torch
torch.manual_seed(0); torch.set_num_threads(16)
if len(sys.argv) > 1 and sys.argv[1] == "ftz": torch.set_flush_denormal(True)
def idx(p):
    d = gzip.open(p).read(); nd = d[3]; dims = [int.from_bytes(d[4+4*i:8+4*i], "big") for i in range(nd)]
    return np.frombuffer(d, np.uint8, offset=4+4*nd).reshape(dims)
x = torch.from_numpy(idx(".data/fashion-mnist/train-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255)
y = torch.from_numpy(idx(".data/fashion-mnist/train-labels-idx1-ubyte.gz").astype(np.int64))
m = torch.nn.Sequential(torch.nn.Linear(784,1000), torch.nn.ReLU(), torch.nn.Linear(1000,1000), torch.nn.ReLU(), torch.nn.Linear(1000,10))
opt = torch.optim.Adam(m.parameters())
for ep in range(3):
    perm = torch.randperm(60000); tg=tf=tb=ts=0
    for i in range(0, 60000, 100):
        t=time.perf_counter(); ix = perm[i:i+100]; xb, yb = x[ix], y[ix]; tg += time.perf_counter()-t
        t=time.perf_counter(); opt.zero_grad(set_to_none=True); loss = torch.nn.functional.cross_entropy(m(xb), yb); tf += time.perf_counter()-t
        t=time.perf_counter(); loss.backward(); tb += time.perf_counter()-t
        t=time.perf_counter(); opt.step(); ts += time.perf_counter()-t
    print(f"epoch {ep}: torch{' ftz' if len(sys.argv) > 1 else ''} gather {tg*1e3:.0f} ms, forward {tf*1e3:.0f}, backward {tb*1e3:.0f}, step {ts*1e3:.0f}, total {(tg+tf+tb+ts)*1e3:.0f}", flush=True)
