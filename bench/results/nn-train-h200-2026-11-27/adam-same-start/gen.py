import sys, torch, numpy as np
sys.path.insert(0, "/work/shared/anchors")
import peers_nn as P
torch.manual_seed(int(sys.argv[1]))
m = P.mlp(1000, False)
for k, v in m.state_dict().items():
    np.save(f"/tmp/same/{k}.npy", v.numpy())
rng = np.random.default_rng(0)
np.save("/tmp/same/perms.npy", np.stack([rng.permutation(60000) for _ in range(5)]).astype(np.int64))
print(list(m.state_dict().keys()))
