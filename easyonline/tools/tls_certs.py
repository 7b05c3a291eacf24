"""A certificate authority and loopback server certificates, made per run with the openssl command.

Clients verify a broker's certificate (its CA, and that it names the host
they dialled), as production clients do; so a test broker needs a CA of its
own and a certificate for 127.0.0.1/localhost signed by it. PEM files only:
Kafka reads them with ``ssl.keystore.type=PEM``, librdkafka and kafka-python
with ``ssl.ca.location`` / ``ssl_cafile``, gRPC as bytes.
"""
import os
import shutil
import subprocess
from dataclasses import dataclass


@dataclass(frozen=True)
class ServerCertificate:
    ca_cert: str  # the CA clients trust (PEM)
    cert: str  # the server's certificate (PEM)
    key: str  # its private key (PEM, PKCS#8, unencrypted)
    keystore: str  # key and certificate in one PEM file (Kafka's ssl.keystore.location)


def _openssl(*args: str, cwd: str) -> None:
    openssl = shutil.which("openssl")
    if not openssl:
        raise RuntimeError("making TLS certificates needs the openssl command")
    done = subprocess.run([openssl, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"openssl {args[0]} failed: {done.stdout.strip()}")


def make_ca(folder: str, name: str = "easyonline test CA") -> str:
    """A self-signed CA (key and certificate) in ``folder``; returns the certificate's path."""
    os.makedirs(folder, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", "ca.key", "-out", "ca.pem", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=folder)
    return os.path.join(folder, "ca.pem")


def make_server_certificate(folder: str, name: str = "server",
                            hosts: tuple = ("127.0.0.1", "localhost")) -> ServerCertificate:
    """A certificate for ``hosts`` signed by the CA in ``folder`` (made first when missing)."""
    if not os.path.exists(os.path.join(folder, "ca.pem")):
        make_ca(folder)
    san = ",".join(("IP:" if h.replace(".", "").isdigit() else "DNS:") + h for h in hosts)
    with open(os.path.join(folder, f"{name}.ext"), "w", encoding="ascii") as f:
        f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={hosts[0]}", "-keyout", f"{name}.key",
             "-out", f"{name}.csr", cwd=folder)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=folder)
    keystore = os.path.join(folder, f"{name}-keystore.pem")
    with open(keystore, "w", encoding="ascii") as out:
        for part in (f"{name}.key", f"{name}.pem", "ca.pem"):
            with open(os.path.join(folder, part), encoding="ascii") as f:
                out.write(f.read())
    return ServerCertificate(os.path.join(folder, "ca.pem"), os.path.join(folder, f"{name}.pem"),
                             os.path.join(folder, f"{name}.key"), keystore)
