"""What a sentence-transformers model is, for the vectors stored under its name.

Stored vectors are keyed by the encoder's name, so the name has to change whenever the vectors
would: a model in another folder that happens to share the folder's last component, or new
weights copied over the old ones at the same path. A local model's name therefore carries a
digest of the files sentence-transformers reads from its folder; the bundled MiniLM keeps the
plain name its vectors have always been stored under (its package pins its weights).

:func:`resolve_model_setting` turns the deployment's embedding-model setting into a folder: a
hub id is looked up in the local Hugging Face cache only, as a serving process must not download a
model (nor ask the hub whether its copy is current) on the first turn.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from memabra._errors import ConfigError

__all__ = ["BUNDLED_NAME", "check_model_path", "encoder_name", "resolve_model_setting"]

BUNDLED_NAME = "sentence-transformers:all-MiniLM-L6-v2"
# Hex digits of the folder's digest kept in the name: 64 bits, ample for the models one log meets.
_DIGEST_CHARS = 16
# Other runtimes' exports and repository clutter: sentence-transformers' torch backend does not
# read them, and hashing a hub snapshot's onnx/ and openvino/ copies would multiply the cost.
_SKIPPED_DIRS = frozenset({"onnx", "openvino", ".git", ".cache", "__pycache__"})


def check_model_path(model_path: str) -> str:
    """``model_path`` with ``~`` expanded, refused with a :class:`ConfigError` when it names a local
    folder that is not there; anything else that does not exist is left to be a hub model id."""
    path = os.path.expanduser(model_path)
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ConfigError(
                f"model_path {model_path!r} is a file, not a folder holding a sentence-transformers model"
            )
        return path
    if os.path.isabs(path) or model_path.startswith((".", "~")):
        raise ConfigError(
            f"model_path {model_path!r} does not exist: give the folder a sentence-transformers model was saved to "
            "(SentenceTransformer.save), or leave model_path out for the bundled all-MiniLM-L6-v2"
        )
    return path


def encoder_name(model_path: str, bundled_path: str | None) -> str:
    """The name vectors of the model at ``model_path`` are stored under (see the module's doc)."""
    if not os.path.isdir(model_path):  # a hub id: its own name, as sentence-transformers resolves it
        return f"sentence-transformers:{model_path}"
    if bundled_path is not None and os.path.realpath(model_path) == os.path.realpath(bundled_path):
        return BUNDLED_NAME
    # bounded so the name fits the embeddings table's key (200 characters)
    label = _label(os.path.normpath(model_path))[:120]
    return f"sentence-transformers:{label}@{_folder_digest(Path(model_path))}"


def _label(folder: str) -> str:
    """The folder's last component, or for a snapshot in the Hugging Face cache
    (``models--ORG--NAME/snapshots/REVISION``) the model id ``ORG/NAME``: a bare revision hash would
    not tell anyone reading the stored keys which model they belong to."""
    parent = os.path.dirname(folder)
    repo = os.path.basename(os.path.dirname(parent))
    if os.path.basename(parent) == "snapshots" and repo.startswith("models--") and len(repo) > len("models--"):
        return repo.removeprefix("models--").replace("--", "/")
    return os.path.basename(folder) or "model"


def resolve_model_setting(model: str, source: str) -> str:
    """The absolute path of the folder the embedding-model setting ``model`` (named by ``source``,
    a variable or a config file's key) stands for: a local folder, or the snapshot of a Hugging Face
    model id already in the local cache. Anything else is a :class:`ConfigError` naming both."""
    path = os.path.expanduser(model)
    if os.path.isdir(path):
        return _holding_a_model(os.path.abspath(path), model, source)
    if os.path.exists(path):
        raise ConfigError(
            f"{source} names {model}, which is a file, not a folder holding a sentence-transformers model"
        )
    if os.path.isabs(path) or model.startswith((".", "~")):
        raise ConfigError(
            f"{source} names {model}, which does not exist: give the folder a sentence-transformers model was "
            "saved to (SentenceTransformer.save), or unset it for the bundled all-MiniLM-L6-v2"
        )
    snapshot = _cached_snapshot(model)
    if snapshot is None:
        raise ConfigError(
            f"{source} names {model}, which is neither a folder here nor a model in the local Hugging Face "
            "cache (memabra downloads no model): give the model's folder, or download it first "
            f"(huggingface-cli download {model})"
        )
    return _holding_a_model(snapshot, model, source)


# What sentence-transformers reads first from a model's folder: its own module list, else (a plain
# transformers model, pooled by mean) the transformers config.
_MODEL_MARKERS = ("modules.json", "config.json")


def _holding_a_model(folder: str, model: str, source: str) -> str:
    """``folder``, refused unless it holds a model: a setting naming the folder above the model's
    (``/models`` for ``/models/bge-small``) or a half-downloaded snapshot would otherwise have every
    file beneath it hashed for the key, then fail at the model's load, in a background thread, under
    the folder's path rather than the setting's name."""
    if not any(os.path.isfile(os.path.join(folder, marker)) for marker in _MODEL_MARKERS):
        raise ConfigError(
            f"{source} names {model}, whose folder {folder} holds no sentence-transformers model "
            f"(neither {' nor '.join(_MODEL_MARKERS)}): give the folder a model was saved to (SentenceTransformer.save)"
            + ("" if folder == os.path.abspath(os.path.expanduser(model)) else ", or download the model again")
        )
    return folder


def _cached_snapshot(repo_id: str) -> str | None:
    """The folder of ``repo_id``'s current snapshot in the local Hugging Face cache, without the network."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError:  # comes with sentence-transformers: without it nothing can load the model either
        return None
    try:
        folder = snapshot_download(repo_id, local_files_only=True)
    except (OSError, ValueError):  # not cached (LocalEntryNotFoundError), not a repo id (HFValidationError)
        return None
    return folder if isinstance(folder, str) and os.path.isdir(folder) else None


def _folder_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for file in sorted(_model_files(root)):
        digest.update(file.relative_to(root).as_posix().encode("utf-8") + b"\0")
        try:
            with file.open("rb") as handle:
                digest.update(hashlib.file_digest(handle, "sha256").digest())
        except OSError as exc:
            raise ConfigError(f"model_path {str(root)!r}: {file.name} cannot be read: {exc}") from exc
    return digest.hexdigest()[:_DIGEST_CHARS]


def _model_files(root: Path) -> list[Path]:
    files: list[Path] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in _SKIPPED_DIRS and not d.startswith(".")]
        # model cards and dotfiles do not change a vector; a retrained model's saved card often does
        files.extend(Path(folder, n) for n in names if not n.startswith(".") and not n.lower().endswith(".md"))
    return files
