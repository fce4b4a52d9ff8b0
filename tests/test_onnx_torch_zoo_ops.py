"""PyTorch parity, forward and backward, of the zoo's operators as both of PyTorch's exporters write them:
ReLU6/Hardtanh/clamp (Clip), PReLU, Hardsigmoid, Hardswish, Softplus (with beta), erf, sum/amax/amin over
axes, split, maximum/minimum, reflect and constant padding, einsum; ConvTranspose2d, InstanceNorm2d, GroupNorm and
nearest/bilinear interpolation -- and the native layers' export round trip (sparkdl -> ONNX -> onnxruntime and
back)."""
import numpy as np
import pytest

from sparkdl import nn

torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")
sonnx = pytest.importorskip("sparkdl.onnx")
F = torch.nn.functional

from tests.onnx_helpers import torch_to_onnx, torch_to_onnx_dynamo  # noqa: E402


class ZooOps(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.prelu, self.prelu1 = torch.nn.PReLU(4), torch.nn.PReLU()
        self.mix = torch.nn.Module()
        self.mix.weight = torch.nn.Parameter(torch.linspace(-1, 1, 36).reshape(6, 6))
        with torch.no_grad():
            self.prelu.weight.copy_(torch.tensor([0.1, -0.2, 0.3, 0.05]))

    def forward(self, x):
        h = self.prelu(self.conv(x))
        a = F.relu6(h * 4) + F.hardtanh(h, -0.5, 2.0) + torch.clamp(h, min=0.1) + torch.clamp(h, max=0.3)
        b = F.hardsigmoid(h * 4) * F.hardswish(h * 4) + F.softplus(h) + torch.erf(h) + F.softplus(h, beta=2.0)
        s = h.sum(dim=(2, 3), keepdim=True) + h.amax(dim=1, keepdim=True) - h.amin(dim=3, keepdim=True)
        p, q = torch.split(h, [1, 3], dim=1)
        m = torch.maximum(p, q[:, :1]) + torch.minimum(p, q[:, 1:2])
        r = F.pad(h, (1, 1, 2, 0), mode="reflect")[:, :, 1:-1, 1:-1]
        c = F.pad(h, (1, 1, 1, 1), value=0.5)[:, :, :-2, 2:]
        e = torch.einsum("nchw,wv->nchv", h, self.mix.weight)
        return a + b + s + m + r + c + e + self.prelu1(h)


class ZooSpatial(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up = torch.nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)
        self.inorm, self.gnorm = torch.nn.InstanceNorm2d(4, affine=True), torch.nn.GroupNorm(2, 4)
        self.plain = torch.nn.InstanceNorm2d(4)  # affine=False: no parameters, none imported
        with torch.no_grad():
            for norm in (self.inorm, self.gnorm):
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        h = self.up(x)  # (N, 4, 8, 10)
        h = self.inorm(h) + self.gnorm(h) + self.plain(h) * 0.5
        near = F.interpolate(h, scale_factor=2, mode="nearest")[:, :, ::2, ::2]
        lin = F.interpolate(h, scale_factor=2, mode="bilinear")[:, :, 1::2, 1::2]
        corners = F.interpolate(h, size=(8, 10), mode="bilinear", align_corners=True)
        return h + near + lin + corners


def _export(exporter, tm, x):
    if exporter == "dynamo":
        return torch_to_onnx_dynamo(tm, x)
    return torch_to_onnx(tm, x, opset=int(exporter.split("-")[1]))


def _match_torch(model, tm, x, seed=1, param_atol=1e-3):
    """The imported ``model`` against ``tm``: output, input gradient and every parameter's gradient by name."""
    y, cache = model.forward(x, training=True)
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = tm(xt)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-5, atol=1e-5)
    gy = np.random.default_rng(seed).standard_normal(y.shape).astype(np.float32)
    gp = model.zeros_like_parameters()
    gx = model.backward(cache, gy, gp)
    yt.backward(torch.from_numpy(gy))
    np.testing.assert_allclose(gx, xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    grads = model.parameter_layout().views(gp)
    assert set(grads) == set(dict(tm.named_parameters()))
    for name, p in tm.named_parameters():
        np.testing.assert_allclose(grads[name], p.grad.numpy().reshape(grads[name].shape), rtol=1e-4,
                                   atol=param_atol, err_msg=name)


@pytest.mark.parametrize("exporter", ["legacy-13", "legacy-17", "dynamo"])
@pytest.mark.parametrize("net", ["ops", "spatial"])
def test_forward_and_backward_match_torch(exporter, net):
    torch.manual_seed(0)
    tm = ZooOps() if net == "ops" else ZooSpatial()
    x = np.random.default_rng(0).standard_normal((2, 3, 6, 6) if net == "ops" else (2, 3, 4, 5)).astype(np.float32)
    _match_torch(sonnx.load(_export(exporter, tm, x)), tm, x)


PADDED_CONVS = {
    "same-even-kernel": lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 4, 4, padding="same")),
    "zeropad-stride2": lambda: torch.nn.Sequential(torch.nn.ZeroPad2d((0, 1, 0, 1)), torch.nn.Conv2d(3, 4, 3, 2)),
    "reflect-then-conv": lambda: torch.nn.Sequential(torch.nn.ReflectionPad2d((2, 1, 0, 1)), torch.nn.Conv2d(3, 4, 3)),
}


@pytest.mark.parametrize("exporter", ["legacy-17", "dynamo"])
@pytest.mark.parametrize("name", PADDED_CONVS)
def test_asymmetric_padding_before_a_convolution(exporter, name):
    """Asymmetric Conv pads (what the dynamo exporter makes of a ZeroPad2d + Conv2d, and padding='same' with an
    even kernel) import as a zero Pad and a Conv2d; the legacy exporter's computed pads fold."""
    torch.manual_seed(1)
    tm = PADDED_CONVS[name]()
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 7)).astype(np.float32)
    model = sonnx.load(_export(exporter, tm, x))
    assert any(isinstance(m, nn.Conv2d) for _, m in model.named_modules())
    _match_torch(model, tm, x, seed=4, param_atol=1e-4)


POOLS = {
    "local-response-norm": (lambda: torch.nn.Sequential(torch.nn.LocalResponseNorm(3, alpha=0.1, k=1.5)), (2, 5, 4, 3)),
    "avg-pool-1d": (lambda: torch.nn.Sequential(torch.nn.AvgPool1d(3, 2, padding=1, count_include_pad=False)),
                    (2, 3, 9)),
    "avg-pool-3d": (lambda: torch.nn.Sequential(torch.nn.AvgPool3d((2, 1, 3), (1, 2, 1))), (2, 2, 3, 4, 5)),
}


@pytest.mark.parametrize("exporter", ["legacy-17", "dynamo"])
@pytest.mark.parametrize("name", POOLS)
def test_pooling_beyond_2d_and_local_response_norm(tmp_path, exporter, name):
    """1-D and 3-D AveragePool import as generic nodes -- and with them LocalResponseNorm as the dynamo exporter
    writes it (Pad, a 3-D AveragePool over the channels, Pow, Div); the legacy exporter's LocalResponseNorm has an
    If node, refused naming it."""
    make, shape = POOLS[name]
    tm = make()
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    data = _export(exporter, tm, x)
    if name == "local-response-norm" and exporter != "dynamo":
        with pytest.raises(sonnx.OnnxImportError, match=r"\(If\): unsupported operator If"):
            sonnx.load(data)
        return
    model = sonnx.load(data)
    _match_torch(model, tm, x)
    path = sonnx.save(model, tmp_path / "back.onnx", input_shape=shape[1:])  # and out again
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0], model(x), rtol=1e-5,
                               atol=1e-6)


NATIVE = [
    ("relu6-hardtanh", lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.ReLU6(), nn.Hardtanh(-0.3, 0.6),
                                             nn.Hardtanh(None, 0.4), nn.Hardtanh(0.1, None)), (2, 5, 5), 20),
    ("hard-mobile", lambda: nn.Sequential(nn.Linear(6, 8), nn.Hardswish(), nn.Hardsigmoid(), nn.SiLU()), (6,), 20),
    ("hardswish-opset13", lambda: nn.Sequential(nn.Linear(6, 8), nn.Hardswish()), (6,), 13),
    ("prelu", lambda: nn.Sequential(nn.Conv2d(2, 3, 1), nn.PReLU(3), nn.Flatten(), nn.PReLU()), (2, 4, 4), 17),
    ("conv-transpose", lambda: nn.Sequential(nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1),
                                             nn.ConvTranspose2d(4, 4, 2, groups=2, dilation=2, bias=False)),
     (2, 3, 4), 17),
    ("group-norm", lambda: nn.Sequential(nn.GroupNorm(4, 4), nn.GroupNorm(2, 4), nn.GroupNorm(1, 4, affine=False),
                                         nn.GroupNorm(4, 4, affine=False)),
     (4, 3, 5), 17),
    ("upsample", lambda: nn.Sequential(nn.Upsample(scale_factor=2), nn.Upsample(scale_factor=1.5, mode="bilinear"),
                                       nn.Upsample(size=(7, 5), mode="bilinear", align_corners=True),
                                       nn.Upsample(size=(9, 9))), (2, 3, 4), 18),
    ("softplus", lambda: nn.Sequential(nn.Linear(5, 7), nn.Softplus(), nn.Softplus(beta=2.0, threshold=1.0),
                                       nn.Softplus(beta=-0.5)), (5,), 17),
]


@pytest.mark.parametrize("name, make, shape, opset", NATIVE, ids=[c[0] for c in NATIVE])
def test_native_layers_export_round_trip(tmp_path, name, make, shape, opset):
    model = make().initialize(3)
    for _, m in model.named_modules():
        if isinstance(m, (nn.PReLU, nn.GroupNorm)):
            for _, p in m.named_parameters():
                p[...] = np.linspace(-0.4, 0.6, p.size)
    x = (np.random.default_rng(2).standard_normal((4, *shape)) * 3).astype(np.float32)
    path = sonnx.save(model, tmp_path / "m.onnx", input_shape=shape, opset=opset)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"input": x})[0], model(x), rtol=1e-5, atol=1e-5)
    back = sonnx.load(path)
    assert [n for n, _ in back.named_parameters()] == [n for n, _ in model.named_parameters()]
    np.testing.assert_allclose(back(x), model(x), rtol=1e-6, atol=1e-6)
    if opset >= 14 and name not in ("softplus", "group-norm"):  # each layer back as itself (not the composites)
        assert [type(m) for m in back] == [type(m) for m in model]
        assert list(back.state_dict()) == list(model.state_dict())
