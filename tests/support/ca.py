"""A CA certificate for the tests that hand a glidein or a client a CA file: a real PEM, loaded by
``ssl``, the same everywhere (the Python 3.9 chroot has no system bundle).  Self-signed for the
tests once (EC P-256, valid for a century); its key was discarded: nothing it signs exists."""

from __future__ import annotations

from pathlib import Path

TEST_CA_PEM = """\
-----BEGIN CERTIFICATE-----
MIIBkjCCATmgAwIBAgIUZ/sZl6lv++i7Ev9sJ6eFJZIF6ZswCgYIKoZIzj0EAwIw
HjEcMBoGA1UEAwwTZ2xpZGVpbi1leHQgdGVzdCBDQTAgFw0yNjExMjgwMjI4NTNa
GA8yMTI2MTEwNDAyMjg1M1owHjEcMBoGA1UEAwwTZ2xpZGVpbi1leHQgdGVzdCBD
QTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABLkOmRWYOKGA/UNORjmNhoiI3eib
8yCQzrgWvrtvF/Ce19BaJKben8AXxahCvt/bWOWTos/2HucWpLaOSp1CLgejUzBR
MB0GA1UdDgQWBBRlJfpe63SycT8gpdgtOMUhffdFDjAfBgNVHSMEGDAWgBRlJfpe
63SycT8gpdgtOMUhffdFDjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0cA
MEQCIGeCAGPcnCGPgGTa3mRbj6+DnXxAWA8zdr3C5CT8Fbi2AiAMLPxQEQkSjfgx
xa+YHqRLBAtO1YH2F+713ZKtOkJbGQ==
-----END CERTIFICATE-----
"""


def write_test_ca(path: Path) -> Path:
    """The test CA written at ``path``."""
    path.write_text(TEST_CA_PEM)
    return path
