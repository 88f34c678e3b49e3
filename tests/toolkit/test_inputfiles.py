"""Files named by flags: regular files of bounded size only, never a hang on a FIFO or a prompt for a passphrase."""

from __future__ import annotations

import os
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from toolkit.certs import CertificateAuthority
from toolkit.inputfiles import InputFileError, read_input_file, read_input_text, refuse_passphrase


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path) -> None:
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputFileError, match=r"^--config .*config.yaml: not a regular file \(a FIFO\)$"):
        read_input_file(fifo, "--config")


def test_endless_devices_and_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InputFileError, match=r"^--collectors /dev/zero: not a regular file \(a device\)$"):
        read_input_file(Path("/dev/zero"), "--collectors")
    with pytest.raises(InputFileError, match=r"not a regular file \(a directory\)"):
        read_input_file(tmp_path, "--collectors")


def test_a_file_above_the_cap_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1001)
    with pytest.raises(InputFileError, match="larger than 1000 bytes"):
        read_input_file(big, "--config", max_bytes=1000)
    assert read_input_file(big, "--config", max_bytes=1001) == b"x" * 1001


def test_text_must_be_utf8(tmp_path: Path) -> None:
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputFileError, match=r"^--config .*bin: not a UTF-8 text file$"):
        read_input_text(binary, "--config")


def test_a_passphrase_protected_key_is_an_error_naming_the_flag(tmp_path: Path) -> None:
    issued = CertificateAuthority.create("ca").issue_server(["localhost"])
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(
        issued.key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with pytest.raises(InputFileError, match=r"^--tls-key-file .*tls.key: the key is protected by a passphrase"):
        context.load_cert_chain(cert, key, password=refuse_passphrase("--tls-key-file", key))
