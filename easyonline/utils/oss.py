"""``oss://bucket/key`` access through oss2, for fileio.

Endpoint and credentials come from ``configure()`` or the environment
(``OSS_ENDPOINT``, ``OSS_ACCESS_KEY_ID``, ``OSS_ACCESS_KEY_SECRET``, and
``OSS_SECURITY_TOKEN`` for STS), never from a path, and are never logged or
put in an error message. OSS has no directories: a "directory" is a key
prefix ending in ``/``, and a put of one object is atomic, so readers never
see half a file.

Files go up and down without being held in memory (``upload_file``,
``download_file``): OSS refuses one PUT past 5 GB, so a file larger than one
part (``OSS_UPLOAD_PART_MB``, default 64 MB) goes as a multipart upload of parts
streamed from disk, which OSS also makes visible whole or not at all.
"""
import logging
import os
import tempfile
import threading
from typing import Dict, List, Tuple

from easyonline.core.errors import OssConfigError

log = logging.getLogger(__name__)

DEFAULT_PART_MB = 64
MAX_PART_MB = 5 << 10  # OSS's largest part (and single PUT): 5 GB
MAX_PARTS = 10000  # OSS's most parts in one multipart upload

_settings: Dict[str, str] = {}
_buckets: Dict[str, object] = {}
_lock = threading.Lock()


def configure(endpoint: str, access_key_id: str, access_key_secret: str, security_token: str = "",
              upload_part_mb: int = 0) -> None:
    """Sets the endpoint and credentials for this process (overrides the environment), and the part size of
    uploads (``upload_part_mb``; 0: ``OSS_UPLOAD_PART_MB`` or 64)."""
    _check_part_mb(upload_part_mb, "upload_part_mb")
    with _lock:
        _settings.update(endpoint=endpoint, access_key_id=access_key_id, access_key_secret=access_key_secret,
                         security_token=security_token, upload_part_mb=str(upload_part_mb or ""))
        _buckets.clear()


def _check_part_mb(value: int, name: str) -> int:
    if not 0 <= value <= MAX_PART_MB:
        raise OssConfigError(f"{name}={value}: OSS takes parts of 1 to {MAX_PART_MB} MB (0: the default, "
                             f"{DEFAULT_PART_MB})")
    return value


def split(path: str) -> Tuple[str, str]:
    """("bucket", "key/inside") of ``oss://bucket/key/inside``."""
    rest = path[len("oss://"):]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"{path!r} is not oss://bucket/key")
    return bucket, key


def _setting(name: str, env: str) -> str:
    return _settings.get(name) or os.environ.get(env) or ""


def bucket(name: str):
    with _lock:
        if name not in _buckets:
            import oss2  # pylint: disable=g-import-not-at-top
            endpoint = _setting("endpoint", "OSS_ENDPOINT")
            key_id, secret = _setting("access_key_id", "OSS_ACCESS_KEY_ID"), _setting("access_key_secret",
                                                                                       "OSS_ACCESS_KEY_SECRET")
            if not endpoint or not key_id or not secret:
                raise OssConfigError("oss:// paths need an endpoint and credentials: set OSS_ENDPOINT, "
                                     "OSS_ACCESS_KEY_ID and OSS_ACCESS_KEY_SECRET (or call easyonline.utils.oss."
                                     "configure)")
            token = _setting("security_token", "OSS_SECURITY_TOKEN")
            auth = oss2.StsAuth(key_id, secret, token) if token else oss2.Auth(key_id, secret)
            _buckets[name] = oss2.Bucket(auth, endpoint, name, connect_timeout=10)
        return _buckets[name]


def _bucket_key(path: str):
    name, key = split(path)
    return bucket(name), key


def read(path: str) -> bytes:
    import oss2  # pylint: disable=g-import-not-at-top
    b, key = _bucket_key(path)
    try:
        return b.get_object(key).read()
    except oss2.exceptions.NoSuchKey:
        raise FileNotFoundError(f"no such object: {path}") from None


def write(path: str, data: bytes) -> None:
    b, key = _bucket_key(path)
    b.put_object(key, data)


def create_exclusive(path: str, data: bytes) -> bool:
    """Puts ``data`` unless the object exists (``x-oss-forbid-overwrite``, checked by OSS atomically);
    True when this call created it. (OSS ignores the header in a bucket with versioning enabled.)"""
    import oss2  # pylint: disable=g-import-not-at-top
    b, key = _bucket_key(path)
    try:
        b.put_object(key, data, headers={"x-oss-forbid-overwrite": "true"})
        return True
    except oss2.exceptions.ServerError as e:
        if e.status == 409 and e.code == "FileAlreadyExists":
            return False
        raise


def part_bytes(size: int) -> int:
    """The part size of an upload of ``size`` bytes: ``upload_part_mb`` (``OSS_UPLOAD_PART_MB``, default 64
    MB), or larger when the file would need more than OSS's 10,000 parts."""
    text = _setting("upload_part_mb", "OSS_UPLOAD_PART_MB")
    try:
        mb = int(text or 0)
    except ValueError:
        raise OssConfigError(f"OSS_UPLOAD_PART_MB={text!r} is not a whole number of MB") from None
    mb = _check_part_mb(mb, "OSS_UPLOAD_PART_MB") or DEFAULT_PART_MB
    return max(mb << 20, -(-size // MAX_PARTS))


def upload_file(local: str, path: str) -> None:
    """Copies a local file to ``path`` streamed from disk: one put up to the part size, else a multipart
    upload; either way the object appears whole or not at all."""
    b, key = _bucket_key(path)
    size = os.path.getsize(local)
    part = part_bytes(size)
    if size <= part:
        b.put_object_from_file(key, local)
    else:
        _multipart_upload(b, key, local, size, part)


def _multipart_upload(b, key: str, local: str, size: int, part: int) -> None:
    """Parts of ``part`` bytes, each read from the file as oss2 sends it; aborted on failure, so OSS keeps
    no orphan parts (which it would bill) and no object."""
    import oss2  # pylint: disable=g-import-not-at-top
    upload_id = b.init_multipart_upload(key).upload_id
    try:
        parts = []
        with open(local, "rb") as f:
            for number, offset in enumerate(range(0, size, part), start=1):
                length = min(part, size - offset)
                f.seek(offset)
                result = b.upload_part(key, upload_id, number, oss2.utils.SizedFileAdapter(f, length))
                parts.append(oss2.models.PartInfo(number, result.etag, size=length, part_crc=result.crc))
        b.complete_multipart_upload(key, upload_id, parts)
    except BaseException:
        try:
            b.abort_multipart_upload(key, upload_id)
        except Exception as e:  # pylint: disable=broad-except
            log.warning("could not abort the multipart upload of %s (%s): its parts stay until OSS's lifecycle "
                        "rules remove them", key, e)
        raise


def download_file(path: str, local: str) -> None:
    """Copies ``path`` to a local file, streamed to disk (a temp file renamed: readers never see half)."""
    import oss2  # pylint: disable=g-import-not-at-top
    b, key = _bucket_key(path)
    directory = os.path.dirname(local) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    os.close(fd)
    try:
        b.get_object_to_file(key, tmp)
        os.replace(tmp, local)
    except oss2.exceptions.NoSuchKey:
        raise FileNotFoundError(f"no such object: {path}") from None
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _dir_prefix(key: str) -> str:
    return key if not key or key.endswith("/") else key + "/"


def exists(path: str) -> bool:
    """An object, or a "directory" (some object under ``path/``)."""
    b, key = _bucket_key(path)
    if key and not key.endswith("/") and b.object_exists(key):
        return True
    return bool(b.list_objects(prefix=_dir_prefix(key), max_keys=1).object_list)


def listdir(path: str) -> List[str]:
    """Names directly under ``path`` (objects and "subdirectories"), sorted."""
    import oss2  # pylint: disable=g-import-not-at-top
    b, key = _bucket_key(path)
    prefix = _dir_prefix(key)
    names = set()
    for info in oss2.ObjectIterator(b, prefix=prefix, delimiter="/"):
        name = info.key[len(prefix):].rstrip("/")
        if name:
            names.add(name)
    return sorted(names)


def remove(path: str) -> None:
    b, key = _bucket_key(path)
    b.delete_object(key)


def remove_tree(path: str) -> None:
    import oss2  # pylint: disable=g-import-not-at-top
    b, key = _bucket_key(path)
    keys = [info.key for info in oss2.ObjectIterator(b, prefix=_dir_prefix(key))]
    for i in range(0, len(keys), 1000):
        b.batch_delete_objects(keys[i:i + 1000])


def upload_tree(local_dir: str, path: str, last: str = "") -> None:
    """Copies a local directory under ``path``; the file named ``last`` (relative) goes up after the rest,
    so a reader that waits for it never sees a partial tree."""
    files = []
    for root, _, names in os.walk(local_dir):
        for name in names:
            local = os.path.join(root, name)
            files.append((os.path.relpath(local, local_dir).replace(os.sep, "/"), local))
    for relative, local in sorted(files, key=lambda f: (f[0] == last, f[0])):
        upload_file(local, path.rstrip("/") + "/" + relative)
