"""What a fit ships once (the fit context): the model's structure and buffers, not its parameters' values."""
import numpy as np
from pyspark import cloudpickle

from sparkdl import nn
from sparkdl.engine.broadcast import WithoutParameters


def _model():
    return nn.Sequential(nn.Linear(300, 200), nn.BatchNorm1d(200), nn.ReLU(), nn.Linear(200, 3)).initialize(0)


def test_without_parameters_ships_structure_and_buffers_only():
    model = _model()
    model.flat_buffers[...] = np.arange(model.flat_buffers.size, dtype=np.float32)
    before = model.flat_parameters.copy()
    full, lean = cloudpickle.dumps(model), cloudpickle.dumps(WithoutParameters(model))
    assert len(full) > 4 * model.num_parameters()
    assert len(lean) < 4 * model.flat_buffers.size + 20_000  # the buffers and the structure, no parameter values
    shipped = cloudpickle.loads(lean)
    assert type(shipped) is nn.Sequential
    assert [n for n, _ in shipped.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert [p.shape for _, p in shipped.named_parameters()] == [p.shape for _, p in model.named_parameters()]
    assert shipped.flat_parameters.dtype == np.float32 and not shipped.flat_parameters.any()
    np.testing.assert_array_equal(shipped.flat_buffers, model.flat_buffers)
    # the views are intact: the flat vector and the layers' tensors are one memory
    shipped.flat_parameters[...] = before
    np.testing.assert_array_equal(shipped[0].weight, model[0].weight)
    np.testing.assert_array_equal(shipped(np.ones((2, 300), np.float32)), model(np.ones((2, 300), np.float32)))
    # and the model given to it is unchanged
    np.testing.assert_array_equal(model.flat_parameters, before)
    assert isinstance(model[0]._tensors["parameters"]["weight"], np.ndarray)
