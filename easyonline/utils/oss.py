"""``oss://bucket/key`` access through oss2, for fileio.

Endpoint and credentials come from ``configure()`` or the environment
(``OSS_ENDPOINT``, ``OSS_ACCESS_KEY_ID``, ``OSS_ACCESS_KEY_SECRET``, and
``OSS_SECURITY_TOKEN`` for STS), never from a path, and are never logged or
put in an error message. OSS has no directories: a "directory" is a key
prefix ending in ``/``, and a put of one object is atomic, so readers never
see half a file.
"""
import os
import threading
from typing import Dict, List, Optional, Tuple

from easyonline.core.errors import OssConfigError

_settings: Dict[str, str] = {}
_buckets: Dict[str, object] = {}
_lock = threading.Lock()




def configure(endpoint: str, access_key_id: str, access_key_secret: str, security_token: str = "") -> None:
    """Sets the endpoint and credentials for this process (overrides the environment)."""
    with _lock:
        _settings.update(endpoint=endpoint, access_key_id=access_key_id, access_key_secret=access_key_secret,
                         security_token=security_token)
        _buckets.clear()


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
        with open(local, "rb") as f:
            write(path.rstrip("/") + "/" + relative, f.read())


def endpoint_for_display() -> Optional[str]:
    """The endpoint (never the credentials), for messages."""
    return _setting("endpoint", "OSS_ENDPOINT") or None
