"""torch -> ONNX (torch.onnx.export, legacy exporter) -> sparkdl: outputs within 1e-5 of torch, parameters
named like the torch state_dict, every supported operator exercised at least once."""
import numpy as np
import pytest

from sparkdl import nn
from tests.onnx_helpers import make_model, torch_to_onnx

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
sonnx = pytest.importorskip("sparkdl.onnx")
tnn = torch.nn


class LeNet5(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = tnn.Conv2d(1, 6, 5, padding=2), tnn.Conv2d(6, 16, 5)
        self.fc1, self.fc2, self.fc3 = tnn.Linear(400, 120), tnn.Linear(120, 84), tnn.Linear(84, 10)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.conv1(x)), 2)
        x = torch.max_pool2d(torch.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))


class Block(tnn.Module):
    """ResNet basic block: conv-bn-relu-conv-bn + shortcut (1x1 conv-bn when the shape changes), relu."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = tnn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(cout)
        self.conv2 = tnn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = tnn.BatchNorm2d(cout)
        self.shortcut = tnn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = tnn.Sequential(tnn.Conv2d(cin, cout, 1, stride, bias=False), tnn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(y + self.shortcut(x))


class SmallResNet(tnn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = tnn.Conv2d(3, 8, 3, 1, 1, bias=False)
        self.bn1 = tnn.BatchNorm2d(8)
        self.layer1 = tnn.Sequential(Block(8, 8, 1), Block(8, 16, 2))
        self.pool = tnn.AdaptiveAvgPool2d(1)
        self.fc = tnn.Linear(16, 10)

    def forward(self, x):
        x = self.layer1(torch.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.pool(x), 1))


def _randomize_bn(module):
    """Non-trivial BatchNorm state, so a wrong epsilon/momentum/statistic mapping shows."""
    g = torch.Generator().manual_seed(0)
    for m in module.modules():
        if isinstance(m, tnn.BatchNorm2d):
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.normal_(0, 0.5, generator=g)
                m.running_mean.normal_(0, 0.5, generator=g)
                m.running_var.uniform_(0.5, 2.0, generator=g)
    return module


def _compare(tm, x, atol=1e-5, **export):
    torch.manual_seed(0)
    data = torch_to_onnx(tm, x, **export)
    model = sonnx.load(data)
    with torch.no_grad():
        expected = tm(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=atol)
    return model


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def test_lenet5_matches_torch_with_torch_names():
    torch.manual_seed(1)
    tm = LeNet5()
    model = _compare(tm, _x(3, 1, 28, 28))
    assert isinstance(model, nn.Graph)
    assert sorted(n for n, _ in model.named_parameters()) == sorted(tm.state_dict())


def test_mlp_sequential_becomes_sequential_with_same_keys():
    torch.manual_seed(2)
    tm = tnn.Sequential(tnn.Flatten(), tnn.Linear(20, 16), tnn.ReLU(), tnn.Linear(16, 4))
    model = _compare(tm, _x(5, 4, 5))
    assert isinstance(model, nn.Sequential)
    assert list(model.state_dict()) == list(tm.state_dict())
    # An eval-mode export drops Dropout (index 3): a Graph keeps the index gap, so the keys stay torch's.
    tm = tnn.Sequential(tnn.Flatten(), tnn.Linear(20, 16), tnn.ReLU(), tnn.Dropout(0.3), tnn.Linear(16, 4))
    model = _compare(tm, _x(5, 4, 5))
    assert isinstance(model, nn.Graph) and list(model.state_dict()) == ["1.weight", "1.bias", "4.weight", "4.bias"]


@pytest.mark.parametrize("preserve", [True, False], ids=["batchnorm-nodes", "batchnorm-folded"])
def test_small_resnet_eval_matches_torch(preserve):
    torch.manual_seed(3)
    tm = _randomize_bn(SmallResNet())
    model = _compare(tm, _x(2, 3, 8, 8), preserve_batchnorm=preserve)
    names = {n for n, _ in model.named_parameters()}
    if preserve:  # every tensor, including the running statistics, keeps its torch name
        own = set(model.state_dict()) - {n for n in model.state_dict() if n.endswith("num_batches_tracked")}
        assert own == {k for k in tm.state_dict() if not k.endswith("num_batches_tracked")}
        bn = dict(model.named_modules())["layer1.1.shortcut.1"]
        assert isinstance(bn, nn.BatchNorm2d) and bn.momentum == pytest.approx(0.1)
    else:  # BatchNorm folded into the convs by the exporter: the conv's module path comes from the node name
        assert {"conv1.weight", "layer1.0.conv1.weight", "layer1.1.shortcut.0.weight", "fc.weight"} <= names


def test_more_operators_match_torch():
    """Concat, Softmax/LogSoftmax, LeakyReLU, ELU, Tanh, Sigmoid, AvgPool, GlobalAveragePool, Reshape, Gelu."""

    class Mixed(tnn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = tnn.Conv2d(2, 3, 1), tnn.Conv2d(2, 2, 3, padding=2, dilation=2, groups=2)
            self.pool = tnn.AvgPool2d(2, stride=1, padding=1, count_include_pad=False)
            self.fc = tnn.Linear(5 * 5 * 5, 6)

        def forward(self, x):
            h = torch.cat([tnn.functional.leaky_relu(self.a(x), 0.2), tnn.functional.elu(self.b(x), 0.7)], 1)
            h = torch.tanh(self.pool(h)) + torch.sigmoid(self.pool(h))
            y = self.fc(h.reshape(-1, 125))
            return torch.log_softmax(tnn.functional.gelu(y), dim=1) + torch.softmax(y, dim=-1)

    torch.manual_seed(4)
    _compare(Mixed(), _x(3, 2, 4, 4), opset=20)


def test_matmul_plus_bias_becomes_linear():
    class Affine(tnn.Module):
        def __init__(self):
            super().__init__()
            self.w, self.b = tnn.Parameter(torch.randn(6, 3)), tnn.Parameter(torch.randn(3))

        def forward(self, x):
            return torch.relu(x @ self.w + self.b)

    torch.manual_seed(5)
    model = _compare(Affine(), _x(4, 6))
    lin = [m for _, m in model.named_modules() if isinstance(m, nn.Linear)]
    assert len(lin) == 1 and lin[0].use_bias


def test_hand_built_graph_gemm_alpha_beta_and_global_pool():
    rng = np.random.default_rng(0)
    from onnx import helper
    w, c = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float32)
    nodes = [helper.make_node("GlobalAveragePool", ["x"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["y"], name="fc", alpha=0.5, beta=2.0,
                              transB=1)]
    data = make_model(nodes, [("x", ["N", 3, 2, 2])], [("y", ["N", 4])], [("fc.weight", w), ("fc.bias", c)])
    model = sonnx.load(data)
    x = _x(2, 3, 2, 2)
    expected = 0.5 * x.mean(axis=(2, 3)) @ w.T + 2.0 * c
    np.testing.assert_allclose(model(x), expected, rtol=1e-5, atol=1e-6)
    assert sorted(model.state_dict()) == ["fc.bias", "fc.weight"]


@pytest.mark.parametrize("preserve", [True, False], ids=["batchnorm-nodes", "batchnorm-folded"])
def test_deduplicated_initializers_become_separate_parameters(preserve):
    """torch.onnx replaces equal initializers (fresh BatchNorms: all ones/zeros) by Identity nodes of one."""
    torch.manual_seed(6)
    tm = tnn.Sequential(tnn.Conv2d(3, 4, 3, padding=1, bias=False), tnn.BatchNorm2d(4), tnn.ReLU(),
                        tnn.Conv2d(4, 4, 3, padding=1, bias=False), tnn.BatchNorm2d(4))
    model = _compare(tm, _x(2, 3, 5, 5), preserve_batchnorm=preserve)
    if preserve:
        assert isinstance(model, nn.Sequential) and set(model.state_dict()) == set(tm.state_dict())
        assert model[4].eps == 1e-5 and model[4].momentum == 0.1
        for name, value in model.named_parameters():
            assert not np.shares_memory(value, model.state_dict()["1.weight"]) or name == "1.weight"


def test_a_projection_of_a_time_major_tensor_imports_as_linear_and_exports_back(tmp_path):
    """x (N, L, E) -> transpose (L, N, E) -> Linear: the MatMul by a constant weight and its bias Add become one
    Linear on the last axis although the batch is axis 1; saved, it is MatMul + Add again and reimports equal."""
    class TimeMajor(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(6, 4)

        def forward(self, x):
            return self.proj(x.transpose(0, 1)).transpose(0, 1)

    torch.manual_seed(0)
    net = TimeMajor().eval()
    x = np.random.default_rng(0).standard_normal((3, 5, 6)).astype(np.float32)
    model = sonnx.load(torch_to_onnx(net, x))
    kinds = [type(m).__name__ + (":" + m.op_type if isinstance(m, nn.OnnxOp) else "") for m in model.children()]
    assert kinds.count("Linear") == 1 and "OnnxOp:MatMul" not in kinds and "OnnxOp:Add" not in kinds, kinds
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
    y, cache = model.forward(x, training=True)
    gx = model.backward(cache, np.ones_like(y), model.zeros_like_parameters())
    xt = torch.from_numpy(x).requires_grad_(True)
    net(xt).sum().backward()
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-5, atol=1e-6)
    sonnx.save(model, tmp_path / "m.onnx", (5, 6))
    np.testing.assert_allclose(sonnx.load(str(tmp_path / "m.onnx"))(x), want, rtol=1e-5, atol=1e-6)
