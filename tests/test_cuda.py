"""The filters on a CUDA device agree with the CPU (float64 reference).

Marked ``cuda`` and skipped with the reason 'CUDA is not available' on machines without a GPU, except
:func:`test_cuda_without_cuda_raises_at_fit`, which runs only there. On the GPU, float64 must agree
with the CPU to rounding and float32 within float32 tolerance (a small tanh network, so no ReLU
kink can flip between precisions).
"""

import pickle

import numpy as np
import pytest
import torch

from skfilter import EKFClassifier, EKFRegressor, LoFiClassifier, LoFiRegressor
from skfilter.model_selection import prequential_predict

HAS_CUDA = torch.cuda.is_available()


def cuda_test(f):
    return pytest.mark.cuda(pytest.mark.skipif(not HAS_CUDA, reason="CUDA is not available")(f))


#: EKF covariances, and 'lofi' for LoFi of rank 3 (its torch update path runs only on a GPU)
COVARIANCES = ["full", "vd", "fd", "lofi"]
#: (rtol, atol) against the CPU float64 reference
TOLERANCE = {"float64": (1e-8, 1e-9), "float32": (1e-3, 2e-3)}


def _data(kind, n=40, d=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    if kind == "regressor":
        return X, np.sin(X @ [1.0, -2.0, 0.5]) + 0.1 * rng.normal(size=n)
    return X, np.array(["a", "b", "c"])[np.digitize(X[:, 0], [-0.5, 0.5])]


def _make(kind, **kw):
    kw = {"hidden_layer_sizes": (5,), "activation": "tanh", "random_state": 0, **kw}
    lofi = kw.get("covariance") == "lofi"
    if lofi:
        del kw["covariance"]
        kw["rank"] = 3
    if kind == "regressor":
        return (LoFiRegressor if lofi else EKFRegressor)(obs_variance=0.1, **kw)
    return (LoFiClassifier if lofi else EKFClassifier)(**kw)


def _outputs(est, X):
    if isinstance(est, (EKFRegressor, LoFiRegressor)):
        return est.predict(X, return_std=True)
    return (est.predict_proba(X),)


def _assert_close(a, b, dtype):
    rtol, atol = TOLERANCE[dtype]
    for u, v in zip(a, b):
        assert isinstance(u, np.ndarray)
        np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


@cuda_test
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("covariance", COVARIANCES)
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_fit_predict_on_cuda_matches_cpu(kind, covariance, dtype):
    X, y = _data(kind)
    cpu = _make(kind, covariance=covariance).fit(X, y)
    gpu = _make(kind, covariance=covariance, device="cuda", dtype=dtype).fit(X, y)
    assert gpu.posterior_.mean.device.type == "cuda"
    assert gpu.posterior_.mean.dtype == getattr(torch, dtype)
    assert next(gpu.module_.parameters()).device.type == "cuda"
    _assert_close(_outputs(gpu, X), _outputs(cpu, X), dtype)
    rtol, atol = TOLERANCE[dtype]
    np.testing.assert_allclose(gpu.posterior_.mean.cpu().double().numpy(), cpu.posterior_.mean.numpy(),
                               rtol=rtol, atol=atol)
    np.testing.assert_allclose(gpu.posterior_.covariance().cpu().double().numpy(),
                               cpu.posterior_.covariance().numpy(), rtol=rtol, atol=atol)
    # continuing the stream on the device
    cpu.partial_fit(X[:7], y[:7])
    gpu.partial_fit(X[:7], y[:7])
    _assert_close(_outputs(gpu, X), _outputs(cpu, X), dtype)
    assert gpu.n_samples_seen_ == cpu.n_samples_seen_ == 47


@cuda_test
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_default_dtype_on_cuda_is_float32(kind):
    X, y = _data(kind, n=10)
    est = _make(kind, device="cuda").fit(X, y)
    assert est.posterior_.mean.dtype == torch.float32
    assert est.posterior_.mean.device.type == "cuda"


@cuda_test
@pytest.mark.parametrize("predictive", ["mc", "plugin"])
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_other_predictives_on_cuda(kind, predictive):
    X, y = _data(kind, n=20)
    est = _make(kind, device="cuda", dtype="float64", predictive=predictive, n_mc_samples=50).fit(X, y)
    out = _outputs(est, X)
    for a, b in zip(out, _outputs(est, X)):
        np.testing.assert_array_equal(a, b)  # the mc draws are fixed per fitted estimator
    if predictive == "plugin":
        cpu = _make(kind, predictive=predictive).fit(X, y)
        _assert_close(out, _outputs(cpu, X), "float64")
    elif kind == "classifier":
        np.testing.assert_allclose(out[0].sum(1), 1.0, rtol=1e-12)


@cuda_test
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("covariance", COVARIANCES)
def test_prequential_predict_on_cuda(covariance, dtype):
    X, y = _data("regressor")
    params = dict(covariance=covariance, process_noise=1e-3, decay=0.99)
    m_cpu, s_cpu = prequential_predict(_make("regressor", **params), X, y, return_std=True)
    gpu = _make("regressor", device="cuda", dtype=dtype, **params)
    m_gpu, s_gpu = prequential_predict(gpu, X, y, return_std=True)
    _assert_close((m_gpu, s_gpu), (m_cpu, s_cpu), dtype)
    assert gpu.n_samples_seen_ == len(X) and gpu.posterior_.mean.device.type == "cuda"
    Xc, yc = _data("classifier")
    p_cpu = prequential_predict(_make("classifier", covariance=covariance), Xc, yc, method="predict_proba")
    p_gpu = prequential_predict(_make("classifier", covariance=covariance, device="cuda", dtype=dtype), Xc, yc,
                                method="predict_proba")
    _assert_close((p_gpu,), (p_cpu,), dtype)


@cuda_test
@pytest.mark.parametrize("covariance", COVARIANCES)
def test_sample_y_on_cuda(covariance):
    X, y = _data("regressor", n=30)
    est = _make("regressor", covariance=covariance, device="cuda", dtype="float64").fit(X, y)
    s = est.sample_y(X[:3], n_samples=20000, random_state=0)
    assert isinstance(s, np.ndarray) and s.shape == (3, 20000)
    np.testing.assert_array_equal(s, est.sample_y(X[:3], n_samples=20000, random_state=0))
    assert not np.array_equal(s, est.sample_y(X[:3], n_samples=20000, random_state=1))
    # moments of the samples approach the predictive (MC average of the network + noise)
    mc = _make("regressor", covariance=covariance, device="cuda", dtype="float64", predictive="mc",
               n_mc_samples=20000).fit(X, y)
    mean, std = mc.predict(X[:3], return_std=True)
    np.testing.assert_allclose(s.mean(1), mean, atol=6 * std.max() / np.sqrt(20000))
    np.testing.assert_allclose(s.std(1), std, rtol=0.05)
    Y = np.c_[y, -y]
    multi = _make("regressor", covariance=covariance, device="cuda").fit(X, Y)
    assert multi.sample_y(X[:4], n_samples=5, random_state=0).shape == (4, 2, 5)
    pois = EKFRegressor(hidden_layer_sizes=(3,), likelihood="poisson", device="cuda", random_state=0)
    pois.fit(X, np.round(np.exp(y)))
    draws = pois.sample_y(X[:4], n_samples=6, random_state=0)
    assert draws.shape == (4, 6) and np.all(draws >= 0)


@cuda_test
@pytest.mark.parametrize("covariance", COVARIANCES)
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_pickle_a_cuda_estimator(kind, covariance):
    X, y = _data(kind, n=20)
    est = _make(kind, covariance=covariance, device="cuda").fit(X, y)
    copy = pickle.loads(pickle.dumps(est))
    assert copy.posterior_.mean.device.type == "cuda"
    for a, b in zip(_outputs(est, X), _outputs(copy, X)):
        np.testing.assert_array_equal(a, b)
    est.partial_fit(X[:5], y[:5])
    copy.partial_fit(X[:5], y[:5])
    assert torch.equal(est.posterior_.mean, copy.posterior_.mean)
    assert torch.equal(est.posterior_.covariance(), copy.posterior_.covariance())


@cuda_test
@pytest.mark.parametrize("covariance", COVARIANCES)
def test_move_a_fitted_estimator_between_cpu_and_cuda(covariance):
    X, y = _data("regressor")
    ref = _make("regressor", covariance=covariance).fit(X, y)
    est = _make("regressor", covariance=covariance).fit(X[:20], y[:20])
    est.set_params(device="cuda", dtype="float64").partial_fit(X[20:30], y[20:30])
    assert est.posterior_.mean.device.type == "cuda"
    assert next(est.module_.parameters()).device.type == "cuda"
    est.set_params(device="cpu").partial_fit(X[30:], y[30:])
    assert est.posterior_.mean.device.type == "cpu"
    _assert_close(_outputs(est, X), _outputs(ref, X), "float64")
    np.testing.assert_allclose(est.posterior_.mean.numpy(), ref.posterior_.mean.numpy(), rtol=1e-8, atol=1e-9)


@pytest.mark.skipif(HAS_CUDA, reason="needs a machine without CUDA")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", torch.device("cuda")])
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_cuda_without_cuda_raises_at_fit(kind, device):
    X, y = _data(kind, n=10)
    est = _make(kind, device=device)  # __init__ does not validate
    with pytest.raises(ValueError, match="CUDA is not available"):
        est.fit(X, y)
    assert not [k for k in vars(est) if k.endswith("_") and not k.startswith("__")]
    assert not hasattr(est, "posterior_")
    if kind == "classifier":
        with pytest.raises(ValueError, match="CUDA is not available"):
            est.partial_fit(X, y, classes=np.unique(y))
    else:
        with pytest.raises(ValueError, match="CUDA is not available"):
            est.partial_fit(X, y)
    assert not hasattr(est, "posterior_")
    # a fitted CPU estimator asked to move keeps its belief
    fitted = _make(kind).fit(X, y)
    mean = fitted.posterior_.mean.clone()
    fitted.set_params(device=device)
    with pytest.raises(ValueError, match="CUDA is not available"):
        fitted.partial_fit(X, y)
    assert torch.equal(fitted.posterior_.mean, mean) and fitted.posterior_.mean.device.type == "cpu"
    assert fitted.n_samples_seen_ == 10


@cuda_test
@pytest.mark.parametrize("weighting", ["imq", "md", "tmd", "huber", "predictive-md"])
@pytest.mark.parametrize("covariance", COVARIANCES)
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_wolf_on_cuda_matches_cpu(kind, covariance, weighting):
    """WoLF over every structure on the GPU (float64) equals the CPU, through pickling and sample_y."""
    from skfilter import WoLFClassifier, WoLFRegressor

    X, y = _data(kind)
    if kind == "regressor":
        y = y.copy()
        y[::9] += 20.0  # outliers, so that the weights matter
    wrap = WoLFRegressor if kind == "regressor" else WoLFClassifier
    cpu = wrap(_make(kind, covariance=covariance), weighting=weighting, threshold=1.0).fit(X, y)
    gpu = wrap(_make(kind, covariance=covariance, device="cuda", dtype="float64"), weighting=weighting,
               threshold=1.0).fit(X, y)
    _assert_close(_outputs(gpu.estimator_, X), _outputs(cpu.estimator_, X), "float64")
    again = pickle.loads(pickle.dumps(gpu))
    _assert_close(_outputs(again.estimator_, X), _outputs(gpu.estimator_, X), "float64")
    if kind == "regressor":
        assert np.isfinite(gpu.sample_y(X[:3], n_samples=2, random_state=0)).all()


@cuda_test
@pytest.mark.parametrize("reset", ["prior", "moment-matched", "ou", "cpp-ou"])
@pytest.mark.parametrize("covariance", COVARIANCES)
@pytest.mark.parametrize("kind", ["regressor", "classifier"])
def test_bocd_on_cuda_matches_cpu(kind, covariance, reset):
    """Run-length mixtures over every structure on the GPU (float64) equal the CPU, through pickling."""
    from skfilter import BOCDClassifier, BOCDRegressor

    if reset == "moment-matched" and covariance == "lofi":
        pytest.skip("LoFi has no moment-matched reset (NotImplementedError, tested on the CPU)")
    X, y = _data(kind)
    wrap = BOCDRegressor if kind == "regressor" else BOCDClassifier
    k = 1 if reset in ("ou", "cpp-ou") else 3
    cpu = wrap(_make(kind, covariance=covariance), hazard=0.05, n_hypotheses=k, reset=reset).fit(X, y)
    gpu = wrap(_make(kind, covariance=covariance, device="cuda", dtype="float64"), hazard=0.05, n_hypotheses=k,
               reset=reset).fit(X, y)
    np.testing.assert_array_equal(gpu.run_lengths_, cpu.run_lengths_)
    _assert_close(_outputs(gpu.estimator_, X), _outputs(cpu.estimator_, X), "float64")
    again = pickle.loads(pickle.dumps(gpu))
    _assert_close(_outputs(again.estimator_, X), _outputs(gpu.estimator_, X), "float64")
