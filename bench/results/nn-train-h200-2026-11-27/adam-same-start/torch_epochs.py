import sys, torch, numpy as np
sys.path.insert(0, "/work/shared/anchors")
import peers_nn as P
torch.set_num_threads(2)
xtr, ytr, xte, yte = P.load_fashion("/usr/share/datasets/fashion-mnist")
torch.manual_seed(int(sys.argv[1])); m = P.mlp(1000, False); opt = torch.optim.Adam(m.parameters())
perms = np.load("/tmp/same/perms.npy"); x = torch.from_numpy(xtr); y = torch.from_numpy(ytr)
for e in range(5):
    for i in range(0, 60000, 100):
        idx = torch.from_numpy(perms[e][i:i+100]); opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x[idx]), y[idx]).backward(); opt.step()
    print("epoch", e + 1, "test acc", P.accuracy(m, xte, yte, torch.device("cpu")), flush=True)
