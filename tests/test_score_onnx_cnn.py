"""examples/score_onnx_cnn.py on a small input: a PyTorch MobileNetV2 exported to ONNX (both exporters), imported,
scored on Spark with ``DLModel.transform`` over a DataFrame of PNG images, and compared with onnxruntime and
PyTorch on the same images."""

import pytest

from tests.examples import load_example

pytest.importorskip("torch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("PIL")


def _example():
    return load_example("score_onnx_cnn")


def test_state_dict_names_are_torchvision_s():
    """The example's network loads torchvision's MobileNetV2 weights: the same state_dict keys and shapes as the
    torchvision-layout copy in tests/zoo_cnn.py."""
    from tests.zoo_cnn import MobileNetV2
    ours, ref = _example().mobilenet_v2(10, 0.5).state_dict(), MobileNetV2(10, width_mult=0.5).state_dict()
    assert [(k, tuple(v.shape)) for k, v in ours.items()] == [(k, tuple(v.shape)) for k, v in ref.items()]


@pytest.mark.slow
def test_example_on_small_images(spark, tmp_path):
    """The example's default, PyTorch's default exporter (dynamo); the notebook's test takes the legacy one."""
    res = _example().run(spark, images=6, size=32, width_mult=0.35, num_classes=10, exporter="dynamo",
                         workdir=str(tmp_path))
    assert res["rows_scored"] == 6
    # measured ~1e-7 against a largest logit of ~0.3 (64x64, width 0.5): float32 rounding only
    assert res["max_abs_diff_onnxruntime"] < 1e-5 * max(res["logit_scale"], 1.0)
    assert res["max_abs_diff_torch"] < 1e-5 * max(res["logit_scale"], 1.0)
    assert res["same_top_class"] == 1.0
    assert res["logit_scale"] > 1e-3  # the logits are not all zero, so the comparison means something
