"""Neural collaborative filtering (NeuMF): a GMF tower and an MLP tower over user and item embedding tables,
joined by one linear layer. Parameter names: ``user_gmf.weight``, ``item_mlp.weight``, ``mlp.1.weight``,
``predict.bias``."""
from __future__ import annotations

from sparkdl import nn
from sparkdl.models._blocks import check_int, check_probability, check_widths

__all__ = ["ncf"]


def ncf(num_users: int, num_items: int, factors: int = 8, mlp_layers=(64, 32, 16), dropout: float = 0.0) -> nn.Graph:
    r"""NeuMF: :math:`\hat y = w^T [p^G_u \odot q^G_i ;\ \mathrm{MLP}([p^M_u ; q^M_i])] + b`, the logit that user u
    interacts with item i (train with :class:`~sparkdl.nn.BCEWithLogitsLoss`).

    Parameters
    ----------
    num_users, num_items : int
        Rows of the embedding tables (ids 0..num_users-1 and 0..num_items-1).
    factors : int, default 8
        Width of the GMF embeddings (the predictive factors).
    mlp_layers : tuple of int, default (64, 32, 16)
        Widths of the MLP tower: its input (the user and item MLP embeddings are ``mlp_layers[0] // 2`` wide
        each), then each hidden layer (Dropout - Linear - ReLU).
    dropout : float, default 0
        Dropout before each MLP layer.

    Shapes
    ------
    - input: a tuple ``(user, item)`` of (N,) int64 ids
    - output: (N, 1) logits

    ``(num_users + num_items) * (factors + mlp_layers[0] // 2)`` embedding parameters (the large tables) plus
    the MLP's and ``factors + mlp_layers[-1] + 1`` for ``predict``: 122,633 for 1,000 users, 2,000 items and
    the defaults.

    Raises
    ------
    TypeError, ValueError
        Non-positive sizes, an ``mlp_layers`` that is not a tuple of at least two positive ints (the first even),
        ``dropout`` outside [0, 1).

    References
    ----------
    He, Liao, Zhang, Nie, Hu & Chua, 2017, "Neural Collaborative Filtering" (NeuMF without pre-training).
    """
    b = "ncf"
    num_users, num_items = check_int(b, "num_users", num_users), check_int(b, "num_items", num_items)
    factors = check_int(b, "factors", factors)
    mlp_layers = check_widths(b, "mlp_layers", mlp_layers, min_len=2)
    if mlp_layers[0] % 2:
        raise ValueError(f"{b}: mlp_layers[0] must be even (user and item MLP embeddings of half its width each), "
                         f"got {mlp_layers[0]}")
    dropout = check_probability(b, "dropout", dropout)
    half = mlp_layers[0] // 2
    layers, width = [], mlp_layers[0]
    for w in mlp_layers[1:]:
        layers += [nn.Dropout(dropout), nn.Linear(width, w), nn.ReLU()]
        width = w
    return nn.Graph(["user", "item"], [
        ("user_gmf", nn.Embedding(num_users, factors), "user"), ("item_gmf", nn.Embedding(num_items, factors), "item"),
        ("user_mlp", nn.Embedding(num_users, half), "user"), ("item_mlp", nn.Embedding(num_items, half), "item"),
        ("gmf", nn.OnnxOp("Mul", inputs=("x", "x")), ["user_gmf", "item_gmf"]),
        ("mlp_input", nn.Concatenate(dim=1), ["user_mlp", "item_mlp"]),
        ("mlp", nn.Sequential(*layers), "mlp_input"),
        ("cat", nn.Concatenate(dim=1), ["gmf", "mlp"]),
        ("predict", nn.Linear(factors + width, 1), "cat")], "predict")
