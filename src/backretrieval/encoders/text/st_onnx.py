"""ONNX Runtime for sentence-transformers models: the ``runtime`` option of ``st:``, ``hf:`` and
``minilm-en`` (``minilm-en?runtime=onnx``, ``hf:ORG/NAME?runtime=onnx-int8``).

* ``torch`` (the default) -- sentence-transformers' own torch path.
* ``onnx`` -- the model's modules (transformer, pooling, and whatever follows: ``Dense``,
  ``Normalize``) exported once with ``torch.onnx.export`` into one graph from token ids to the
  sentence embedding, run by ONNX Runtime on the CPU. Checked on export against torch on fixed
  texts: every vector's cosine to torch's at least :data:`MIN_COSINE` (1 - 1e-5), else the
  export is refused.
* ``onnx-int8`` -- that graph with its weights quantised to int8 by ONNX Runtime's dynamic
  quantisation (``onnxruntime.quantization.quantize_dynamic``, per-channel int8 weights;
  activations quantised at run time): smaller and faster on CPUs with int8 instructions, and its
  vectors move (BENCHMARKS.md, "Serving forms" measures how far, and what that costs in retrieval
  quality). Dynamic quantisation takes one scale per activation tensor, i.e. per call: run on a
  batch, a text's vector would depend on the other texts of its batch (cosine down to 0.987
  between a text encoded alone and in a batch of 64, measured on emoji names), and the
  embedding cache, keyed by the text, would keep whichever came first. So each text is run in a
  call of its own: its vector is a function of the text (on a given CPU). Not to be confused with the ``@int8`` serving form, which
  quantises the *vectors* a store holds (:mod:`backretrieval.encoders.quantize`).

Tokenisation stays sentence-transformers' own (the model's tokenizer, its padding and its
maximum length), as does the prompt (the model's default prompt, or the one asked for, put
before every text); a model whose pooling leaves the prompt's tokens out
(``include_prompt=False``) is refused, since the graph pools every token.

Exported once, cached. The graphs live in the user cache (:func:`backretrieval.core.cache_dir`
``("onnx")``) under a name made of a digest of the model's identity (its files' content hash,
hub commit or package version), the opset, the torch and onnxruntime versions,
:data:`EXPORT_REVISION` and ``qint8`` for the quantised graph; written atomically under an
exclusive lock (:func:`backretrieval.core.locks.held_lock`), so concurrent first runs export once.
Every vector-changing choice is in the model's ``version`` (the runtime, the opset, the export
revision, the quantisation) and its ``versions`` (onnx, onnxruntime and torch besides the
tokenizer's libraries, ``onnxruntime threads``), so the embedding cache and the records never mix
the runtimes. Each engine runs one ONNX Runtime thread (one engine per core, as the torch path),
so a text's vector does not depend on the thread count; ONNX Runtime picks its kernels by the
CPU's instructions (docs/reproducibility.md).
"""
from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np

from ...core import EncoderError, atomic_write, cache_dir, content_hash, normalize_rows
from ...core.locks import held_lock
from ..base import EXAMPLE_TEXTS
from ..devices import ort_version, torch_version
from ..onnx_export import OPSET, make_session

RUNTIMES = ("torch", "onnx", "onnx-int8")
# The runtimes as the model catalogue lists them: (option, what).
CATALOGUE = (
    ("runtime=torch", "sentence-transformers' own torch path (the default)"),
    ("runtime=onnx", "the model exported once to ONNX (cached) and run by ONNX Runtime on the CPU, fp32; "
                     "checked against torch on export (cosine >= 0.99999)"),
    ("runtime=onnx-int8", "that graph with int8 weights (ONNX Runtime dynamic quantisation, per channel), "
                          "one text per call; its vectors move (BENCHMARKS.md)"),
)
EXPORT_REVISION = 1  # bump when the exported graph would change for the same model files
MIN_COSINE = 0.99999  # the export check: ONNX Runtime's vector against torch's, per text
QUANTIZATION = "dynamic int8, per-channel weights, uint8 activations (onnxruntime.quantization.quantize_dynamic)"


def check_runtime(runtime: Any, owner: str) -> str:
    """``runtime`` if it is one of :data:`RUNTIMES`; else an EncoderError naming ``owner``."""
    if runtime not in RUNTIMES:
        raise EncoderError(f"{owner}: runtime must be one of {', '.join(RUNTIMES)}, got {runtime!r}")
    return runtime


def runtime_tag(runtime: str) -> str:
    """What a model's ``version`` says of an ONNX runtime: ``ort1.32.0/onnx-opset17-rev1[-qint8]``."""
    return f"ort{ort_version()}/onnx-opset{OPSET}-rev{EXPORT_REVISION}" + ("-qint8" if runtime == "onnx-int8" else "")


def runtime_settings(runtime: str) -> dict[str, str]:
    """The settings of an ONNX runtime that can change the vectors' bits (part of the keys)."""
    out = {"onnxruntime threads": "1"}
    if runtime == "onnx-int8":
        out["onnx quantization"] = QUANTIZATION
    return out


def graph_path(identity: str, quantized: bool) -> Path:
    """Cache path of the graph of the model with ``identity`` (its files' digest or version)."""
    name = (f"st-{content_hash(identity, 16)}-opset{OPSET}-torch{torch_version()}-ort{ort_version()}"
            f"-rev{EXPORT_REVISION}{'-qint8' if quantized else ''}.onnx")
    return cache_dir("onnx") / name.replace("+", "_")


def _features(model: Any, texts: list[str], lock: threading.Lock) -> dict[str, Any]:
    """sentence-transformers' own tokenisation of ``texts`` (padding, maximum length): the tensors."""
    with lock:
        prepare = getattr(model, "preprocess", None) or model.tokenize
        feats = prepare(texts)
    return {k: v for k, v in feats.items() if hasattr(v, "numpy")}


def _export(model: Any, path: Path, owner: str, lock: threading.Lock) -> None:
    """Export ``model`` to ``path`` (atomically) after checking the graph against torch."""
    import io
    import warnings

    import torch

    feats = _features(model, list(EXAMPLE_TEXTS), lock)
    names = sorted(feats)

    class Pooled(torch.nn.Module):
        def __init__(self, st: Any) -> None:
            super().__init__()
            self.st = st

        def forward(self, *inputs: Any) -> Any:
            return self.st(dict(zip(names, inputs)))["sentence_embedding"]

    buf = io.BytesIO()
    args = tuple(feats[k] for k in names)
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the TorchScript exporter's notes on traced control flow
            torch.onnx.export(Pooled(model).eval(), args, buf, dynamo=False, opset_version=OPSET, input_names=names,
                              output_names=["embedding"], do_constant_folding=True,
                              dynamic_axes={**{k: {0: "n", 1: "tokens"} for k in names}, "embedding": {0: "n"}})
        with torch.no_grad():
            want = model(dict(feats))["sentence_embedding"].numpy()
    except Exception as e:  # noqa: BLE001 - any exporter failure: say which model
        raise EncoderError(f"{owner}: cannot export the model to ONNX ({type(e).__name__}: {e}); use runtime=torch") from e
    data = buf.getvalue()
    session = make_session(data, threads=1, device="cpu")
    got = session.run(None, {i.name: feats[i.name].numpy() for i in session.get_inputs()})[0]
    cos = np.sum(normalize_rows(got) * normalize_rows(want), axis=1)
    if not cos.min() >= MIN_COSINE:
        raise EncoderError(f"{owner}: the ONNX export's vectors differ from torch's (cosine {cos.min():.6f} < "
                           f"{MIN_COSINE}); not used: use runtime=torch")
    with atomic_write(path) as fh:
        fh.write(data)


def _quantize(source: Path, path: Path) -> None:
    """The int8 graph of ``source`` at ``path`` (written to a temporary file, then moved in place)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    quiet = logging.getLogger()  # the quantiser logs a pre-processing hint on the root logger
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        quantize_dynamic(source, tmp, weight_type=QuantType.QInt8, per_channel=True)
        os.replace(tmp, path)
    finally:
        quiet.setLevel(level)
        tmp.unlink(missing_ok=True)


def cached_graph(model: Any, identity: str, runtime: str, owner: str, lock: threading.Lock) -> Path:
    """The ONNX graph of ``model`` for ``runtime`` (``onnx`` / ``onnx-int8``), exported (and
    quantised) on first use.

    Args:
        model: the loaded ``SentenceTransformer`` (on the CPU).
        identity: what identifies its files (content hash, hub commit, package version).
        runtime: ``"onnx"`` or ``"onnx-int8"``.
        owner: the model's name, for errors.
        lock: the lock its tokenizer is called under.

    Returns:
        The path of the ``.onnx`` file.

    Raises:
        EncoderError: the export fails or disagrees with torch.
    """
    fp32 = graph_path(identity, False)
    if not fp32.is_file():
        with held_lock(fp32.with_name(fp32.name + ".lock")):
            if not fp32.is_file():
                _export(model, fp32, owner, lock)
    if runtime == "onnx":
        return fp32
    q = graph_path(identity, True)
    if not q.is_file():
        with held_lock(q.with_name(q.name + ".lock")):
            if not q.is_file():
                _quantize(fp32, q)
    return q


class OnnxSentenceRunner:
    """A sentence-transformers model's vectors from its ONNX graph: sentence-transformers'
    tokenisation and prompt, ONNX Runtime's session (one thread per call; calls may run in
    several threads at once).

    Args:
        model: the loaded ``SentenceTransformer`` (tokenizer, prompts, and the export's source).
        identity: what identifies its files (see :func:`cached_graph`).
        runtime: ``"onnx"`` or ``"onnx-int8"``.
        owner: the model's name, for errors.
        prompt: the text put before every text (None: the model's default prompt, if any).
        lock: the lock its tokenizer is called under.
    """

    def __init__(self, model: Any, identity: str, runtime: str, owner: str, prompt: str | None,
                 lock: threading.Lock) -> None:
        pooling = next((m for m in model if hasattr(m, "include_prompt")), None)
        self.prompt = prompt if prompt is not None else _default_prompt(model)
        if self.prompt and pooling is not None and not pooling.include_prompt:
            raise EncoderError(f"{owner}: its pooling leaves the prompt's tokens out, which the ONNX graph does not; "
                               "use runtime=torch")
        self.model, self.lock = model, lock
        self.per_text = runtime == "onnx-int8"  # one text per call: activation scales of that text alone
        self.path = cached_graph(model, identity, runtime, owner, lock)
        self.session = make_session(self.path, threads=1, device="cpu")
        self.inputs = [i.name for i in self.session.get_inputs()]

    def encode(self, texts: list[str], normalize: bool, per_text: bool | None = None) -> np.ndarray:
        """float32 (n, dim) vectors of ``texts`` (one batch), L2-normalised with ``normalize``;
        ``per_text``: one session call per text (None: :attr:`per_text`, True with int8 weights;
        False runs the batch in one call, as a batching server would, and an int8 vector then
        depends on the batch)."""
        if self.prompt:
            texts = [self.prompt + t for t in texts]
        one = self.per_text if per_text is None else per_text
        parts = [[t] for t in texts] if one else [texts]
        out = np.concatenate([self._run(part) for part in parts]).astype(np.float32)
        return normalize_rows(out) if normalize else out

    def _run(self, texts: list[str]) -> np.ndarray:
        feats = _features(self.model, texts, self.lock)
        return self.session.run(None, {k: feats[k].numpy() for k in self.inputs})[0]


def _default_prompt(model: Any) -> str:
    """The prompt sentence-transformers puts before every text by itself: the model's default one."""
    name = getattr(model, "default_prompt_name", None)
    prompts = getattr(model, "prompts", None) or {}
    return prompts.get(name, "") if name else ""
