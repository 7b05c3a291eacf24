"""A small in-memory OSS for tests: the object calls easyonline makes through oss2, over real HTTP.

No real OSS is reachable from this machine, so tests that use ``oss://``
paths run against this: a ThreadingHTTPServer on 127.0.0.1 speaking the
path-style OSS REST calls oss2 sends for an IP endpoint (PUT, GET, HEAD and
DELETE of an object, GET bucket listing with prefix/delimiter/marker, POST
?delete, multipart uploads: POST ?uploads, PUT ?partNumber&uploadId, POST and
DELETE ?uploadId), returning the CRC64 oss2 checks. It does not check
signatures.

Two limits of real OSS are kept, because easyonline's code depends on them:
a PUT with ``x-oss-forbid-overwrite: true`` of an existing object is refused
with 409 FileAlreadyExists, atomically (the writer lock's exclusive create),
and a single PUT body larger than ``max_put_bytes`` (5 GB on OSS; tests set
a small one) is refused with 400 EntityTooLarge. ``puts`` records the size of
every PUT body (objects and parts), so a test can see how a file was sent.
"""
import contextlib
import threading
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Dict, List, Tuple
from xml.sax.saxutils import escape

from oss2.utils import Crc64

from easyonline.utils import oss


def _crc(data: bytes) -> str:
    crc = Crc64()
    crc.update(data)
    return str(crc.crc)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # (socketserver's 5 resets connections when tests race dozens of clients at once)


class FakeOss:
    def __init__(self):
        self.objects: Dict[str, Dict[str, bytes]] = {}
        self.requests = 0
        self.failing = False  # True: every request gets 503 ServiceUnavailable (a transient OSS error)
        self.max_put_bytes = 5 << 30  # OSS's limit on one PUT body
        self.puts: List[Tuple[str, int]] = []  # (key, body bytes) of every PUT of an object or a part
        self.uploads: Dict[str, Tuple[str, str, Dict[int, bytes]]] = {}  # upload id: (bucket, key, {part: data})
        self._mutex = threading.Lock()  # one request's check-and-write at a time, as OSS is atomic per object
        store = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _parts(self):
                parsed = urllib.parse.urlsplit(self.path)
                bucket, _, key = parsed.path.lstrip("/").partition("/")
                return bucket, urllib.parse.unquote(key), urllib.parse.parse_qs(parsed.query,
                                                                                 keep_blank_values=True)

            def _reply(self, code, body=b"", headers=None):
                store.requests += 1
                if store.failing:
                    code, headers = 503, {"Content-Type": "application/xml"}
                    body = (b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>ServiceUnavailable</Code>"
                            b"<Message>Please reduce your request rate.</Message></Error>")
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("x-oss-request-id", f"fake-{store.requests}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _missing(self, key):
                body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code><Message>The "
                        f"specified key does not exist.</Message><Key>{escape(key)}</Key></Error>").encode()
                self._reply(404, body, {"Content-Type": "application/xml"})

            def _body(self):
                return self.rfile.read(int(self.headers.get("Content-Length", "0") or 0))

            def _error(self, status, code, message):
                body = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{code}</Code><Message>"
                        f"{escape(message)}</Message></Error>").encode()
                self._reply(status, body, {"Content-Type": "application/xml"})

            def do_PUT(self):  # noqa: N802
                bucket, key, query = self._parts()
                data = self._body()
                with store._mutex:
                    store.puts.append((key, len(data)))
                    if len(data) > store.max_put_bytes:
                        return self._error(400, "EntityTooLarge", "Your proposed upload exceeds the maximum "
                                                                  "allowed size.")
                    if "uploadId" in query:
                        upload = store.uploads.get(query["uploadId"][0])
                        if upload is None:
                            return self._error(404, "NoSuchUpload", "The specified upload does not exist.")
                        upload[2][int(query["partNumber"][0])] = data
                        return self._reply(200, headers={"ETag": f'"part-{len(data)}"',
                                                         "x-oss-hash-crc64ecma": _crc(data)})
                    objects = store.objects.setdefault(bucket, {})
                    if self.headers.get("x-oss-forbid-overwrite", "").lower() == "true" and key in objects:
                        return self._error(409, "FileAlreadyExists", "The object you specified already exists "
                                                                     "and can not be overwritten.")
                    objects[key] = data
                self._reply(200, headers={"ETag": '"fake"', "x-oss-hash-crc64ecma": _crc(data)})

            def do_GET(self):  # noqa: N802
                bucket, key, query = self._parts()
                objects = store.objects.setdefault(bucket, {})
                if key:
                    if key not in objects:
                        return self._missing(key)
                    data = objects[key]
                    return self._reply(200, data, {"ETag": '"fake"', "x-oss-hash-crc64ecma": _crc(data),
                                                   "Content-Type": "application/octet-stream",
                                                   "Last-Modified": "Sun, 22 Nov 2026 00:00:00 GMT"})
                self._list(objects, query)

            def do_HEAD(self):  # noqa: N802
                bucket, key, _ = self._parts()
                data = store.objects.setdefault(bucket, {}).get(key)
                if data is None:
                    return self._reply(404)
                self._reply(200, headers={"ETag": '"fake"', "Content-Length-Real": str(len(data)),
                                          "x-oss-hash-crc64ecma": _crc(data),
                                          "Last-Modified": "Sun, 22 Nov 2026 00:00:00 GMT"})

            def do_DELETE(self):  # noqa: N802
                bucket, key, query = self._parts()
                with store._mutex:
                    if "uploadId" in query:  # an aborted multipart upload
                        store.uploads.pop(query["uploadId"][0], None)
                    else:
                        store.objects.setdefault(bucket, {}).pop(key, None)
                self._reply(204)

            def _multipart(self, bucket, key, query, body):
                with store._mutex:
                    if "uploads" in query:
                        upload_id = uuid.uuid4().hex
                        store.uploads[upload_id] = (bucket, key, {})
                        xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><InitiateMultipartUploadResult>"
                               f"<Bucket>{bucket}</Bucket><Key>{escape(key)}</Key><UploadId>{upload_id}</UploadId>"
                               f"</InitiateMultipartUploadResult>")
                        return self._reply(200, xml.encode(), {"Content-Type": "application/xml"})
                    upload = store.uploads.pop(query["uploadId"][0], None)
                    if upload is None:
                        return self._error(404, "NoSuchUpload", "The specified upload does not exist.")
                    numbers = [int(chunk.split("</PartNumber>", 1)[0]) for chunk in body.split("<PartNumber>")[1:]]
                    if numbers != sorted(numbers) or any(n not in upload[2] for n in numbers):
                        return self._error(400, "InvalidPart", "One or more of the specified parts could not "
                                                               "be found.")
                    data = b"".join(upload[2][n] for n in numbers)
                    store.objects.setdefault(bucket, {})[key] = data
                xml = (f"<?xml version=\"1.0\" encoding=\"UTF-8\"?><CompleteMultipartUploadResult><Bucket>{bucket}"
                       f"</Bucket><Key>{escape(key)}</Key><ETag>\"fake\"</ETag></CompleteMultipartUploadResult>")
                self._reply(200, xml.encode(), {"Content-Type": "application/xml", "ETag": '"fake"',
                                                "x-oss-hash-crc64ecma": _crc(data)})

            def do_POST(self):  # noqa: N802
                bucket, key, query = self._parts()
                body = self._body().decode()
                if "uploads" in query or "uploadId" in query:
                    return self._multipart(bucket, key, query, body)
                deleted = []
                if "delete" in query:
                    for chunk in body.split("<Key>")[1:]:
                        key = chunk.split("</Key>", 1)[0]
                        key = key.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
                        store.objects.setdefault(bucket, {}).pop(key, None)
                        deleted.append(key)
                xml = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><DeleteResult>" + "".join(
                    f"<Deleted><Key>{escape(k)}</Key></Deleted>" for k in deleted) + "</DeleteResult>"
                self._reply(200, xml.encode(), {"Content-Type": "application/xml"})

            def _list(self, objects, query):
                prefix = query.get("prefix", [""])[0]
                delimiter = query.get("delimiter", [""])[0]
                marker = query.get("marker", [""])[0]
                max_keys = int(query.get("max-keys", ["100"])[0] or 100)
                contents, prefixes = [], []
                for key in sorted(k for k in objects if k.startswith(prefix) and k > marker):
                    rest = key[len(prefix):]
                    if delimiter and delimiter in rest:
                        common = prefix + rest.split(delimiter, 1)[0] + delimiter
                        if common not in prefixes and common > marker:
                            prefixes.append(common)
                    else:
                        contents.append(key)
                entries = sorted([(k, "c") for k in contents] + [(p, "p") for p in prefixes])
                truncated = len(entries) > max_keys
                entries = entries[:max_keys]
                xml = ["<?xml version=\"1.0\" encoding=\"UTF-8\"?><ListBucketResult>",
                       f"<Prefix>{escape(prefix)}</Prefix><Marker>{escape(marker)}</Marker>",
                       f"<MaxKeys>{max_keys}</MaxKeys><Delimiter>{escape(delimiter)}</Delimiter>",
                       f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>"]
                if truncated:
                    xml.append(f"<NextMarker>{escape(entries[-1][0])}</NextMarker>")
                for name, kind in entries:
                    if kind == "c":
                        xml.append(f"<Contents><Key>{escape(name)}</Key><LastModified>2026-11-22T00:00:00.000Z"
                                   f"</LastModified><ETag>\"fake\"</ETag><Type>Normal</Type>"
                                   f"<Size>{len(objects[name])}</Size><StorageClass>Standard</StorageClass>"
                                   f"</Contents>")
                    else:
                        xml.append(f"<CommonPrefixes><Prefix>{escape(name)}</Prefix></CommonPrefixes>")
                xml.append("</ListBucketResult>")
                self._reply(200, "".join(xml).encode(), {"Content-Type": "application/xml"})

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeOss":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def configured_fake_oss():
    """A FakeOss that this process's oss:// paths reach (oss.configure), unconfigured again afterwards."""
    with FakeOss() as fake:
        oss.configure(fake.endpoint, "id", "secret")
        try:
            yield fake
        finally:
            oss.configure("", "", "")
