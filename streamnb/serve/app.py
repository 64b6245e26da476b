"""The front door's HTTP endpoints, in rspamd's protocol (docs/http.md).

=====================  ================================================================
``POST /checkv2``      the raw mail as the body: rspamd's JSON verdict (``GET`` with a body
                       too: rspamd's proxy in milter mode sends that)
``POST /learnspam``    the mail as spam, ``/learnham`` as ham, ``/learnclass`` as the class
                       of its ``Class`` header: a labelled record on the input topic, answered
                       ``{"success": true}`` once Kafka acknowledged it; needs ``Password``
``GET /ping``          ``pong``
``GET /stat``          what the model has learned
=====================  ================================================================

Every request is bounded: its body (413), its header lines (aiohttp answers 400 past
``max_headers``), its time from the body's first byte to the reply (408 while reading, 503
while waiting for the model), and the requests answered at once (503 with ``Retry-After``
past ``max_in_flight``; nothing queues). A mail the featurizer cannot use gets a 400 that says
why; an unexpected error a 500, and the server goes on.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import zstandard
from aiohttp import web

from streamnb.config import HttpSettings
from streamnb.pipeline import PipelineError
from streamnb.serve.learning import LearnTooLarge
from streamnb.serve.metrics import HttpMetrics
from streamnb.serve.rspamd import Policy, check_reply, envelope_of, message_id
from streamnb.serve.scoring import Scored, Scorer

__all__ = ["FrontDoor"]

log = logging.getLogger("streamnb.serve")

#: Learn endpoints and the label each teaches (``/learnclass``: its ``Class`` header's).
LEARN_PATHS = {"/learnspam": "spam", "/learnham": "ham", "/learnclass": None}
#: Worker threads that score while the Kafka loop holds the model (a check waits there).
SCORING_THREADS = 4


def _json(status: int, body: Any) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(body),
                        content_type="application/json")


def _error(status: int, message: str) -> web.Response:
    """rspamd's error reply: ``{"error": message}``."""
    return _json(status, {"error": message})


class FrontDoor:
    """The aiohttp application of checks and learns.

    ``scorer`` featurizes and scores (:class:`~streamnb.serve.scoring.Scorer`); ``learner``
    writes learns to Kafka (:class:`~streamnb.serve.learning.KafkaLearner`; None: learning is
    off, answered 503); ``stats()`` returns the model's learned counts for ``/stat``;
    ``labels`` the classes a learn may name (empty: any).
    """

    def __init__(self, settings: HttpSettings, scorer: Scorer, policy: Policy,
                 metrics: HttpMetrics, learner: Any = None,
                 stats: Callable[[], dict] | None = None, labels: frozenset[str] = frozenset()):
        self.settings = settings
        self.scorer = scorer
        self.policy = policy
        self.metrics = metrics
        self.learner = learner
        self.stats = stats or (lambda: {})
        self.labels = labels
        self.in_flight = 0
        self.checks = 0
        self.actions: dict[str, int] = {}
        self._pool = ThreadPoolExecutor(SCORING_THREADS, thread_name_prefix="streamnb-score")
        self._password = settings.password.encode("utf-8")

    def application(self) -> web.Application:
        app = web.Application(client_max_size=self.settings.max_body_bytes,
                              middlewares=[self._bounded])
        app.router.add_route("POST", "/checkv2", self.check)
        app.router.add_route("GET", "/checkv2", self.check)
        for path in LEARN_PATHS:
            app.router.add_route("POST", path, self.learn)
        app.router.add_route("GET", "/ping", self.ping)
        app.router.add_route("GET", "/stat", self.stat)
        return app

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # ---------------------------------------------------------------- bounds
    @web.middleware
    async def _bounded(self, request: web.Request,
                       handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                       ) -> web.StreamResponse:
        endpoint = _endpoint(request.path)
        if self.in_flight >= self.settings.max_in_flight:
            self.metrics.overloaded()
            self.metrics.request(endpoint, 503)
            response = _error(503, f"busy: {self.in_flight} requests in flight "
                                   "(http.max_in_flight)")
            response.headers["Retry-After"] = "1"
            return response
        self.in_flight += 1
        self.metrics.in_flight(self.in_flight)
        try:
            try:
                async with asyncio.timeout(self.settings.request_timeout_seconds):
                    response = await handler(request)
            except TimeoutError:
                response = _error(408 if not request.content.at_eof() else 503,
                                  f"not answered within {self.settings.request_timeout_seconds}"
                                  " s (http.request_timeout_seconds)")
            except web.HTTPException as error:
                response = _error(error.status, error.reason if error.status != 413 else
                                  f"the body exceeds {self.settings.max_body_bytes} bytes "
                                  "(http.max_body_bytes)")
            except Exception:  # noqa: BLE001 - one request's failure is not the server's
                log.exception("HTTP %s %s failed", request.method, request.path,
                              extra={"event": "http_error", "path": request.path})
                response = _error(500, "internal error; the server's log has its details")
        finally:
            self.in_flight -= 1
            self.metrics.in_flight(self.in_flight)
        self.metrics.request(endpoint, response.status)
        return response

    async def _body(self, request: web.Request) -> bytes | web.Response:
        """The request's body, decompressed if rspamd's client sent it zstd-compressed;
        a 413 or 400 reply for one that is too large, missing or undecodable."""
        length = request.content_length
        if length is not None and length > self.settings.max_body_bytes:
            return _error(413, f"the body of {length} bytes exceeds "
                               f"{self.settings.max_body_bytes} (http.max_body_bytes)")
        body = await request.read()
        if request.headers.get("Compression", "").lower() == "zstd":
            try:
                body = zstandard.ZstdDecompressor().decompress(
                    body, max_output_size=self.settings.max_body_bytes)
            except zstandard.ZstdError as error:
                return _error(400, f"the body is not zstd: {error}")
        if not body:
            return _error(400, "no message: send the mail as the request's body")
        return body

    # ---------------------------------------------------------------- checks
    async def check(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, web.Response):
            return body
        started = time.perf_counter()
        scorer = self.scorer
        try:
            x = scorer.prepare(body)
            scored = scorer.try_score(x)
            if scored is None:  # the Kafka loop is processing a batch: wait off the loop
                scored = await asyncio.get_running_loop().run_in_executor(
                    self._pool, scorer.score, x)
        except PipelineError as error:
            return _error(400, f"cannot score this message: {error.reason}: {error.detail}")
        return self._verdict(request, body, scored, started)

    def _verdict(self, request: web.Request, body: bytes, scored: Scored,
                 started: float) -> web.Response:
        policy = self.policy
        verdict = policy.verdict(scored.log_proba)
        seconds = time.perf_counter() - started
        reply = check_reply(policy, verdict, scored.log_proba, mid=message_id(body),
                            seconds=seconds, model_updates=scored.model_updates,
                            explanation=scored.explanation,
                            verdict_header=self.settings.verdict_header)
        envelope = envelope_of(request.headers)
        if envelope.user is not None:
            reply["streamnb"]["user"] = envelope.user
        self.checks += 1
        self.actions[verdict.action] = self.actions.get(verdict.action, 0) + 1
        self.metrics.checked(verdict.action, seconds)
        return _json(200, reply)

    # ---------------------------------------------------------------- learns
    async def learn(self, request: web.Request) -> web.Response:
        path_label = LEARN_PATHS[request.path]
        label = path_label or request.headers.get("Class", "").strip()
        given = request.headers.get("Password", "").encode("utf-8", "surrogateescape")
        if not self._password or not hmac.compare_digest(given, self._password):
            self.metrics.auth_failed()
            # Counted under the path's class: a Class header is not trusted before the password.
            self.metrics.learned(path_label or "_learnclass", "refused")
            why = ("learning over HTTP is off: no password is configured "
                   "(STREAMNB_HTTP__PASSWORD or http.password_file)" if not self._password
                   else "wrong or missing Password header")
            return _error(403, why)
        if not label:
            self.metrics.learned("_none", "bad_request")
            return _error(400, "/learnclass needs a Class header naming the class")
        if self.labels and label not in self.labels:
            self.metrics.learned("_other", "bad_request")
            return _error(400, f"class {label!r:.80} is not one of model.labels "
                               f"{sorted(self.labels)}")
        if self.learner is None:
            return _error(503, "learning is not available on this server")
        body = await self._body(request)
        if isinstance(body, web.Response):
            self.metrics.learned(label, "bad_request")
            return body
        mid = message_id(body)
        try:
            await asyncio.wait_for(self.learner.learn(mid, body, label),
                                   self.settings.learn_timeout_seconds)
        except LearnTooLarge as error:
            self.metrics.learned(label, "too_large")
            return _error(413, str(error))
        except TimeoutError:
            self.metrics.learned(label, "kafka_error")
            return _error(503, f"Kafka did not acknowledge the learn within "
                               f"{self.settings.learn_timeout_seconds} s; send it again "
                               "(a learn sent twice counts once)")
        except Exception as error:  # noqa: BLE001 - Kafka's errors: the client may retry
            self.metrics.learned(label, "kafka_error")
            log.warning("learn of %.200r not written: %s", mid, error,
                        extra={"event": "http_learn_failed"})
            return _error(503, f"the learn was not written to Kafka: {error}; send it again")
        self.metrics.learned(label, "acknowledged")
        return _json(200, {"success": True, "message-id": mid, "class": label})

    # ---------------------------------------------------------------- the rest
    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(text="pong\r\n")

    async def stat(self, request: web.Request) -> web.Response:
        stats = self.stats()
        return _json(200, {
            "scanned": self.checks,
            "actions": {action: self.actions.get(action, 0) for action in
                        ("no action", "greylist", "add header", "reject")},
            "learned": stats.get("learned", 0),
            "statfiles": [],
            "streamnb": stats,
        })


def _endpoint(path: str) -> str:
    if path == "/checkv2":
        return "checkv2"
    if path in LEARN_PATHS:
        return "learn"
    return path.strip("/") or "other"
