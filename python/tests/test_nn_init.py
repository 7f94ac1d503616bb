"""kiln.nn.init against torch.nn.init's formulas: bounds and standard deviations computed by hand from the fans,
sample statistics of large draws, the truncated normal's moments from its closed form, and torch's errors."""

import math

import numpy as np
import pytest

import kiln

init = kiln.nn.init


def drawn(fn, shape, *args, device=kiln.cpu(), dtype=kiln.float32, **kwargs):
    kiln.random.seed(0)
    w = kiln.zeros(shape, dtype=dtype, device=device)
    assert fn(w, *args, **kwargs) is w  # in place, returning its argument as torch does
    return w.numpy().astype(np.float64)


def test_xavier_uniform_stays_inside_its_bound_and_has_its_variance(device):
    bound = math.sqrt(6.0 / (200 + 300))  # fan_in = 200, fan_out = 300
    w = drawn(init.xavier_uniform_, (300, 200), device=device)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    assert w.var() == pytest.approx(bound**2 / 3, rel=0.03)


def test_xavier_normal_has_std_gain_times_sqrt_2_over_fans():
    w = drawn(init.xavier_normal_, (400, 100), gain=2.0)
    assert w.std() == pytest.approx(2.0 * math.sqrt(2.0 / 500), rel=0.02)
    assert abs(w.mean()) < 0.005


def test_kaiming_uniform_uses_the_receptive_field_and_the_mode():
    # (out, in, kh, kw) = (256, 64, 3, 3): fan_in = 64 * 9, fan_out = 256 * 9; leaky_relu with a = 0: gain sqrt(2)
    w = drawn(init.kaiming_uniform_, (256, 64, 3, 3))
    bound = math.sqrt(3.0) * math.sqrt(2.0) / math.sqrt(576)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound
    w = drawn(init.kaiming_uniform_, (256, 64, 3, 3), a=math.sqrt(5), mode="fan_out")
    bound = math.sqrt(3.0) * math.sqrt(2.0 / 6.0) / math.sqrt(2304)  # torch's Linear/Conv default a = sqrt(5)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.99 * bound


def test_kaiming_normal_relu_fan_out_has_std_sqrt_2_over_fan_out(device):
    w = drawn(init.kaiming_normal_, (128, 512), mode="fan_out", nonlinearity="relu", device=device)
    assert w.std() == pytest.approx(math.sqrt(2.0 / 128), rel=0.02)


def test_uniform_normal_constant_ones_zeros():
    w = drawn(init.uniform_, (100000,), -3.0, 5.0)
    assert w.min() >= -3.0 and w.max() <= 5.0 and w.mean() == pytest.approx(1.0, abs=0.03)
    w = drawn(init.normal_, (100000,), mean=2.0, std=0.5)
    assert w.mean() == pytest.approx(2.0, abs=0.01) and w.std() == pytest.approx(0.5, rel=0.02)
    np.testing.assert_array_equal(drawn(init.constant_, (2, 3), 0.25), np.full((2, 3), 0.25))
    np.testing.assert_array_equal(drawn(init.ones_, (4,)), np.ones(4))
    np.testing.assert_array_equal(drawn(init.zeros_, (4,)), np.zeros(4))


def truncated_normal_moments(mean, std, a, b):
    """Mean and standard deviation of N(mean, std^2) truncated to [a, b], from the closed form."""
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda x: math.exp(-x * x / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    z = cdf(beta) - cdf(alpha)
    shift = (pdf(alpha) - pdf(beta)) / z
    variance = 1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - shift**2
    return mean + std * shift, std * math.sqrt(variance)


@pytest.mark.parametrize("mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (3.0, 0.5, 2.5, 4.0), (0.0, 1.0, 5.0, 6.0)])
def test_trunc_normal_has_the_truncated_moments_and_stays_in_bounds(mean, std, a, b):
    # the last case lies 5 to 6 std out, where drawing and rejecting would almost never land: torch's inverse CDF
    w = drawn(init.trunc_normal_, (200000,), mean=mean, std=std, a=a, b=b, dtype=kiln.float64)
    want_mean, want_std = truncated_normal_moments(mean, std, a, b)
    assert w.min() >= a and w.max() <= b
    assert w.mean() == pytest.approx(want_mean, abs=0.005 * std)
    assert w.std() == pytest.approx(want_std, rel=0.02)


def test_trunc_normal_fills_narrow_dtypes_and_gpus(device):
    w = drawn(init.trunc_normal_, (1000,), std=0.02, a=-0.04, b=0.04, dtype=kiln.float16, device=device)
    assert w.min() >= -0.04 and w.max() <= 0.04 and w.std() > 0.01


def test_calculate_gain_matches_torchs_table():
    assert init.calculate_gain("linear") == 1.0 and init.calculate_gain("conv2d") == 1.0
    assert init.calculate_gain("sigmoid") == 1.0
    assert init.calculate_gain("tanh") == pytest.approx(5.0 / 3.0)
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2.0))
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2.0 / (1 + 0.01**2)))
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2.0 / 1.04))
    assert init.calculate_gain("selu") == 0.75


def test_initialises_a_modules_parameters_in_place_without_recording():
    lin = kiln.nn.Linear(4, 3)
    assert lin.weight.requires_grad
    init.zeros_(lin.weight)
    init.constant_(lin.bias, 0.5)
    np.testing.assert_array_equal(lin.state_dict()["weight"].numpy(), np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(lin(kiln.ones((2, 4))).numpy(), np.full((2, 3), 0.5, np.float32))
    assert lin.weight.requires_grad and lin.weight.grad is None
    init.trunc_normal_(lin.weight, std=0.02, a=-0.04, b=0.04, generator=kiln.random.default_rng(1))
    weight = lin.state_dict()["weight"].numpy()
    assert np.abs(weight).max() <= 0.04 and weight.std() > 0.005


def test_a_generator_draws_reproducibly_apart_from_the_global_stream():
    a, b, c = (kiln.zeros((50, 40)) for _ in range(3))
    init.xavier_uniform_(a, generator=kiln.random.default_rng(7))
    init.xavier_uniform_(b, generator=kiln.random.default_rng(7))
    init.xavier_uniform_(c, generator=kiln.random.default_rng(8))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert not np.array_equal(a.numpy(), c.numpy())


def test_fans_of_a_1d_tensor_are_a_value_error_naming_the_fix():
    with pytest.raises(ValueError, match=r"xavier_uniform_: fan in and fan out need a tensor of at least 2 axes, "
                                         r"got shape \(5,\); initialise a 1-d tensor \(a bias\) with uniform_"):
        init.xavier_uniform_(kiln.zeros(5))
    with pytest.raises(ValueError, match="kaiming_normal_: .* at least 2 axes"):
        init.kaiming_normal_(kiln.zeros(5))


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="mode 'fan_avg' is neither 'fan_in' nor 'fan_out'"):
        init.kaiming_uniform_(kiln.zeros((3, 3)), mode="fan_avg")
    with pytest.raises(ValueError, match="unsupported nonlinearity 'swish'"):
        init.calculate_gain("swish")
    with pytest.raises(ValueError, match="a < b"):
        init.trunc_normal_(kiln.zeros(3), a=1.0, b=-1.0)


def test_submodules_import_as_torchs_do():
    import importlib

    import kiln.nn.init as init_module
    from kiln.nn import init
    from kiln.optim import SGD  # noqa: F401

    assert init is kiln.nn.init and init_module is kiln.nn.init
    assert importlib.import_module("kiln.nn.init") is kiln.nn.init
    assert importlib.import_module("kiln.linalg") is kiln.linalg
