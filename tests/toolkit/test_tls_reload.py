"""A renewed serving certificate is served without a restart; a pair caught half-way through a rotation is not."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

import pytest
from aiohttp import web
from cryptography import x509

from toolkit.certs import CertificateAuthority
from toolkit.tls import CertificateReloader, server_context


async def served_serial(context: ssl.SSLContext, ca: CertificateAuthority) -> int:
    """Serve one tiny app with `context` and return the serial number of the certificate a client is shown."""

    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hello")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = runner.addresses[0][1]
    client = ssl.create_default_context(cadata=ca.cert_pem.decode())
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client, server_hostname="localhost")
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.close()
        return x509.load_der_x509_certificate(der).serial_number
    finally:
        await runner.cleanup()


async def test_a_renewed_pair_serves_from_the_next_check_on(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("ca")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = ca.issue_server(["localhost"])
    first.write(cert, key)
    context = server_context(cert, key)
    reloader = CertificateReloader(context, cert, key)
    assert not reloader.check(), "nothing changed yet"
    assert await served_serial(context, ca) == first.certificate.serial_number
    renewed = ca.issue_server(["localhost"])
    renewed.write(cert, key)
    assert reloader.check() and reloader.reloads == 1
    assert await served_serial(context, ca) == renewed.certificate.serial_number
    assert not reloader.check(), "the same files are not loaded twice"


async def test_a_half_rotated_pair_is_refused_and_the_current_one_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ca = CertificateAuthority.create("ca")
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    first = ca.issue_server(["localhost"])
    first.write(cert, key)
    context = server_context(cert, key)
    reloader = CertificateReloader(context, cert, key)
    renewed = ca.issue_server(["localhost"])
    cert.write_bytes(renewed.cert_pem)  # the certificate is new, its key not yet written
    with caplog.at_level(logging.WARNING, logger="toolkit.tls"):
        assert not reloader.check() and not reloader.check()
    assert reloader.errors == 2 and "--tls-private-key-file" in reloader.last_error
    assert sum("cannot be used yet" in r.getMessage() for r in caplog.records) == 1, "once per distinct problem"
    assert await served_serial(context, ca) == first.certificate.serial_number
    key.write_bytes(renewed.key_pem)  # the rotation completes
    assert reloader.check()
    assert await served_serial(context, ca) == renewed.certificate.serial_number
