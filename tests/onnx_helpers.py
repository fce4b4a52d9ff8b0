"""Test helpers for the ONNX tests: export a torch module to bytes (the legacy exporter works offline; the
dynamo exporter needs onnxscript), and build small ONNX graphs by hand with onnx.helper."""
import io

import numpy as np


def torch_to_onnx(module, x, *, opset=17, preserve_batchnorm=False, dynamic_batch=True) -> bytes:
    """``torch.onnx.export(dynamo=False)`` of ``module`` in eval mode on example input ``x`` (numpy).

    ``preserve_batchnorm`` exports with ``TrainingMode.PRESERVE`` so BatchNormalization nodes stay separate
    (the default EVAL mode folds them into the preceding Conv)."""
    import torch
    module.eval()
    buf = io.BytesIO()
    kwargs = {"training": torch.onnx.TrainingMode.PRESERVE} if preserve_batchnorm else {}
    torch.onnx.export(module, (torch.from_numpy(x),), buf, dynamo=False, opset_version=opset,
                      input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "N"}, "y": {0: "N"}} if dynamic_batch else None, **kwargs)
    return buf.getvalue()


def make_model(nodes, inputs, outputs, initializers=(), opset=17) -> bytes:
    """A serialized ModelProto from onnx.helper parts: ``inputs``/``outputs`` are (name, shape) pairs."""
    import onnx
    from onnx import helper, numpy_helper
    graph = helper.make_graph(
        nodes, "test",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in initializers])
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets,
                             ir_version=helper.find_min_ir_version_for(opsets)).SerializeToString()


def torch_to_onnx_dynamo(module, x, *, optimize=True, opset=None) -> bytes:
    """``torch.onnx.export(dynamo=True)`` (the default exporter since torch 2.9; needs onnxscript) of ``module`` in
    eval mode on example input ``x`` (numpy), batch axis dynamic.

    ``optimize=True`` (the default) lets onnxscript fold BatchNorm into the preceding Conv and constant-fold;
    ``optimize=False`` keeps the BatchNormalization nodes (and the unoptimised glue: Constant, CastLike,
    Expand)."""
    import logging
    import warnings

    import torch
    module.eval()
    kwargs = {} if opset is None else {"opset_version": opset}
    logging.disable(logging.WARNING)  # the exporter logs that torchvision's operators are not registered
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(module, (torch.from_numpy(x),), None, dynamo=True, input_names=["x"],
                                        output_names=["y"], optimize=optimize, verbose=False,
                                        dynamic_shapes=({0: torch.export.Dim("N", min=1, max=1024)},), **kwargs)
    finally:
        logging.disable(logging.NOTSET)
    return program.model_proto.SerializeToString()
