"""PyTorch definitions of the sequence and recommender models of the model zoo: a BERT-mini encoder classifier,
a (bi-directional) GRU/LSTM text classifier and NeuMF (NCF). Their module names are the state_dict names of
sparkdl.models' ``bert_mini``, ``rnn_classifier`` and ``ncf``.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["BertEmbeddings", "BertMini", "bert_mini", "RNNClassifier", "rnn_classifier", "NeuMF", "ncf"]


class BertEmbeddings(nn.Module):
    """BERT's input embeddings: word + position (+ token type) -> LayerNorm -> dropout (HF transformers' names)."""

    def __init__(self, vocab_size, d_model, max_length, type_vocab_size, eps, dropout):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab_size, d_model, padding_idx=0)
        self.position_embeddings = nn.Embedding(max_length, d_model)
        self.token_type_embeddings = nn.Embedding(type_vocab_size, d_model) if type_vocab_size else None
        self.LayerNorm, self.dropout = nn.LayerNorm(d_model, eps=eps), nn.Dropout(dropout)

    def forward(self, input_ids, token_type_ids=None):
        h = self.word_embeddings(input_ids) + self.position_embeddings.weight[:input_ids.shape[1]]
        if self.token_type_embeddings is not None:
            if token_type_ids is None:
                h = h + self.token_type_embeddings.weight[0]
            else:
                h = h + self.token_type_embeddings(token_type_ids)
        return self.dropout(self.LayerNorm(h))


class BertMini(nn.Module):
    """A BERT-style encoder classifier: embeddings, post-norm GELU Transformer encoder over the valid tokens
    (``attention_mask`` 1 = token, 0 = padding), tanh pooler on the first token, dropout, linear classifier."""

    def __init__(self, vocab_size=30522, num_classes=2, max_length=512, d_model=256, nhead=4, num_layers=4,
                 dim_feedforward=1024, type_vocab_size=2, dropout=0.1, layer_norm_eps=1e-12):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab_size, d_model, max_length, type_vocab_size, layer_norm_eps, dropout)
        layer = nn.TransformerEncoderLayer(d_model, nhead, dim_feedforward, dropout, activation="gelu",
                                           layer_norm_eps=layer_norm_eps, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers, enable_nested_tensor=False)
        self.pooler = nn.Linear(d_model, d_model)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(d_model, num_classes)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        h = self.embeddings(input_ids, token_type_ids)
        z = self.encoder(h, src_key_padding_mask=attention_mask == 0)
        return self.classifier(self.dropout(torch.tanh(self.pooler(z[:, 0]))))


def bert_mini(vocab_size=30522, num_classes=2, max_length=512, **kwargs):
    return BertMini(vocab_size, num_classes, max_length, **kwargs)


class RNNClassifier(nn.Module):
    """Embedding -> (bi-directional) GRU or LSTM -> final hidden states of the last layer (forward, reverse) ->
    linear. ``forward_padded`` takes -1-padded rows (packed sequences, for the padded-batch comparison)."""

    def __init__(self, vocab, embed, hidden, num_classes=2, cell="gru", bidirectional=True, num_layers=1):
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.rnn = {"gru": nn.GRU, "lstm": nn.LSTM}[cell](embed, hidden, num_layers, batch_first=True,
                                                          bidirectional=bidirectional)
        self.fc = nn.Linear(hidden * (2 if bidirectional else 1), num_classes)
        self.directions = 2 if bidirectional else 1

    def _head(self, state, n):
        h = state[0] if isinstance(state, tuple) else state
        return self.fc(h[-self.directions:].transpose(0, 1).reshape(n, -1))

    def forward(self, ids):
        _, state = self.rnn(self.embedding(ids))
        return self._head(state, ids.shape[0])

    def forward_padded(self, ids):
        lengths = (ids >= 0).sum(1)
        packed = nn.utils.rnn.pack_padded_sequence(self.embedding(ids.clamp(min=0)), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, state = self.rnn(packed)
        return self._head(state, ids.shape[0])


def rnn_classifier(vocab, embed, hidden, num_classes=2, cell="gru", bidirectional=True, num_layers=1):
    return RNNClassifier(vocab, embed, hidden, num_classes, cell, bidirectional, num_layers)


class NeuMF(nn.Module):
    """He et al.'s NeuMF: a GMF tower (element-wise product of user and item factors) and an MLP tower over
    concatenated user and item embeddings, joined by one linear ``predict`` layer (logit of an interaction)."""

    def __init__(self, num_users, num_items, factors=8, mlp_layers=(64, 32, 16), dropout=0.0):
        super().__init__()
        half = mlp_layers[0] // 2
        self.user_gmf, self.item_gmf = nn.Embedding(num_users, factors), nn.Embedding(num_items, factors)
        self.user_mlp, self.item_mlp = nn.Embedding(num_users, half), nn.Embedding(num_items, half)
        layers, width = [], 2 * half
        for w in mlp_layers[1:]:
            layers += [nn.Dropout(dropout), nn.Linear(width, w), nn.ReLU()]
            width = w
        self.mlp = nn.Sequential(*layers)
        self.predict = nn.Linear(factors + width, 1)

    def forward(self, user, item):
        gmf = self.user_gmf(user) * self.item_gmf(item)
        mlp = self.mlp(torch.cat([self.user_mlp(user), self.item_mlp(item)], 1))
        return self.predict(torch.cat([gmf, mlp], 1))


def ncf(num_users, num_items, factors=8, mlp_layers=(64, 32, 16), dropout=0.0):
    return NeuMF(num_users, num_items, factors, mlp_layers, dropout)
