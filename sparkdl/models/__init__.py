"""The model zoo: builders of reference architectures with PyTorch ``state_dict`` names.

Every builder returns an ordinary sparkdl module (mostly a :class:`~sparkdl.nn.Graph` whose node names are
torchvision's attribute paths), so weights saved from the PyTorch model with safetensors load directly::

    from sparkdl import io, models
    model = io.load_safetensors(models.resnet18(num_classes=10), "resnet18.safetensors")

========================  ==========================================================  =====================
builder                   architecture                                                input
========================  ==========================================================  =====================
``lenet5``, ``mlp``,      the first reference networks (LeNet-5, an MLP, a small CNN)  (N, 1, 28, 28), ...
``small_cnn``
``resnet18/34/50``        ResNet, torchvision's ImageNet layout                       (N, 3, H, W)
``resnet20``              CIFAR ResNet-20 (option B shortcuts)                        (N, 3, 32, 32)
``mobilenet_v2``          MobileNetV2 (ReLU6, inverted residuals)                     (N, 3, H, W)
``mobilenet_v3_small``    MobileNetV3-small (Hardswish, squeeze-excitation)           (N, 3, H, W)
``vgg11_bn``              VGG-11 with BatchNorm                                       (N, 3, H, W)
``squeezenet1_1``         SqueezeNet 1.1 (Fire modules: Concat of expands)            (N, 3, H, W)
``bert_mini``             BERT-mini encoder classifier with padding mask              (ids, mask) (N, T)
``rnn_classifier``        (bi-directional) GRU/LSTM text classifier                   (N, T) ids, -1 padded
``ncf``                   NeuMF recommender (GMF + MLP towers, embedding tables)      (user, item) (N,)
========================  ==========================================================  =====================
"""
from sparkdl.models.bert import BertClassifier, BertEmbeddings, bert_mini
from sparkdl.models.classic import lenet5, mlp, small_cnn
from sparkdl.models.mobilenet import mobilenet_v2, mobilenet_v3_small
from sparkdl.models.ncf import ncf
from sparkdl.models.resnet import resnet18, resnet20, resnet34, resnet50
from sparkdl.models.rnn import rnn_classifier
from sparkdl.models.squeezenet import squeezenet1_1
from sparkdl.models.vgg import vgg11_bn

__all__ = ["lenet5", "mlp", "small_cnn", "resnet18", "resnet34", "resnet50", "resnet20", "mobilenet_v2",
           "mobilenet_v3_small", "vgg11_bn", "squeezenet1_1", "bert_mini", "rnn_classifier", "ncf",
           "BertClassifier", "BertEmbeddings", "MODELS"]

#: Model builders by name (the command line offers the first ones; tests/zoo_torch.py twins every one).
MODELS = {"lenet5": lenet5, "mlp": mlp, "small_cnn": small_cnn, "resnet18": resnet18, "resnet34": resnet34,
          "resnet50": resnet50, "resnet20": resnet20, "mobilenet_v2": mobilenet_v2,
          "mobilenet_v3_small": mobilenet_v3_small, "vgg11_bn": vgg11_bn, "squeezenet1_1": squeezenet1_1,
          "bert_mini": bert_mini, "rnn_classifier": rnn_classifier, "ncf": ncf}
