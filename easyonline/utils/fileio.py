"""File access for model dirs and configs, local paths first.

One place for every file operation the trainer does, so that ``oss://`` can
be plugged in here (through oss2) without touching callers.
"""
import os
import shutil
import tempfile


def is_oss(path: str) -> bool:
    return path.startswith("oss://")


def _reject_oss(path: str) -> None:
    if is_oss(path):
        raise NotImplementedError(f"oss:// paths are not supported yet: {path}")


def read_text(path: str) -> str:
    _reject_oss(path)
    with open(path, "r", encoding="utf-8") as f:
        return f.read()


def exists(path: str) -> bool:
    _reject_oss(path)
    return os.path.exists(path)


def makedirs(path: str) -> None:
    _reject_oss(path)
    os.makedirs(path, exist_ok=True)


def write_text_atomic(path: str, text: str) -> None:
    """Writes via a temp file and rename, so readers never see half a file."""
    write_bytes_atomic(path, text.encode("utf-8"))


def join(*parts: str) -> str:
    return os.path.join(*parts)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes via a temp file and rename, so readers never see half a file."""
    _reject_oss(path)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def read_bytes(path: str) -> bytes:
    _reject_oss(path)
    with open(path, "rb") as f:
        return f.read()


def listdir(path: str) -> list:
    """Names in a directory (not paths); empty when it does not exist."""
    _reject_oss(path)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def remove_tree(path: str) -> None:
    """Deletes a directory and everything in it; nothing if it does not exist."""
    _reject_oss(path)
    shutil.rmtree(path, ignore_errors=True)


def basename(path: str) -> str:
    """The last part of a path or oss:// URL, ignoring a trailing slash."""
    return path.rstrip("/").rsplit("/", 1)[-1]
