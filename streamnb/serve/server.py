"""The front door's listener: a socket bound at start-up, served on a thread of its own.

:func:`bind` runs with the daemon's other start-up checks, before anything is consumed, so a
port in use stops the daemon in seconds with one line naming ``http.port``. Serving starts
once the state is read from the changelog (:meth:`HttpServer.start`): the first check is
scored by the whole global model. The server's asyncio loop runs on its own thread and never
waits for the Kafka loop (see :mod:`streamnb.serve.scoring`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from typing import Any

from aiohttp import web

from streamnb.config import HttpSettings

__all__ = ["HttpServer", "bind", "tls_context"]

log = logging.getLogger("streamnb.serve")

#: Connections the kernel holds before they are accepted.
BACKLOG = 1024


class BindError(OSError):
    """The listener could not be bound; the message is one line naming the settings."""


def bind(settings: HttpSettings, reuse_port: bool = True) -> socket.socket:
    """A listening socket on ``http.host:http.port``; raises :class:`BindError`.

    With ``reuse_port`` (``SO_REUSEPORT``) scorers (``streamnb serve``) and a daemon may share
    the port on one host, the kernel spreading connections over them; a socket bound without
    it (another program) still makes the port unavailable."""
    try:
        family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port and hasattr(socket, "SO_REUSEPORT"):
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        listener.bind((settings.host, settings.port))
        listener.listen(BACKLOG)
        listener.setblocking(False)
        return listener
    except OSError as error:
        raise BindError(f"http.port: cannot serve checks on {settings.host}:{settings.port}: "
                        f"{error.strerror or error} (http.host, http.port; 0 disables)") from None


def tls_context(settings: HttpSettings) -> ssl.SSLContext | None:
    """The server's TLS context from ``http.tls_certfile`` and ``http.tls_keyfile``."""
    if settings.tls_certfile is None:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(settings.tls_certfile), str(settings.tls_keyfile))
    except (OSError, ssl.SSLError) as error:
        raise BindError(f"http.tls_certfile: cannot load the certificate and key: "
                        f"{error}") from None
    return context


class HttpServer:
    """Serves ``application`` on ``listener`` from a thread with its own event loop."""

    def __init__(self, application: web.Application, listener: socket.socket,
                 settings: HttpSettings, on_close: Any = None):
        self.application = application
        self.listener = listener
        self.settings = settings
        self.on_close = on_close
        self.address = listener.getsockname()[:2]
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._serve, name="streamnb-http", daemon=True)
        self._started = threading.Event()
        self._failure: BaseException | None = None

    def start(self) -> None:
        """Serve; returns once the listener accepts requests (raises what prevented it)."""
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure
        log.info("serving checks in rspamd's protocol on %s://%s:%d%s",
                 "https" if self.settings.tls_certfile else "http", *self.address,
                 "" if self.settings.password else " (learning off: no http password)",
                 extra={"event": "http_serving", "host": self.address[0],
                        "port": self.address[1]})

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._open())
        except BaseException as error:  # noqa: BLE001 - handed to start()
            self._failure = error
            self._started.set()
            return
        self._started.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._shutdown())
        self._loop.close()

    async def _open(self) -> None:
        settings = self.settings
        self._runner = web.AppRunner(
            self.application, access_log=None, handle_signals=False,
            keepalive_timeout=settings.keepalive_seconds, max_headers=settings.max_headers,
            shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.SockSite(self._runner, self.listener, ssl_context=tls_context(settings),
                            backlog=BACKLOG)
        await site.start()

    async def _shutdown(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop accepting, let requests in flight finish (up to a second), and close."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        if self.on_close is not None:
            self.on_close()
