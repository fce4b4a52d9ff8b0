"""Float64 central-difference gradient checks for layers and losses (test helper)."""
from __future__ import annotations

import numpy as np


def numeric_grad(f, x: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """Central differences of scalar ``f()`` with respect to the entries of ``x`` (modified in place, restored)."""
    g = np.zeros_like(x)
    flat, gflat = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        fp = f()
        flat[i] = old - eps
        fm = f()
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * eps)
    return g


def layer_gradcheck(layer, x, *, training, seed=0, rtol=1e-5, atol=1e-7, max_params=400, input_grad=True):
    """Check ``backward`` of a float64 ``layer`` against central differences of ``sum(forward(x) * r)``.

    Checks the input gradient (unless ``input_grad`` is False: index inputs) and (up to ``max_params`` evenly
    spaced entries of) the parameter gradient.
    """
    assert layer.dtype == np.float64 and (x.dtype == np.float64 or not input_grad)
    run = lambda: layer.forward(x, training=training, rng=np.random.default_rng(seed))
    y, cache = run()
    r = np.random.default_rng(123).standard_normal(y.shape)
    gp = layer.zeros_like_parameters()
    gx = layer.backward(cache, r.copy(), gp)
    objective = lambda: float(np.sum(run()[0] * r))
    if input_grad:
        assert gx.shape == x.shape
        np.testing.assert_allclose(gx, numeric_grad(objective, x), rtol=rtol, atol=atol, err_msg="input gradient")
    else:
        assert gx is None
    flat = layer.flat_parameters
    if flat.size:
        idx = np.unique(np.linspace(0, flat.size - 1, min(flat.size, max_params)).astype(int))
        num = np.empty(idx.size)
        for k, i in enumerate(idx):
            old = flat[i]
            flat[i] = old + 1e-6
            fp = objective()
            flat[i] = old - 1e-6
            fm = objective()
            flat[i] = old
            num[k] = (fp - fm) / 2e-6
        np.testing.assert_allclose(gp[idx], num, rtol=rtol, atol=atol, err_msg="parameter gradient")
