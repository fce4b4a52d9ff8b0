"""Conv2d's algorithms (depthwise, direct, pointwise, winograd, im2col): each equals the others and PyTorch on the
same inputs, the new kernels pass a float64 gradient check, and the rule's table picks the documented algorithm
for representative zoo layers (asserted as a table, not by timing)."""
import numpy as np
import pytest

from sparkdl import nn
from sparkdl.nn import conv_chunks, conv_im2col
from sparkdl.nn.conv import conv2d_backward, conv2d_forward
from sparkdl.nn.conv_algorithm import ConvShape, eligible_algorithms, live_taps, plan, winograd_tile_use
from tests.gradcheck import layer_gradcheck

torch = pytest.importorskip("torch")

#: (Conv2d arguments, input (N, H, W)): every algorithm, strides, dilation, odd sizes, both 1x1 layouts.
SHAPES = [
    (dict(in_channels=12, out_channels=12, kernel_size=3, padding=1, groups=12), (3, 9, 7)),  # depthwise s1
    (dict(in_channels=8, out_channels=8, kernel_size=3, stride=2, padding=1, groups=8), (2, 11, 10)),  # s2
    (dict(in_channels=2, out_channels=2, kernel_size=3, padding=1, groups=2), (2, 44, 45)),  # row-wise backward
    (dict(in_channels=6, out_channels=6, kernel_size=(3, 2), stride=(2, 1), padding=(1, 2), dilation=(1, 2),
          groups=6), (2, 9, 7)),
    (dict(in_channels=4, out_channels=4, kernel_size=5, stride=2, padding=2, groups=4), (2, 13, 12)),  # 5x5 s2
    (dict(in_channels=4, out_channels=4, kernel_size=(5, 3), stride=2, padding=(3, 1), dilation=(1, 2), groups=4),
     (2, 12, 11)),  # stride 2 with dilation: the generic taps on the column-split plane
    (dict(in_channels=4, out_channels=4, kernel_size=5, padding=2, groups=4), (2, 7, 9)),  # 5x5 s1
    (dict(in_channels=3, out_channels=3, kernel_size=3, stride=2, padding=1, groups=3), (2, 31, 30)),  # row by row
    (dict(in_channels=3, out_channels=3, kernel_size=3, stride=2, padding=2, groups=3), (2, 30, 33)),  # even pad
    (dict(in_channels=3, out_channels=3, kernel_size=5, stride=2, padding=1, groups=3), (2, 34, 31)),  # 5x5 rows
    (dict(in_channels=3, out_channels=3, kernel_size=(2, 4), stride=(1, 3), groups=3), (2, 6, 14)),  # generic row
    (dict(in_channels=3, out_channels=5, kernel_size=3, padding=1), (2, 8, 6)),  # direct
    (dict(in_channels=3, out_channels=9, kernel_size=3, stride=(2, 3), padding=(1, 2), dilation=(2, 1)), (2, 13, 17)),
    # direct on stride phases: 2 x 3 planes, two channel blocks and one channel alone
    (dict(in_channels=2, out_channels=6, kernel_size=3, padding=1), (1, 70, 66)),  # direct in 3 row tiles (30+30+10)
    (dict(in_channels=16, out_channels=24, kernel_size=1), (3, 5, 4)),  # pointwise, gathered layout
    (dict(in_channels=8, out_channels=12, kernel_size=1), (2, 16, 15)),  # pointwise, per-sample GEMMs
    (dict(in_channels=16, out_channels=24, kernel_size=1, stride=2), (3, 7, 8)),  # subsampled
    (dict(in_channels=9, out_channels=10, kernel_size=3, padding=1), (3, 8, 9)),  # winograd
    (dict(in_channels=10, out_channels=12, kernel_size=3, stride=2, padding=1), (2, 7, 7)),  # im2col
    (dict(in_channels=128, out_channels=132, kernel_size=3, padding=1), (2, 3, 2)),  # im2col, grad_W direct
]


def _torch_reference(args, x, gy):
    tm = torch.nn.Conv2d(**args).double()
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = tm(xt)
    yt.backward(torch.from_numpy(gy))
    return tm, yt.detach().numpy(), xt.grad.numpy(), tm.weight.grad.numpy()


@pytest.mark.parametrize("args, nhw", SHAPES, ids=lambda v: str(v) if isinstance(v, tuple) else None)
def test_every_algorithm_equals_the_others_and_pytorch(args, nhw):
    rng = np.random.default_rng(0)
    m = nn.Conv2d(**args).initialize(1)
    x = rng.standard_normal((nhw[0], args["in_channels"]) + nhw[1:])
    ho, wo = m.output_size(*nhw[1:])
    gy = rng.standard_normal((nhw[0], args["out_channels"], ho, wo))
    tm = torch.nn.Conv2d(**args).double()
    tm.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in m.state_dict().items()})
    xt = torch.from_numpy(x).requires_grad_(True)
    yt = tm(xt)
    yt.backward(torch.from_numpy(gy))
    ref = yt.detach().numpy(), xt.grad.numpy(), tm.weight.grad.numpy()
    algorithms = eligible_algorithms(m.shape_for(x.shape))
    for dtype, rtol in ((np.float64, 1e-12), (np.float32, 1e-4)):
        w, b = m.weight.astype(dtype), m.bias.astype(dtype)
        for a in algorithms:
            y = conv2d_forward(a, x.astype(dtype), w, b, m.geometry(), ho, wo)
            gw = np.zeros_like(w)
            gx = conv2d_backward(a, x.astype(dtype), w, gy.astype(dtype), m.geometry(), gw)
            for got, want, what in zip((y, gx, gw), ref, ("output", "input gradient", "weight gradient")):
                assert got.dtype == dtype
                scale = np.abs(want).max()
                np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=f"{a} {dtype} {what}")


@pytest.mark.parametrize("args, nhw", [
    (dict(in_channels=4, out_channels=4, kernel_size=3, padding=1, groups=4), (2, 5, 4)),
    (dict(in_channels=3, out_channels=3, kernel_size=(2, 3), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
          groups=3, bias=False), (2, 5, 7)),
    (dict(in_channels=5, out_channels=9, kernel_size=1), (2, 3, 4)),
    (dict(in_channels=5, out_channels=9, kernel_size=1, stride=(2, 3), bias=False), (2, 5, 7)),
    (dict(in_channels=4, out_channels=10, kernel_size=3, padding=1), (2, 1, 1)),  # cut to its centre tap
])
def test_new_kernels_gradcheck_float64(args, nhw):
    m = nn.Conv2d(**args).initialize(2).astype(np.float64)
    x = np.random.default_rng(5).standard_normal((nhw[0], args["in_channels"]) + nhw[1:])
    assert m.algorithm(x.shape) in ("depthwise", "pointwise")
    layer_gradcheck(m, x, training=True)


def test_layer_runs_the_rule_and_matches_pytorch_float32():
    """Conv2d itself (the rule's algorithm, padding-only taps cut) on layers of ResNet-18 at 32x32 input."""
    rng = np.random.default_rng(3)
    for args, hw, want in ((dict(in_channels=32, out_channels=48, kernel_size=3, padding=1), 1, "pointwise"),
                           (dict(in_channels=32, out_channels=48, kernel_size=3, padding=1), 2, "im2col"),
                           (dict(in_channels=16, out_channels=32, kernel_size=1, stride=2, bias=False), 4,
                            "pointwise"),
                           (dict(in_channels=32, out_channels=32, kernel_size=3, padding=1, groups=32), 6,
                            "depthwise")):
        m = nn.Conv2d(**args).initialize(4)
        x = rng.standard_normal((5, args["in_channels"], hw, hw)).astype(np.float32)
        assert m.algorithm(x.shape) == want
        y, cache = m.forward(x)
        gy = rng.standard_normal(y.shape).astype(np.float32)
        gp = m.zeros_like_parameters()
        gx = m.backward(cache, gy, gp)
        tm, ty, tgx, tgw = _torch_reference(args, x.astype(np.float64), gy.astype(np.float64))
        tm.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in m.state_dict().items()})
        tm.zero_grad()
        xt = torch.from_numpy(x.astype(np.float64)).requires_grad_(True)
        yt = tm(xt)
        yt.backward(torch.from_numpy(gy.astype(np.float64)))
        grads = m.parameter_layout().views(gp)
        for got, t in ((y, yt.detach()), (gx, xt.grad), (grads["weight"], tm.weight.grad)):
            t = t.numpy()
            np.testing.assert_allclose(got, t, rtol=1e-4, atol=1e-4 * np.abs(t).max())


def _choice(cin, cout, hw, k=3, s=1, g=1, batch=64, p=None):
    p = (k - 1) // 2 if p is None else p
    return plan(ConvShape(cin, cout, hw, hw, (k, k), (s, s), (p, p), (1, 1), g, batch, 1))[0]


def test_rule_table_resnet18():
    # layer: (in, out, input size, kernel, stride) -> algorithm, at 32x32 (batch 64) and 224x224 (batch 4)
    table = {
        32: [((3, 64, 32, 7, 2), "im2col"), ((64, 64, 8, 3, 1), "winograd"),
             ((64, 128, 8, 3, 2), "im2col"), ((128, 128, 4, 3, 1), "im2col"), ((64, 128, 8, 1, 2), "pointwise"),
             ((256, 256, 2, 3, 1), "im2col"), ((128, 256, 4, 1, 2), "pointwise"),
             ((512, 512, 1, 3, 1), "pointwise"), ((256, 512, 2, 3, 2), "im2col")],
        224: [((3, 64, 224, 7, 2), "im2col"), ((64, 64, 56, 3, 1), "winograd"), ((128, 128, 28, 3, 1), "winograd"),
              ((256, 256, 14, 3, 1), "winograd"), ((512, 512, 7, 3, 1), "im2col"), ((256, 512, 14, 1, 2), "pointwise"),
              ((256, 512, 14, 3, 2), "im2col")],
    }
    for size, rows in table.items():
        for (cin, cout, hw, k, s), want in rows:
            assert _choice(cin, cout, hw, k, s, batch=64 if size == 32 else 4) == want, (size, cin, cout, hw, k, s)


def test_rule_table_mobilenet_v2_lenet_small_cnn():
    for hw, c, s in ((112, 32, 1), (112, 96, 2), (56, 144, 1), (28, 192, 2), (14, 576, 1), (7, 960, 1)):
        assert _choice(c, c, hw, 3, s, g=c, batch=4) == "depthwise"
    assert _choice(32, 16, 112, 1, batch=4) == "pointwise" and _choice(960, 320, 7, 1, batch=4) == "pointwise"
    assert _choice(3, 32, 224, 3, 2, batch=4) == "im2col"  # MobileNetV2's stem
    assert _choice(32, 64, 16, 3, g=2) == "im2col"  # grouped, not depthwise
    assert _choice(1, 6, 28, 5, p=2, batch=128) == "direct" and _choice(6, 16, 14, 5, p=0, batch=128) == "im2col"
    assert [_choice(3, 32, 32), _choice(32, 32, 32), _choice(32, 64, 16), _choice(64, 64, 16)] == \
        ["im2col", "winograd", "winograd", "winograd"]  # the small CNN, as before the rule


def test_winograd_tile_use_and_live_taps():
    use = {hw: round(winograd_tile_use(ConvShape(8, 8, hw, hw, padding=(1, 1))), 3) for hw in (1, 4, 7, 8, 14)}
    assert use == {1: 0.125, 4: 0.667, 7: 0.613, 8: 0.8, 14: 0.875}
    taps, cut = live_taps(ConvShape(8, 8, 1, 1, padding=(1, 1)))
    assert taps == ((1, 1), (1, 1)) and cut.kernel_size == (1, 1) and cut.padding == (0, 0)
    taps, cut = live_taps(ConvShape(8, 8, 1, 5, padding=(1, 1)))  # rows cut, columns kept
    assert taps == ((1, 1), (0, 2)) and cut.kernel_size == (1, 3) and cut.padding == (0, 1)
    taps, cut = live_taps(ConvShape(8, 8, 2, 2, stride=(2, 2), padding=(1, 1)))  # live rows 1..2: asymmetric
    assert taps == ((0, 2), (0, 2)) and cut.kernel_size == (3, 3)


def test_chunks_of_large_weights_hold_enough_columns():
    geom = conv_im2col.ConvGeometry((3, 3), (1, 1), (1, 1), (1, 1), 1)
    *_, nb = conv_im2col.im2col_plan(geom, (64, 256, 2, 2), 2, 2, 256, 4)  # weights 2.4 MB: >= 256 columns
    assert nb == 64
    *_, wq, _, _, nb = conv_im2col.im2col_plan(geom, (64, 64, 8, 8), 8, 8, 64, 4)  # weights 147 KB: L2 chunks
    assert wq == 10 and nb == conv_chunks._CHUNK_BYTES // ((64 * 9 + 64) * 8 * wq * 4) == 2


def _depthwise_in_order(x, w, b, stride, padding, dilation, ho, wo):
    """The depthwise convolution summed as the kernels document it: the bias, then every tap in ``(i, j)`` order
    over the zero-padded input (padding taps included), each product and sum rounded in x's dtype."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    y = np.broadcast_to(b[None, :, None, None], (x.shape[0], x.shape[1], ho, wo)).copy()
    for i in range(w.shape[2]):
        for j in range(w.shape[3]):
            tap = xp[:, :, i * dh:i * dh + (ho - 1) * sh + 1:sh, j * dw:j * dw + (wo - 1) * sw + 1:sw]
            y = y + w[None, :, 0, i, j, None, None] * tap
    return y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_depthwise_layouts_sum_in_the_documented_order_bit_for_bit(dtype):
    """Every layout of the depthwise forward -- wide (stride 1), quarter (small stride-2 planes), column-split rows
    (large stride-2 planes), generic rows -- gives the bits of the documented order of summation."""
    from sparkdl.kernels.conv_depthwise import _QUARTER_MAX_POSITIONS, depthwise_forward
    rng = np.random.default_rng(11)
    side = int(np.sqrt(_QUARTER_MAX_POSITIONS)) * 2 + 4  # a stride-2 output just above the quarter layout's limit
    cases = [((3, 3), (1, 1), (1, 1), (1, 1), 9), ((5, 5), (2, 2), (2, 2), (1, 1), 13),  # wide, quarter
             ((3, 3), (2, 2), (1, 1), (1, 1), side), ((3, 5), (2, 2), (2, 3), (2, 1), 12),  # rows, quarter dilated
             ((2, 4), (1, 3), (0, 1), (1, 2), 11), ((3, 3), (3, 2), (1, 1), (1, 1), 10)]  # generic, rows
    for k, s, p, d, hw in cases:
        x = rng.standard_normal((2, 5, hw, hw + 1)).astype(dtype)
        w, b = rng.standard_normal((5, 1) + k).astype(dtype), rng.standard_normal(5).astype(dtype)
        ho = (hw + 2 * p[0] - d[0] * (k[0] - 1) - 1) // s[0] + 1
        wo = (hw + 1 + 2 * p[1] - d[1] * (k[1] - 1) - 1) // s[1] + 1
        got = depthwise_forward(x, w, b, *s, *p, *d, ho, wo, 0, 0.0, 0.0)
        want = _depthwise_in_order(x, w, b, s, p, d, ho, wo)
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8), err_msg=str((k, s, p, d, hw)))
