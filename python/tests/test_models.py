"""kiln.models (python/src/models.cpp): the ResNets against torchvision's parameter counts, and inference
with folded BatchNorm against the unfolded network."""

import numpy as np
import pytest

import kiln


def count(model):
    return sum(p.size for p in model.parameters())


@pytest.mark.parametrize("name, parameters", [("resnet18", 11_689_512), ("resnet50", 25_557_032)])
def test_resnet_parameter_counts_match_torchvision(name, parameters):
    assert count(getattr(kiln.models, name)()) == parameters


def test_resnet_inference_and_folded_batch_norm():
    kiln.random.seed(3)
    net = kiln.models.resnet18(num_classes=7)
    assert isinstance(net, kiln.nn.Module)
    net.eval()
    x = kiln.random.normal(size=(2, 3, 32, 32))
    with kiln.no_grad():
        y = net(x)
        assert y.shape == (2, 7) and np.isfinite(y.numpy()).all()
        again = net(x)
        assert not net.folded and net.fold_batch_norm() is net and net.folded
        folded = net(x)
    np.testing.assert_array_equal(y.numpy(), again.numpy())  # eval mode: deterministic
    np.testing.assert_allclose(folded.numpy(), y.numpy(), rtol=1e-4, atol=1e-4)


def test_cudnn_benchmark_switch_is_harmless_without_cudnn():
    kiln.cudnn.set_benchmark(True)
    kiln.cudnn.set_benchmark(False)
