"""ONNX ``Einsum`` for :class:`sparkdl.nn.OnnxOp` (numpy on whole arrays, forward and backward side by side).

The equation is made explicit before it runs: ``...`` becomes letters the equation does not use (right-aligned,
as broadcasting dimensions), and an implicit output (no ``->``) is the ellipsis followed by the letters that
occur once, in alphabetical order (numpy's and ONNX's rule). The gradient of each operand is the einsum of the
other operands and the output gradient onto that operand's letters; a letter only that operand has (summed
out) is broadcast back, and a broadcast ellipsis dimension of size 1 summed back. A letter repeated within one
operand (a diagonal) has no gradient here: :func:`check_equation` refuses it.
"""
from __future__ import annotations

import string

import numpy as np

from sparkdl.nn.onnx_op_elementwise import unbroadcast

__all__ = ["EINSUM_OPS", "check_equation", "output_shape"]


def check_equation(equation: str) -> str | None:
    """Why ``equation`` cannot be computed with a gradient (a message), or None if it can."""
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    allowed = set(string.ascii_letters) | {",", "."}
    if not lhs or not set(eq.replace("->", "")) <= allowed or eq.count("->") > 1:
        return f"equation {equation!r} is malformed; supported: letters, '...', ',' and one optional '->'"
    for term in lhs.split(",") + ([rhs] if rhs else []):
        letters = term.replace("...", "")
        if "." in letters or len(set(letters)) != len(letters):
            return f"term {term!r} of {equation!r} repeats a letter (a diagonal) or a stray '.'; supported: " \
                   "distinct letters per operand"
    unknown = set(rhs.replace("...", "")) - set(lhs)
    if unknown:
        return f"output letters {sorted(unknown)} of {equation!r} are in no operand"
    return None


def _explicit(equation: str, ranks: list) -> tuple[list, str]:
    """(operand terms, output term) with every ``...`` replaced by letters, for operands of ``ranks``."""
    eq = equation.replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    spare = [c for c in string.ascii_letters if c not in eq]
    width = max([r - len(t.replace("...", "")) for t, r in zip(terms, ranks) if "..." in t] or [0])
    ellipsis = "".join(spare[:width])
    terms = [t.replace("...", ellipsis[width - (r - len(t.replace("...", ""))):]) for t, r in zip(terms, ranks)]
    if arrow:
        return terms, rhs.replace("...", ellipsis)
    counts = {c: "".join(terms).count(c) for c in "".join(terms)}
    return terms, ellipsis + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ellipsis))


def output_shape(equation: str, shapes: list) -> tuple:
    """The shape of ``Einsum(equation)`` of operands of ``shapes`` (computed before it runs)."""
    terms, out = _explicit(equation, [len(s) for s in shapes])
    sizes: dict = {}
    for t, shape in zip(terms, shapes):
        for c, n in zip(t, shape):
            sizes[c] = max(sizes.get(c, 1), int(n))
    return tuple(sizes[c] for c in out)


def _einsum():
    def forward(xs, a):
        terms, out = _explicit(a["equation"], [x.ndim for x in xs])
        y = np.einsum(f"{','.join(terms)}->{out}", *xs)
        return np.asarray(y, dtype=np.result_type(*xs)), (xs, terms, out)

    def backward(cache, g, a):
        xs, terms, out = cache
        grads = []
        for k, (x, term) in enumerate(zip(xs, terms)):
            others = [t for i, t in enumerate(terms) if i != k] + [out]
            seen = set("".join(others))
            kept = "".join(c for c in term if c in seen)
            operands = [v for i, v in enumerate(xs) if i != k] + [g]
            gk = np.einsum(f"{','.join(others)}->{kept}", *operands)
            # letters only this operand has were summed out: broadcast the gradient back along them
            sizes: dict = {}
            for t, v in zip(terms, xs):
                for c, n in zip(t, v.shape):
                    sizes[c] = max(sizes.get(c, 1), n)
            full = np.broadcast_to(np.expand_dims(gk, [i for i, c in enumerate(term) if c not in seen]),
                                   [sizes[c] if c in seen else n for c, n in zip(term, x.shape)])
            grads.append(unbroadcast(np.ascontiguousarray(full), x.shape).astype(g.dtype, copy=False))
        return tuple(grads)
    return forward, backward


#: op_type -> (forward, backward), merged into :data:`sparkdl.nn.onnx_op.ONNX_OPS`.
EINSUM_OPS = {"Einsum": _einsum()}
