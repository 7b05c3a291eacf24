"""TLS on serve's REST and gRPC ports, with client certificates when a client CA is given.

A server reachable beyond its host should not take requests in clear text, and
where updates arrive over gRPC (``--follow_updates=false``) the caller should
be someone the operator issued a certificate to. One set of flags serves both
ports: ``--tls_cert_file`` and ``--tls_key_file`` (PEM) turn TLS on;
``--tls_client_ca_file`` also requires every client to present a certificate
that CA signed (mutual TLS). The REST handshake runs in the connection's own
thread, bounded by ``--idle_timeout_secs``, so a slow client does not hold
the accept loop.
"""
import dataclasses
import ssl
from typing import Optional

import grpc

from easyonline.core.errors import ConfigError


@dataclasses.dataclass(frozen=True)
class ServerTls:
    cert_file: str
    key_file: str
    client_ca_file: str = ""  # set: clients must present a certificate this CA signed

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file:
            context.load_verify_locations(self.client_ca_file)
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def grpc_credentials(self) -> grpc.ServerCredentials:
        with open(self.key_file, "rb") as f:
            key = f.read()
        with open(self.cert_file, "rb") as f:
            cert = f.read()
        client_ca = None
        if self.client_ca_file:
            with open(self.client_ca_file, "rb") as f:
                client_ca = f.read()
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                           require_client_auth=client_ca is not None)


def tls_from_flags(cert_file: str, key_file: str, client_ca_file: str) -> Optional[ServerTls]:
    """The TLS settings the flags give (None: plain text); ConfigError naming the flag when incomplete or
    unreadable (checked here, at start, not at the first connection)."""
    if not (cert_file or key_file or client_ca_file):
        return None
    if not (cert_file and key_file):
        raise ConfigError("--tls_cert_file/--tls_key_file", "TLS needs both the certificate and its key"
                          + (" (--tls_client_ca_file alone does not turn TLS on)" if client_ca_file else ""))
    tls = ServerTls(cert_file, key_file, client_ca_file)
    try:
        tls.ssl_context()
    except (OSError, ssl.SSLError) as e:
        raise ConfigError("--tls_cert_file/--tls_key_file/--tls_client_ca_file",
                          f"cannot load the certificate, key or client CA: {e}") from None
    return tls
