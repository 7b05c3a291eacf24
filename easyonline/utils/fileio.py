"""File access for model dirs and configs, local paths first.

One place for every file operation, so that ``oss://`` paths (through oss2,
see oss.py) work wherever a local path does.
"""
import errno
import os
import shutil
import tempfile

from easyonline.utils import oss


def is_oss(path: str) -> bool:
    return path.startswith("oss://")


def read_text(path: str) -> str:
    return read_bytes(path).decode("utf-8")


def exists(path: str) -> bool:
    if is_oss(path):
        return oss.exists(path)
    return os.path.exists(path)


def makedirs(path: str) -> None:
    """Local: creates the directories. OSS has none: a nothing."""
    if not is_oss(path):
        os.makedirs(path, exist_ok=True)


def write_text_atomic(path: str, text: str) -> None:
    """Writes via a temp file and rename, so readers never see half a file."""
    write_bytes_atomic(path, text.encode("utf-8"))


def join(*parts: str) -> str:
    if parts and is_oss(parts[0]):
        return "/".join([parts[0].rstrip("/")] + [p.strip("/") for p in parts[1:]])
    return os.path.join(*parts)


def write_bytes_atomic(path: str, data: bytes) -> None:
    """Writes via a temp file and rename (OSS: one put), so readers never see half a file."""
    if is_oss(path):
        oss.write(path, data)
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def copy_file(source: str, target: str) -> None:
    """Copies one file, local or ``oss://`` either side, streamed (never whole in memory: checkpoint data
    files can be larger than memory, and than one OSS put); readers of ``target`` never see half of it."""
    if is_oss(source) and is_oss(target):
        with tempfile.TemporaryDirectory() as staging:
            copy_file(source, os.path.join(staging, "file"))
            copy_file(os.path.join(staging, "file"), target)
    elif is_oss(target):
        oss.upload_file(source, target)
    elif is_oss(source):
        oss.download_file(source, target)
    else:
        directory = os.path.dirname(target) or "."
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
        os.close(fd)
        shutil.copyfile(source, tmp)
        os.replace(tmp, target)


def create_exclusive(path: str, data: bytes) -> bool:
    """Writes ``data`` to ``path`` only if no file is there, atomically (of two callers racing, exactly one
    creates it; readers never see half of it); True when this call created it. Local: a hard link of a
    complete temp file (``O_EXCL`` where links are not supported); OSS: a put with
    ``x-oss-forbid-overwrite``. For locks (``checkpoint/writer_lock.py``)."""
    if is_oss(path):
        return oss.create_exclusive(path, data)
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError as e:  # a file system without hard links
            if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS):
                raise
        try:
            out = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(out, "wb") as f:
            f.write(data)
        return True
    finally:
        os.remove(tmp)


def read_bytes(path: str) -> bytes:
    if is_oss(path):
        return oss.read(path)
    with open(path, "rb") as f:
        return f.read()


def listdir(path: str) -> list:
    """Names in a directory (not paths); empty when it does not exist."""
    if is_oss(path):
        return oss.listdir(path)
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


def remove_file(path: str) -> None:
    """Deletes one file (object); nothing if it does not exist."""
    if is_oss(path):
        oss.remove(path)
    elif os.path.exists(path):
        os.remove(path)


def remove_tree(path: str) -> None:
    """Deletes a directory and everything in it; nothing if it does not exist."""
    if is_oss(path):
        oss.remove_tree(path)
        return
    shutil.rmtree(path, ignore_errors=True)


def basename(path: str) -> str:
    """The last part of a path or oss:// URL, ignoring a trailing slash."""
    return path.rstrip("/").rsplit("/", 1)[-1]
