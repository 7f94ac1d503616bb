#!/usr/bin/env python3
"""PyTorch's reference for kiln's ResNet-50 (run where torch and torchvision are installed, e.g. the GPU
machine): torchvision's resnet50 with seeded random weights and randomised BatchNorm running statistics, its
state_dict saved as safetensors (the file models::resnet50()->load_state_dict reads), a batch of images and
PyTorch's float32 logits in evaluation mode (TF32 off), and on a GPU its bfloat16 logits (torch.autocast with
the model and images channels-last, as the walkthrough's bfloat16 inference), as .npy files:

    python3 scripts/resnet-reference.py OUT_DIR [--batch 4] [--device cuda]
    KILN_RESNET_REFERENCE=OUT_DIR build/cuda/tests/kiln_tests --gtest_filter='Models.ResNet50*'

Writes OUT_DIR/resnet50.safetensors, input.npy (N, 3, 224, 224), logits.npy (N, 1000) and, on a GPU,
logits_bf16.npy (N, 1000).
"""
import argparse
import os

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    import torch
    import torchvision
    from safetensors.torch import save_file
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device(args.device if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    net = torchvision.models.resnet50()
    with torch.no_grad():  # running statistics and affine parameters away from their initial 0/1
        for m in net.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)
    net = net.to(dev).eval()
    x = torch.randn(args.batch, 3, 224, 224)
    with torch.no_grad():
        logits = net(x.to(dev)).float().cpu()
    os.makedirs(args.out, exist_ok=True)
    if dev.type == "cuda":
        cl = net.to(memory_format=torch.channels_last)
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            low = cl(x.to(dev).to(memory_format=torch.channels_last)).float().cpu()
        np.save(os.path.join(args.out, "logits_bf16.npy"), low.numpy())
        agree = (low.argmax(1) == logits.argmax(1)).float().mean().item()
        print(f"resnet-reference: PyTorch's bfloat16 top-1 agrees with its float32 top-1 on {agree:.0%} of the batch")
    save_file({k: v.contiguous().cpu() for k, v in net.state_dict().items()},
              os.path.join(args.out, "resnet50.safetensors"))
    np.save(os.path.join(args.out, "input.npy"), x.numpy())
    np.save(os.path.join(args.out, "logits.npy"), logits.numpy())
    print(f"resnet-reference: torch {torch.__version__}, torchvision {torchvision.__version__} on {dev}: "
          f"{args.batch} images, logits in [{logits.min():.3f}, {logits.max():.3f}] -> {args.out}")


if __name__ == "__main__":
    main()
