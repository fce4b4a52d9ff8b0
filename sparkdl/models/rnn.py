"""A recurrent text classifier: token embedding, a (bi-directional) GRU or LSTM, the final hidden states, a linear
head. Parameter names: ``embedding.weight``, ``rnn.weight_ih_l0_reverse``, ``fc.weight`` (those of a torch module
with attributes ``embedding``, ``rnn``, ``fc``)."""
from __future__ import annotations

from sparkdl import nn
from sparkdl.models._blocks import check_bool, check_choice, check_int

__all__ = ["rnn_classifier"]

_CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


def rnn_classifier(vocab: int, embed: int, hidden: int, num_classes: int = 2, cell: str = "gru",
                   bidirectional: bool = True, num_layers: int = 1) -> nn.Graph:
    """Embedding -> GRU/LSTM (batch first) -> last layer's final hidden state per direction, concatenated
    (forward, reverse) -> Linear.

    Rows are right-padded with -1 (:class:`~sparkdl.nn.SequenceLengths` reads each row's length): padded steps
    are not looked up and the recurrence stops at each row's last token, as PyTorch's packed sequences.

    Parameters
    ----------
    vocab : int
        Vocabulary size V (ids 0..V-1).
    embed : int
        Embedding width E.
    hidden : int
        Hidden size H of each direction.
    num_classes : int, default 2
    cell : {'gru', 'lstm'}, default 'gru'
    bidirectional : bool, default True
    num_layers : int, default 1

    Shapes
    ------
    - input: (N, T) int64 token ids (or float32 holding integers, as Spark's blocks), -1 after each row's end
    - output: (N, num_classes) logits

    Parameters: ``V*E`` (embedding) + ``G*H*(in + H + 2)`` per direction and layer (G = 3 for GRU, 4 for LSTM;
    ``in`` = E for the first layer, D*H after; D = 2 when bidirectional) + ``(D*H + 1)*num_classes``; 28,802 for
    V = 500, E = H = 32, 2 classes, bi-GRU.

    Raises
    ------
    TypeError, ValueError
        Non-positive sizes, an unknown ``cell``, a non-bool ``bidirectional`` (the message names the argument).

    References
    ----------
    Cho et al., 2014 (GRU); Hochreiter & Schmidhuber, 1997 (LSTM); Schuster & Paliwal, 1997, "Bidirectional
    Recurrent Neural Networks"; ``torch.nn.GRU``/``torch.nn.LSTM`` with ``pack_padded_sequence``.
    """
    b = "rnn_classifier"
    vocab, embed, hidden = check_int(b, "vocab", vocab), check_int(b, "embed", embed), check_int(b, "hidden", hidden)
    num_classes, num_layers = check_int(b, "num_classes", num_classes), check_int(b, "num_layers", num_layers)
    cell = check_choice(b, "cell", cell, tuple(_CELLS))
    bidirectional = check_bool(b, "bidirectional", bidirectional)
    directions = 2 if bidirectional else 1
    return nn.Graph("ids", [
        ("lengths", nn.SequenceLengths(), "ids"),
        ("embedding", nn.Embedding(vocab, embed), "lengths"),
        ("rnn", _CELLS[cell](embed, hidden, num_layers, batch_first=True, bidirectional=bidirectional), "embedding"),
        ("last", nn.RNNOutput("last"), "rnn"),
        ("fc", nn.Linear(directions * hidden, num_classes), "last")], "fc")
