"""A throw-away certificate authority for TLS tests, made with the ``openssl`` command.

``make_pki(directory)`` writes a CA, a server certificate signed by it for the given host names
and addresses (``127.0.0.1`` by default) and a second, unrelated CA (the "wrong" one a client may
be given), and an expired certificate of the server (same key and names, valid for one day of
2020); every file is PEM.  Nothing here is for production.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA that signed the server's certificate
    cert: Path  # the server's certificate
    key: Path  # its private key
    wrong_ca: Path  # a CA that signed nothing here
    expired: Path  # the server's certificate, signed by ``ca``, that expired in 2020


def openssl_available() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def self_signed(
    directory: Path, name: str, subject: str | None = None, extensions: Sequence[str] = ()
) -> tuple[Path, Path]:
    """A self-signed certificate and its key (P-256, 2 days): ``directory/NAME.pem`` and
    ``.key``, subject ``/CN=NAME`` unless given, with the ``-addext`` ``extensions``."""
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"),
        *("-days", "2", "-subj", subject or f"/CN={name}"),
        *(arg for extension in extensions for arg in ("-addext", extension)),
        *("-keyout", str(key), "-out", str(cert)),
    )
    return cert, key


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    return self_signed(
        directory,
        name,
        extensions=("basicConstraints=critical,CA:TRUE", "keyUsage=critical,keyCertSign,cRLSign"),
    )


def make_pki(directory: Path, names: Sequence[str] = ("IP:127.0.0.1",)) -> Pki:
    """A CA, a server certificate for ``names`` (subjectAltName entries) and a wrong CA."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = _ca(directory, "test-ca")
    wrong, _ = _ca(directory, "wrong-ca")
    key, request, cert = (
        directory / "server.key",
        directory / "server.csr",
        directory / "server.pem",
    )
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-subj",
        "/CN=glidein-ext test Task Queue",
        "-keyout",
        str(key),
        "-out",
        str(request),
    )
    extensions = directory / "server.ext"
    extensions.write_text(
        f"subjectAltName={','.join(names)}\n"
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth\n"
    )
    _openssl(
        "x509",
        "-req",
        "-in",
        str(request),
        "-CA",
        str(ca),
        "-CAkey",
        str(ca_key),
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        str(extensions),
        "-out",
        str(cert),
    )
    key.chmod(0o600)
    expired = _expired(directory, request, ca, ca_key, extensions)
    return Pki(ca=ca, cert=cert, key=key, wrong_ca=wrong, expired=expired)


def _expired(directory: Path, request: Path, ca: Path, ca_key: Path, extensions: Path) -> Path:
    """``request`` signed by the CA for 2020-01-01 only (``openssl ca``: ``x509`` and ``req``
    take no dates in the past)."""
    work = directory / "expired-ca"
    work.mkdir()
    (work / "index.txt").write_text("")
    (work / "serial").write_text("1000\n")
    config = work / "ca.cnf"
    config.write_text(
        "[ca]\ndefault_ca = here\n[here]\n"
        f"database = {work / 'index.txt'}\nnew_certs_dir = {work}\nserial = {work / 'serial'}\n"
        "default_md = sha256\npolicy = any\nunique_subject = no\n[any]\ncommonName = supplied\n"
    )
    expired = directory / "server-expired.pem"
    _openssl(
        *("ca", "-batch", "-notext", "-config", str(config), "-in", str(request)),
        *("-cert", str(ca), "-keyfile", str(ca_key), "-extfile", str(extensions)),
        *("-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-out", str(expired)),
    )
    return expired
