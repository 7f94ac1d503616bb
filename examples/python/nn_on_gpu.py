"""d2l's "neural networks and GPUs" in Python: a Sequential(Linear(3, 1)) moved to try_gpu(), its parameters
living there, read and written; one training step on the same device; the gradient checked by hand (cf.
examples/nn_on_gpu.cpp).

    PYTHONPATH=build/cpu/python python3 examples/python/nn_on_gpu.py
"""

import sys

import numpy as np

import kiln


def main():
    device = kiln.try_gpu()
    net = kiln.nn.Sequential(kiln.nn.Linear(3, 1))
    net.to(device)
    print(f"net on {device}: " + ", ".join(f"{name} on {p.device}" for name, p in net.named_parameters()))
    # Parameters are arrays of that device: write known values into them (in place, without recording).
    weight, bias = [p for _, p in net.named_parameters()]
    with kiln.no_grad():
        weight[...] = kiln.asarray([[0.5, -1.0, 2.0]], device=device)
        bias[...] = 0.25
    x = kiln.ones((2, 3), device=device)
    out = net(x)
    print(f"net(ones(2, 3)) = {out.to(kiln.cpu()).tolist()} on {out.device}")
    # One step of SGD on mse(net(x), 0): d/dw mean((x w + b)^2) = 2 mean((x w + b) x) = 2 * 1.75 * x (rows equal).
    opt = kiln.optim.SGD(net.parameters(), lr=0.1)
    opt.zero_grad()
    loss = kiln.nn.mse_loss(out, kiln.zeros((2, 1), device=device))
    loss.backward()
    grad = weight.grad.to(kiln.cpu()).numpy()
    opt.step()
    print(f"loss {loss.item():.4f}, weight.grad {grad.tolist()}, weight after the step "
          f"{weight.to(kiln.cpu()).tolist()}")
    return {"device": device, "out": out.to(kiln.cpu()).numpy(), "loss": loss.item(), "grad": grad,
            "weight": weight.to(kiln.cpu()).numpy(), "param_devices": [p.device for p in net.parameters()]}


if __name__ == "__main__":
    r = main()
    sys.exit(0 if np.allclose(r["grad"], 3.5) else 1)
