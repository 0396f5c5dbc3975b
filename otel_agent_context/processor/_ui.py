"""The built-in web page: conversations, envelopes with filters, a session's timeline turn
by turn with what changed, and one envelope's full record, over a JSON API.

Server-rendered (Jinja2, autoescaped: ids and reasons come from other people's telemetry),
one page per request, no script, no CDN: it works offline and behind a proxy. With a bearer
token configured, every request needs it: the ``Authorization`` header (the API), or a
cookie a browser gets by opening any page once with ``?token=TOKEN``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import hmac
import html
import logging
import re
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
import orjson
from aiohttp import web
from markupsafe import Markup

from .._enums import ContextKind, OmissionReason
from .._store import Store
from .._store._session import (
    EnvelopeFilter,
    Turn,
    conversations,
    envelope,
    envelopes,
    session,
    trace_url,
)
from .._version import __version__
from ._config import DEFAULT_HTTP_MAX_CONNECTIONS, DEFAULT_HTTP_READ_TIMEOUT, Endpoint
from ._http import HttpServer, bearer_matches
from ._summary import summarize, timeline_rows

__all__ = ["UiServer", "render_session"]

log = logging.getLogger(__name__)

_COOKIE = "otel_agent_context_token"
_HTML = "text/html; charset=utf-8"
_JSON = "application/json"
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
            "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#a0cbe8", "#ffbe7d")
_KINDS = [k.value for k in ContextKind]
_REASONS = sorted(r.value for r in OmissionReason)
#: Ids listed per turn before "N more" (a window can hold hundreds of items).
_MAX_LISTED = 40
#: Rows of a turn's long tables (omitted, truncated, never injected) before "N more": the
#: link opens the page with that turn's tables in full (``?full=TURN``).
_MAX_ROWS = 50
#: Envelopes a page of the list shows unless ``?limit=`` says otherwise.
_PAGE = 200
#: Turns a page of the sessions API holds unless ``?limit=`` says otherwise.
_API_TURNS = 50
#: A turn's lists the sessions API stops after ``_MAX_ROWS`` entries (with a count of the
#: rest under "more", and the link to that turn in full).
_TURN_LISTS = ("window", "added", "removed", "truncated", "compactions", "omitted",
               "not_injected", "missing")

Reply = tuple[int, bytes, str, tuple[tuple[str, str], ...]]


@functools.lru_cache(maxsize=1024)
def _colour(kind: str) -> str:
    if kind in _KINDS:
        return _PALETTE[_KINDS.index(kind) % len(_PALETTE)]
    digest = hashlib.blake2s(kind.encode(), digest_size=2).digest()
    return _PALETTE[int.from_bytes(digest, "big") % len(_PALETTE)]


def _pct(value: Any) -> str:
    return f"{value * 100:.0f}%" if isinstance(value, (int, float)) else "–"


def _tokens(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) else "?"


def _score(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, (int, float)) else ""


def _share(part: int, limit: Any, used: Any) -> float:
    whole = max(limit or 0, used or 0, 1)
    return round(part / whole * 100, 3)


def _reason_counts(omitted: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return Counter(o["reason"] or "unspecified" for o in omitted).most_common()


# The long lists of a session page (a turn's items that entered and left the window, its
# omitted items) are built here rather than in a template loop: a 200-turn page has tens of
# thousands of them, and escape() + join is about ten times faster than Jinja's loop.

_SPECIAL = re.compile(r"[&<>\"']")


def _esc(text: Any) -> str:
    text = str(text)
    return html.escape(text, quote=True) if _SPECIAL.search(text) else text


def _chart_columns(turns: list[Any], chart_max: int) -> Markup:
    out = []
    for t in turns:
        e = t.envelope
        spans = "".join(f'<span style="height: {n / chart_max * 100:.3f}%; '
                        f'background: {_colour(kind)}"></span>' for kind, n in t.by_kind.items())
        out.append(f'<a href="#turn-{t.number}" title="turn {t.number}: '
                   f'{_tokens(e["window_used_tokens"])} of {_tokens(e["window_max_tokens"])} '
                   f'tokens">{spans}</a>')
    return Markup("".join(out))


def _bar(turn: Any) -> Markup:
    e = turn.envelope
    return Markup("".join(
        f'<span style="width: {_share(n, e["window_max_tokens"], e["window_used_tokens"])}%; '
        f'background: {_colour(kind)}" title="{_esc(kind)}: {n} tokens"></span>'
        for kind, n in turn.by_kind.items()))


def _legend(turn: Any) -> Markup:
    return Markup("".join(f'<span><i style="background: {_colour(kind)}"></i>{_esc(kind)} '
                          f'{n}</span>' for kind, n in turn.by_kind.items()))


def _more(hidden: int, href: str) -> str:
    return f'<a href="{_esc(href)}">{hidden} more</a>'


def _id_list(ids: list[str], css: str, sign: str, limit: int | None, href: str) -> Markup:
    shown = "".join(f'<li class="{css} mono">{sign} {_esc(i)}</li>' for i in ids[:limit])
    if limit is not None and len(ids) > limit:
        shown += f'<li class="muted">{sign} {_more(len(ids) - limit, href)}</li>'
    return Markup(shown)


def _omitted_rows(omitted: list[dict[str, Any]], limit: int | None, href: str) -> Markup:
    rows = []
    for o in omitted[:limit]:
        detail = f' <span class="muted">({_esc(o["detail"])})</span>' if o["detail"] else ""
        tokens = "" if o["tokens"] is None else o["tokens"]
        rows.append(f'<tr><td class="mono">{_esc(o["item_id"])}</td>'
                    f'<td>{_esc(o["context_kind"] or "")}</td>'
                    f'<td>{_esc(o["reason"] or "")}{detail}</td>'
                    f'<td class="num">{_score(o["score"])}</td><td class="num">{tokens}</td></tr>')
    if limit is not None and len(omitted) > limit:
        rows.append(f'<tr class="more"><td colspan="5" class="muted">'
                    f'{_more(len(omitted) - limit, href)}</td></tr>')
    return Markup("".join(rows))


def _with_query(path: str, query: str) -> str:
    """``path`` (which may already carry ``?id=``, see _pathpart) with more of a query."""
    return path + ("&" if "?" in path else "?") + query


_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("otel_agent_context.processor", "_ui_templates"),
    autoescape=True, trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
)


def _pathpart(value: Any) -> str:
    """An id as the last part of a link: one path segment, or ``?id=`` for ``.`` and ``..``,
    which a browser resolves away as dot segments (even percent-encoded as ``%2E``)."""
    text = str(value)
    if text in (".", ".."):
        return "?id=" + quote(text, safe="")
    return quote(text, safe="")


_ENV.filters["pathpart"] = _pathpart
_ENV.globals.update(colour=_colour, pct=_pct, tokens=_tokens, score=_score, share=_share,
                    reason_counts=_reason_counts, version=__version__, max_listed=_MAX_LISTED,
                    max_rows=_MAX_ROWS, id_list=_id_list, omitted_rows=_omitted_rows,
                    chart_columns=_chart_columns, bar=_bar, legend=_legend)


def render_session(store: Store, conversation_id: str, *, trace_url_template: str | None = None,
                   root: str = "", full: int | None = None) -> str | None:
    """The session page's HTML, or None when the store holds no such conversation.

    A turn's long lists and tables stop after a few dozen entries with a link to "N more":
    the page again with turn ``full`` shown in full."""
    turns = session(store, conversation_id, trace_url_template=trace_url_template)
    if not turns:
        return None
    kinds = sorted({k for t in turns for k in t.by_kind},
                   key=lambda k: (_KINDS.index(k) if k in _KINDS else len(_KINDS), k))
    used = [sum(t.by_kind.values()) for t in turns]
    limits = [t.envelope["window_max_tokens"] or 0 for t in turns]
    peak_limit = max(limits) if limits else 0
    chart_max = max([*used, peak_limit, 1])
    page = f"{root}/sessions/{_pathpart(conversation_id)}"
    return _ENV.get_template("session.html").render(
        root=root, conversation=conversation_id, turns=turns, kinds=kinds, full=full,
        more_href=lambda n: _with_query(page, f"full={n}") + f"#turn-{n}",
        agents=sorted({t.envelope["agent_name"] or "unknown" for t in turns}),
        chart_max=chart_max, peak_limit=peak_limit, chart_limit=peak_limit / chart_max,
    )


def _yes_no(value: str | None) -> bool | None:
    if value in ("yes", "true", "1"):
        return True
    if value in ("no", "false", "0"):
        return False
    return None


def _number(query: Any, name: str, default: int, low: int, high: int) -> int:
    try:
        return max(low, min(int(query.get(name, default)), high))
    except ValueError:
        return default


def _filter(query: Any) -> EnvelopeFilter:
    return EnvelopeFilter(
        conversation=query.get("conversation") or None, agent=query.get("agent") or None,
        status=query.get("status") or None, omission_reason=query.get("reason") or None,
        overflow=_yes_no(query.get("overflow")), blocking=_yes_no(query.get("blocking")),
        limit=_number(query, "limit", _PAGE, 1, 10_000),
        offset=_number(query, "offset", 0, 0, 2**62),
    )


def _envelope_page(store: Store, where: EnvelopeFilter) -> tuple[list[dict[str, Any]],
                                                                  int | None]:
    """A page of the envelope list and the offset of the next page (None: the last)."""
    rows = envelopes(store, dataclasses.replace(where, limit=where.limit + 1))
    if len(rows) > where.limit:
        return rows[:where.limit], where.offset + where.limit
    return rows, None


def _list_href(query: Any, offset: int) -> str:
    """The envelope list with the same filters, from ``offset``."""
    kept = [(k, v) for k, v in query.items() if k not in ("offset", "token") and v]
    return "/?" + urlencode([*kept, *([("offset", offset)] if offset else [])]) + "#envelopes"


def _json(document: Any, status: int = 200) -> Reply:
    return status, orjson.dumps(document, default=str), _JSON, ()


def _page(status: int, html: str) -> Reply:
    return status, html.encode(), _HTML, ()


class UiServer:
    """The web page and its JSON API over a :class:`Store`, on an :class:`Endpoint`."""

    def __init__(self, store: Store | None, endpoint: Endpoint, *, bearer_token: str | None = None,
                 trace_url_template: str | None = None,
                 read_timeout: float = DEFAULT_HTTP_READ_TIMEOUT,
                 max_connections: int = DEFAULT_HTTP_MAX_CONNECTIONS) -> None:
        self._store = store
        self.trace_url_template = trace_url_template
        self._token = bearer_token.encode() if bearer_token else None
        self._cookie = (hashlib.sha256(b"otel-agent-context-ui:" + self._token).hexdigest()
                        if self._token else None)
        self._pool = ThreadPoolExecutor(2, thread_name_prefix="otel-ac-ui")
        self._http = HttpServer(endpoint, self.handle, key="ui.endpoint",
                                read_timeout=read_timeout, max_connections=max_connections)
        self.port = self._http.port

    @property
    def store(self) -> Store:
        assert self._store is not None, "UiServer.start() before the store is open"
        return self._store

    @store.setter
    def store(self, store: Store) -> None:
        self._store = store

    def start(self) -> int:
        return self._http.start()

    def stop(self) -> None:
        self._http.stop()
        self._pool.shutdown(wait=True)

    # -- HTTP ------------------------------------------------------------------------------------
    def _authorized(self, request: web.BaseRequest) -> bool:
        if self._token is None:
            return True
        if bearer_matches(request.headers.get("Authorization"), self._token):
            return True
        assert self._cookie is not None
        given = request.cookies.get(_COOKIE, "").encode("utf-8", "surrogateescape")
        return hmac.compare_digest(given, self._cookie.encode())

    async def handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="use GET\n", headers={"Allow": "GET, HEAD"})
        if self._token is not None and "token" in request.query:
            given = request.query["token"].encode("utf-8", "surrogateescape")
            if hmac.compare_digest(given, self._token):
                # the path as sent, made relative to this server ("//host" would leave it)
                here = "/" + request.rel_url.raw_path.lstrip("/\\")
                response = web.Response(status=303, headers={"Location": here})
                assert self._cookie is not None
                response.set_cookie(_COOKIE, self._cookie, httponly=True, samesite="Strict",
                                    path="/")
                return response
        if not self._authorized(request):
            api = request.path.startswith("/api/")
            body = (b'{"error": "missing or wrong bearer token"}' if api else
                    _ENV.get_template("message.html").render(
                        root="", heading="Token needed",
                        text="This processor wants its bearer token: open this page once with "
                             "?token=TOKEN, or send Authorization: Bearer TOKEN.").encode())
            return web.Response(status=401, body=body, content_type=_JSON if api else "text/html",
                                headers={"WWW-Authenticate": "Bearer"})
        route = self._route(request.path, request.query)
        if route is None:
            status, body, content_type, headers = _page(404, self._message(
                "Not found", f"Nothing at {request.path}: try the list of conversations."))
        else:
            handler, argument = route
            loop = asyncio.get_running_loop()
            try:
                status, body, content_type, headers = await loop.run_in_executor(
                    self._pool, handler, argument, request.query)
            except Exception:  # noqa: BLE001 - one bad page must not take the server down
                log.exception("rendering %s failed", request.path)
                status, body, content_type, headers = _page(500, self._message(
                    "Error", "This page failed to render; the processor's log says why."))
        response = web.Response(status=status, body=body,
                                headers={"Content-Type": content_type,
                                         "Cache-Control": "no-store",
                                         "X-Content-Type-Options": "nosniff",
                                         "Content-Security-Policy":
                                             "default-src 'none'; style-src 'unsafe-inline'; "
                                             "img-src 'self'; form-action 'self'; "
                                             "frame-ancestors 'none'; base-uri 'none'"})
        for name, value in headers:
            response.headers[name] = value
        return response

    def _route(self, path: str,
               query: Any) -> tuple[Callable[[str, Any], Reply], str] | None:
        table: tuple[tuple[str, Callable[[str, Any], Reply]], ...] = (
            ("/api/conversations", self._api_conversations),
            ("/api/envelopes/", self._api_envelope),
            ("/api/envelopes", self._api_envelopes),
            ("/api/sessions/", self._api_session),
            ("/sessions/", self._session_page),
            ("/envelopes/", self._envelope_page),
        )
        if path in ("/", ""):
            return self._index, ""
        for prefix, handler in table:
            if prefix.endswith("/") and path.startswith(prefix) and len(path) > len(prefix):
                return handler, path[len(prefix):]  # aiohttp has decoded it once
            if path == prefix:  # "/sessions/?id=.." (see _pathpart)
                return handler, query.get("id", "") if prefix.endswith("/") else ""
        return None

    @staticmethod
    def _message(heading: str, text: str) -> str:
        return _ENV.get_template("message.html").render(root="", heading=heading, text=text)

    # -- pages -----------------------------------------------------------------------------------
    def _index(self, _: str, query: Any) -> Reply:
        where = _filter(query)
        rows, next_offset = _envelope_page(self.store, where)
        previous = max(0, where.offset - where.limit) if where.offset else None
        return _page(200, _ENV.get_template("index.html").render(
            root="", conversations=conversations(self.store, agent=where.agent),
            envelopes=rows, f=where, reasons=_REASONS,
            next_href=None if next_offset is None else _list_href(query, next_offset),
            previous_href=None if previous is None else _list_href(query, previous)))

    def _session_page(self, conversation_id: str, query: Any) -> Reply:
        html = render_session(self.store, conversation_id,
                              trace_url_template=self.trace_url_template,
                              full=_number(query, "full", 0, 0, 2**31) or None)
        if html is None:
            return _page(404, self._message(
                "No such conversation", f"The store holds no envelope of {conversation_id!r}."))
        return _page(200, html)

    def _envelope_page(self, context_id: str, _: Any) -> Reply:
        bundle = envelope(self.store, context_id)
        if bundle is None:
            return _page(404, self._message(
                "No such envelope", f"The store holds no envelope {context_id!r}."))
        env = bundle.get("context_envelope") or {}
        refs = env.get("telemetry_refs") or [{}]
        meta = env.get("metadata") or {}
        return _page(200, _ENV.get_template("envelope.html").render(
            root="", context_id=context_id,
            conversation=meta.get("gen_ai.conversation.id"),
            trace=trace_url(self.trace_url_template, str(refs[0].get("trace_id", "")),
                            refs[0].get("span_id")),
            summary=summarize(bundle), timeline=timeline_rows(bundle),
            bundle_json=orjson.dumps(bundle, option=orjson.OPT_INDENT_2).decode()))

    # -- JSON API --------------------------------------------------------------------------------
    def _api_conversations(self, _: str, query: Any) -> Reply:
        return _json({"conversations": conversations(self.store, agent=query.get("agent"))})

    def _api_envelopes(self, _: str, query: Any) -> Reply:
        rows, next_offset = _envelope_page(self.store, _filter(query))
        return _json({"envelopes": rows, "next_offset": next_offset})

    def _api_envelope(self, context_id: str, _: Any) -> Reply:
        bundle = envelope(self.store, context_id)
        if bundle is None:
            return _json({"error": f"no envelope {context_id!r}"}, 404)
        return _json(bundle)

    def _api_session(self, conversation_id: str, query: Any) -> Reply:
        """A page of a conversation's turns (``limit``, ``offset``), each turn's lists
        capped like the session page's tables, turn ``full`` in full."""
        turns = session(self.store, conversation_id,
                        trace_url_template=self.trace_url_template)
        if not turns:
            return _json({"error": f"no conversation {conversation_id!r}"}, 404)
        limit = _number(query, "limit", _API_TURNS, 1, 1_000)
        offset = _number(query, "offset", 0, 0, 2**62)
        full = _number(query, "full", 0, 0, 2**31)
        path = "/api/sessions/" + _pathpart(conversation_id)
        page = turns[offset:offset + limit]
        return _json({"conversation_id": conversation_id, "turn_count": len(turns),
                      "turns": [_turn_json(t, t.number == full, path) for t in page],
                      "next_offset": offset + limit if offset + limit < len(turns) else None})


def _turn_json(turn: Turn, full: bool, path: str) -> dict[str, Any]:
    """A turn for the JSON API: each long list cut at ``_MAX_ROWS`` unless ``full``, with
    how many were left out under "more" and the turn in full at "full_href"."""
    document = {field.name: getattr(turn, field.name) for field in dataclasses.fields(turn)}
    if full:
        return document
    more = {}
    for name in _TURN_LISTS:
        values = document[name]
        if len(values) > _MAX_ROWS:
            more[name] = len(values) - _MAX_ROWS
            document[name] = values[:_MAX_ROWS]
    if more:
        document["more"] = more
        document["full_href"] = _with_query(
            path, urlencode({"offset": turn.number - 1, "limit": 1, "full": turn.number}))
    return document


def session_path(conversation_id: str) -> str:
    return "/sessions/" + _pathpart(conversation_id)
