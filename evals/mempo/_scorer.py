"""The transformers-backed answer scorer. The only module of memabra that imports torch and
transformers (the ``mempo`` extra); :mod:`memabra.evals.mempo` loads it on first use."""

from __future__ import annotations

import inspect
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import transformers
from packaging.version import Version
from transformers import AutoModelForCausalLM, AutoTokenizer
from transformers.utils import logging as transformers_logging

from memabra._errors import ConfigError
from memabra.evals.mempo._decisions import (
    RoutingDecisionItem,
    RoutingDecisionScore,
    ScoringProgress,
    score_routing_decisions,
)
from memabra.evals.mempo._model_dir import check_model_directory
from memabra.evals.mempo._probability import AnswerProbabilities, UnscorablePairError
from memabra.evals.mempo._trajectory import MemoryBlockScore, Trajectory, score_memory_blocks

__all__ = ["MemPOScorer", "ScorerOutOfMemoryError"]

_log = logging.getLogger("memabra")

_DTYPES: dict[str, torch.dtype] = {
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "float32": torch.float32,
    "fp32": torch.float32,
}


_CHARS_PER_TOKEN = 64
"""More characters than any token of a real vocabulary spans on average over half a context (about
4 for English text): a context this many characters per model position is cut before tokenising."""


class ScorerOutOfMemoryError(ConfigError):
    """A batch did not fit in the device's memory; the message names the batch size to lower."""


class MemPOScorer:
    """Scores gold answers with a causal language model loaded from a local directory.

    ``P = exp(mean_k log p(a_k | context, a_<k))`` over the gold answer's tokens ``a``, the
    geometric mean of their probabilities. Context and answer are tokenised separately and
    concatenated, so the same answer tokens are scored after every context. Sequences are sorted by
    length and run ``batch_size`` at a time without gradient, padded on ``padding_side`` with an
    attention mask and position ids that count real tokens only, so neither the batch nor the
    padding changes a result, and identical pairs are scored once. A context too long for the model
    loses tokens from its middle (half the room to its beginning, half to its end), with a warning.

    ``device="auto"`` picks CUDA when available, else the CPU; ``dtype=None`` picks bfloat16 on
    CUDA and float32 on the CPU. Log-probabilities are always taken in float32.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        device: str | torch.device = "auto",
        dtype: str | torch.dtype | None = None,
        batch_size: int = 16,
        padding_side: Literal["left", "right"] = "left",
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive integer, got {batch_size!r}")
        if padding_side not in ("left", "right"):
            raise ConfigError(f"padding_side must be 'left' or 'right', got {padding_side!r}")
        self.model_path = Path(model_path)
        self.device = _resolve_device(device)
        self.dtype = _resolve_dtype(dtype, self.device)
        self.batch_size = batch_size
        self.padding_side = padding_side
        check_model_directory(self.model_path)
        self._tokenizer, self._model = _load(self.model_path, self.device, self.dtype)
        self._pad_id = _pad_id(self._tokenizer)
        self._max_length = _max_length(self._model.config)
        # with left padding every answer ends its row, so the last few logits are all a batch needs
        self._can_keep_last_logits = "logits_to_keep" in inspect.signature(self._model.forward).parameters

    @property
    def model(self) -> Any:
        """The loaded causal LM, in eval mode."""
        return self._model

    @property
    def tokenizer(self) -> Any:
        """The loaded tokenizer (to encode ``<mem>`` tags for :func:`find_mem_spans`, for instance)."""
        return self._tokenizer

    def answer_probabilities(self, contexts: Sequence[str], answers: Sequence[str]) -> AnswerProbabilities:
        """P(answer | context) for each pair, in input order."""
        if isinstance(contexts, str) or isinstance(answers, str):
            raise TypeError("contexts and answers must be sequences of strings, not single strings")
        if len(contexts) != len(answers):
            raise ValueError(f"contexts ({len(contexts)}) and answers ({len(answers)}) differ in length")
        if not contexts:
            empty = np.zeros(0)
            return AnswerProbabilities(empty, empty.astype(np.int64), empty.astype(np.int64))
        # identical pairs (a decision that selected every candidate) are scored once: in bf16 a row's
        # result moves with its batch's padding, and two copies must not grade a tie as a loss
        first: dict[tuple[str, str], int] = {}
        for index, pair in enumerate(zip(contexts, answers, strict=True)):
            if not isinstance(pair[0], str) or not isinstance(pair[1], str):
                raise TypeError(f"contexts[{index}] and answers[{index}] must be strings")
            first.setdefault(pair, index)
        unique = list(first)
        slot = {pair: position for position, pair in enumerate(unique)}
        sequences = self._encode(unique, list(first.values()))
        mean_log_p = np.zeros(len(sequences))
        order = sorted(range(len(sequences)), key=lambda i: len(sequences[i][0]), reverse=True)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                mean_log_p[rows] = self._mean_log_probs([sequences[i] for i in rows])
        back = np.asarray([slot[pair] for pair in zip(contexts, answers, strict=True)], dtype=np.int64)
        return AnswerProbabilities(
            probabilities=np.exp(mean_log_p)[back],
            answer_tokens=np.asarray([answer_length for _, answer_length in sequences], dtype=np.int64)[back],
            sequence_tokens=np.asarray([len(ids) for ids, _ in sequences], dtype=np.int64)[back],
        )

    def score_memory_blocks(self, trajectories: Sequence[Trajectory], eps: float = 0.0) -> list[MemoryBlockScore]:
        """P_mem and P_full of every ``<mem>`` block of the trajectories (see :func:`score_memory_blocks`)."""
        return score_memory_blocks(self, trajectories, eps=eps)

    def score_routing_decisions(
        self,
        items: Iterable[RoutingDecisionItem],
        *,
        eps: float = 0.0,
        chunk_size: int = 256,
        on_progress: Callable[[ScoringProgress], None] | None = None,
        on_unscorable: Callable[[RoutingDecisionItem, str], None] | None = None,
    ) -> Iterator[tuple[RoutingDecisionScore, ...]]:
        """Grade routing decisions chunk by chunk (see :func:`score_routing_decisions`)."""
        return score_routing_decisions(
            self, items, eps=eps, chunk_size=chunk_size, on_progress=on_progress, on_unscorable=on_unscorable
        )

    def _encode(self, pairs: Sequence[tuple[str, str]], indices: Sequence[int]) -> list[tuple[list[int], int]]:
        """Token ids of each (context, answer) pair; ``indices`` are the caller's, for error messages."""
        limit = self._max_length * _CHARS_PER_TOKEN
        context_ids = self._tokenizer([self._precut(c, limit) for c, _ in pairs])["input_ids"]
        answer_ids = self._tokenizer([a for _, a in pairs], add_special_tokens=False)["input_ids"]
        joined = [
            self._join(list(c), list(a), index) for index, c, a in zip(indices, context_ids, answer_ids, strict=True)
        ]
        cut = sum(
            len(c) + len(a) > self._max_length or len(pair[0]) > limit
            for pair, c, a in zip(pairs, context_ids, answer_ids, strict=True)
        )
        if cut:
            _log.warning(
                "MemPO: %d of %d contexts exceed the model's %d positions: tokens were cut from their middle "
                "(the question and the end kept), so their probabilities describe part of the context",
                cut,
                len(joined),
                self._max_length,
            )
        return joined

    @staticmethod
    def _precut(context: str, limit: int) -> str:
        """A context far longer than the model could take loses its middle characters before it is
        tokenised (the token-level cut of :meth:`_join` then takes the middle out exactly): a
        megabyte memory costs a tokenisation of what can be kept, not of the megabyte."""
        if len(context) <= limit:
            return context
        head = limit // 2
        return context[:head] + context[len(context) - (limit - head) :]

    def _join(self, context_ids: list[int], answer_ids: list[int], index: int) -> tuple[list[int], int]:
        if not answer_ids:
            raise UnscorablePairError(index, f"answers[{index}] encodes to no tokens")
        if not context_ids:
            fallback = (
                self._tokenizer.bos_token_id
                if self._tokenizer.bos_token_id is not None
                else self._tokenizer.eos_token_id
            )
            if fallback is None:
                raise UnscorablePairError(
                    index, f"contexts[{index}] encodes to no tokens and the tokenizer has no BOS or EOS token"
                )
            context_ids = [fallback]
        room = self._max_length - len(answer_ids)
        if room < 1:
            raise UnscorablePairError(
                index,
                f"answers[{index}] has {len(answer_ids)} tokens, more than the model's {self._max_length} positions allow",
            )
        if len(context_ids) > room:
            # the middle goes: the question opens a context and the latest memory and answer tag close it
            head = room // 2
            _log.debug(
                "context %d cut from %d to its first %d and last %d tokens", index, len(context_ids), head, room - head
            )
            context_ids = context_ids[:head] + context_ids[len(context_ids) - (room - head) :]
        return context_ids + answer_ids, len(answer_ids)

    def _mean_log_probs(self, batch: list[tuple[list[int], int]]) -> np.ndarray:
        input_ids, attention, answer_starts, answer_lengths = self._pad(batch)
        ids_tensor = torch.from_numpy(input_ids).to(self.device)
        mask_tensor = torch.from_numpy(attention).to(self.device)
        # positions count real tokens only, so a left-padded row sees the positions it would alone
        positions = (mask_tensor.cumsum(-1) - 1).clamp(min=0)
        kept = input_ids.shape[1]
        extra: dict[str, Any] = {}
        if self.padding_side == "left" and self._can_keep_last_logits:
            kept = int(answer_lengths.max()) + 1
            extra["logits_to_keep"] = kept
        try:
            logits = self._model(
                input_ids=ids_tensor, attention_mask=mask_tensor, position_ids=positions, use_cache=False, **extra
            ).logits
        except torch.cuda.OutOfMemoryError:
            raise ScorerOutOfMemoryError(
                f"out of memory on {self.device} scoring {len(batch)} sequences of up to {input_ids.shape[1]} "
                f"tokens: lower batch_size (now {self.batch_size})"
            ) from None
        return _mean_answer_log_probs(
            logits, ids_tensor, answer_starts, answer_lengths, first_logit=input_ids.shape[1] - kept
        )

    def _pad(self, batch: list[tuple[list[int], int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        width = max(len(ids) for ids, _ in batch)
        input_ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        attention = np.zeros((len(batch), width), dtype=np.int64)
        answer_starts = np.zeros(len(batch), dtype=np.int64)
        answer_lengths = np.asarray([answer_length for _, answer_length in batch], dtype=np.int64)
        for row, (ids, answer_length) in enumerate(batch):
            offset = width - len(ids) if self.padding_side == "left" else 0
            input_ids[row, offset : offset + len(ids)] = ids
            attention[row, offset : offset + len(ids)] = 1
            answer_starts[row] = offset + len(ids) - answer_length
        return input_ids, attention, answer_starts, answer_lengths


def _mean_answer_log_probs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    answer_starts: np.ndarray,
    answer_lengths: np.ndarray,
    first_logit: int,
) -> np.ndarray:
    """Mean log-probability of each row's answer tokens. ``logits`` covers positions
    ``first_logit …`` of the rows; the token at position p is predicted by the logits of p - 1."""
    steps = np.arange(int(answer_lengths.max()))
    valid = steps[None, :] < answer_lengths[:, None]
    # rows with shorter answers repeat their first answer token; those steps are masked out below
    targets_at = np.where(valid, answer_starts[:, None] + steps[None, :], answer_starts[:, None])
    device = logits.device
    logit_rows = torch.from_numpy(targets_at - 1 - first_logit).to(device)
    picked = logits.gather(1, logit_rows[:, :, None].expand(-1, -1, logits.shape[-1])).float()
    log_probs = torch.log_softmax(picked, dim=-1)
    targets = input_ids.gather(1, torch.from_numpy(targets_at).to(device))
    token_log_p = log_probs.gather(2, targets[:, :, None]).squeeze(2)
    summed = torch.where(torch.from_numpy(valid).to(device), token_log_p, torch.zeros_like(token_log_p)).sum(dim=1)
    means: np.ndarray = summed.double().cpu().numpy() / answer_lengths
    return means


def _resolve_device(device: str | torch.device) -> torch.device:
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ConfigError(f"device must be 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}: {exc}") from None
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for CUDA, which is not available here")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigError(
            f"device {device!r} does not exist: there are {count} CUDA devices (cuda:0 to cuda:{count - 1})"
        )
    return resolved


def _resolve_dtype(dtype: str | torch.dtype | None, device: torch.device) -> torch.dtype:
    if dtype is None:
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return _DTYPES[dtype.lower()]
    raise ConfigError(f"dtype must be one of {sorted(_DTYPES)} or a torch.dtype, got {dtype!r}")


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    # transformers draws progress bars while loading; library code must not write to the terminal
    enabled = transformers_logging.is_progress_bar_enabled()
    transformers_logging.disable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]  # unannotated in transformers
    try:
        yield
    finally:
        if enabled:
            transformers_logging.enable_progress_bar()  # type: ignore[no-untyped-call, unused-ignore]


def _load(path: Path, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    with _quiet_transformers():
        try:
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - tokenizers and sentencepiece raise their own
            raise ConfigError(
                f"model_path {str(path)!r}: no usable tokenizer (save the model's tokenizer into the same "
                f"directory with tokenizer.save_pretrained): {_one_line(exc)}"
            ) from None
        if not tokenizer("the answer", add_special_tokens=False)["input_ids"]:
            # transformers builds an empty tokenizer for a GPT-2 folder without vocab.json and
            # merges.txt: said here, not as "answers[0] encodes to no tokens" on the first decision
            raise ConfigError(
                f"model_path {str(path)!r}: no usable tokenizer (it encodes text to no tokens; save the model's "
                "tokenizer into the same directory with tokenizer.save_pretrained)"
            )
        try:
            dtype_argument = {_dtype_keyword(transformers.__version__): dtype}
            model: Any = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, **dtype_argument)
        except Exception as exc:  # noqa: BLE001 - safetensors, pickle and torch each raise their own
            raise ConfigError(f"model_path {str(path)!r}: the model does not load: {_one_line(exc)}") from None
    try:
        model.to(device)
    except RuntimeError as exc:  # out of memory, most often
        raise ConfigError(
            f"model_path {str(path)!r}: the model could not be placed on {device}: {_one_line(exc)}"
        ) from None
    if model.get_input_embeddings().weight.dtype != dtype:
        model.to(dtype)  # whatever a loader made of the keyword, the scorer runs in the dtype it reports
    model.eval()
    _log.info("MemPO scorer loaded %s on %s (%s)", path, device, dtype)
    return tokenizer, model


def _one_line(exc: BaseException) -> str:
    """An exception as one line: transformers' and torch's messages span several, and a load error
    is reported as one line (its lines joined, white space collapsed)."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"


def _pad_id(tokenizer: Any) -> int:
    for candidate in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.bos_token_id):
        if candidate is not None:
            return int(candidate)
    return 0


def _max_length(config: Any) -> int:
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return 1 << 30


def _dtype_keyword(version: str) -> str:
    """``from_pretrained``'s dtype keyword: ``dtype`` from transformers 4.56, ``torch_dtype`` before."""
    return "dtype" if Version(version) >= Version("4.56") else "torch_dtype"
