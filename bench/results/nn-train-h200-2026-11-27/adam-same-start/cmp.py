import sys, torch, numpy as np
sys.path.insert(0, "/work/shared/anchors")
import peers_nn as P
steps = int(sys.argv[1])
xtr, ytr, _, _ = P.load_fashion("/usr/share/datasets/fashion-mnist")
perms = np.load("/tmp/same0/perms.npy")
keys = ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
def run(dtype):
    m = P.mlp(1000, False).to(dtype)
    m.load_state_dict({k: torch.from_numpy(np.load(f"/tmp/same0/{k}.npy")).to(dtype) for k in keys})
    opt = torch.optim.Adam(m.parameters())
    for s in range(steps):
        idx = torch.from_numpy(perms[0][s*100:s*100+100])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(torch.from_numpy(xtr)[idx].to(dtype)), torch.from_numpy(ytr)[idx])
        loss.backward()
        if s == 0:
            print(dtype, "loss", float(loss))
            g = {k: p.grad.detach().double().numpy().copy() for k, p in m.named_parameters()}
        opt.step()
    return g, {k: p.detach().double().numpy() for k, p in m.named_parameters()}
g32, w32 = run(torch.float32)
g64, w64 = run(torch.float64)
for k in keys:
    kg = np.load(f"/tmp/same0/kgrad_{k}.npy").astype(np.float64); kw = np.load(f"/tmp/same0/kw_{k}.npy").astype(np.float64)
    sc = np.abs(g64[k]).max(); wsc = np.abs(w64[k] - np.load(f"/tmp/same0/{k}.npy")).max()
    print(f"{k:9s} grad err kiln {np.abs(kg-g64[k]).max()/sc:.2e} torch32 {np.abs(g32[k]-g64[k]).max()/sc:.2e} | "
          f"w after {steps}: kiln {np.abs(kw-w64[k]).max()/wsc:.2e} torch32 {np.abs(w32[k]-w64[k]).max()/wsc:.2e} (of the change)")
