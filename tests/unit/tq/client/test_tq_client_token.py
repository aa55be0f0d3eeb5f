"""The pilot's side of credentials and TLS (Python 3.9, standard library): the token file must be
private, the CA file usable, and a CA file never goes with a plain http:// URL."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from glidein_ext.errors import UsageError
from glidein_ext.tq.client.client import TqClient, read_token_file

SECRET = "gxp_" + "s" * 43


def token_file(tmp_path: Path, text: str, mode: int) -> Path:
    path = tmp_path / "tq-credential"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_private_token_file_is_read(tmp_path: Path) -> None:
    assert read_token_file(str(token_file(tmp_path, SECRET + "\n", 0o600))) == SECRET
    assert read_token_file(str(token_file(tmp_path, f"  {SECRET}  ", 0o400))) == SECRET


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o620, 0o666])
def test_a_token_file_open_to_group_or_others_is_refused_in_one_line(
    tmp_path: Path, mode: int
) -> None:
    path = token_file(tmp_path, SECRET, mode)
    with pytest.raises(UsageError) as refused:
        read_token_file(str(path))
    message = str(refused.value)
    assert f"mode {mode:04o}" in message and "chmod 600" in message and "\n" not in message
    assert SECRET not in message


def test_other_unusable_token_files_are_refused(tmp_path: Path) -> None:
    cases = {
        "missing": (str(tmp_path / "nothing"), "cannot read the token file"),
        "directory": (str(tmp_path), "is not a regular file"),
        "empty": (str(token_file(tmp_path, "\n", 0o600)), "one token on one line"),
    }
    two = tmp_path / "two"
    two.write_text("a\nb\n")
    two.chmod(0o600)
    cases["two lines"] = (str(two), "one token on one line")
    big = tmp_path / "big"
    big.write_text("x" * 5000)
    big.chmod(0o600)
    cases["too big"] = (str(big), "one token on one line")
    link = tmp_path / "link"
    os.symlink(str(two), str(link))
    cases["a symbolic link"] = (str(link), "cannot read the token file")
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo), 0o600)
    cases["a FIFO"] = (str(fifo), "is not a regular file")
    for name, (path, message) in cases.items():
        with pytest.raises(UsageError, match=message):
            read_token_file(path)
        assert name


def test_the_client_checks_its_ca_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not https://"):
        TqClient("http://127.0.0.1:1", "t", ca_file=str(tmp_path / "ca.pem"))
    with pytest.raises(UsageError, match="cannot use the CA file"):
        TqClient("https://127.0.0.1:1", "t", ca_file=str(tmp_path / "missing.pem"))
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(UsageError, match="cannot use the CA file"):
        TqClient("https://127.0.0.1:1", "t", ca_file=str(garbage))
    assert TqClient("https://127.0.0.1:1", "t").context is not None  # the system's CA store
    assert TqClient("http://127.0.0.1:1", "t").context is None
