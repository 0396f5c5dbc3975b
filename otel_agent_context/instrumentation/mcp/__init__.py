"""Context instrumentation for MCP client sessions (the ``mcp`` Python SDK, 2.x).

    from otel_agent_context.instrumentation.mcp import MCPContextInstrumentor

    MCPContextInstrumentor().instrument()

or ``opentelemetry-instrument python app.py`` (entry point ``agent_context_mcp``).

What it records: each ``ClientSession.read_resource`` and ``ClientSession.get_prompt`` is a
``context.surface`` in the current envelope (or an implicit ``turn`` envelope around the
call), one item per resource content or prompt message:

* a resource content: kind ``external_resource``, its MIME type, the digest of its text
  (keyed, as every digest), its source ref ``mcp.resource.uri`` and the server's name as
  ``context.source.native.mcp.server_id``; item id ``mcp_resource:<short digest of
  server and uri>`` (one id per resource, the digest telling versions apart);
* a prompt message: kind ``user_message`` (or ``session_history`` for the assistant's), the
  prompt's name as ``mcp.prompt_name`` (exported as OpenTelemetry's ``gen_ai.prompt.name``);
  an embedded resource in a message is content mode ``embedded_resource`` with its
  ``mcp.resource.uri``, a resource link ``resource_link``.

Each ``ClientSession.call_tool`` is a surface too, one item per content block of the
result: kind ``tool_result``, content mode ``tool_result_ref`` (``embedded_resource`` or
``resource_link`` for a resource block, with its ``mcp.resource.uri``), the tool's name as
``context.source.native.mcp.tool_name``, the digest of the text (or of the structured
content), and ``mcp.tool.is_error`` when the tool reported an error; item id
``mcp_tool:<short digest of server, tool and arguments>:<block>``, so one call repeated with
the same arguments is the same item.

Every source ref also carries the JSON-RPC id of the request that brought it
(``mcp.jsonrpc_request_id``, exported as OpenTelemetry's ``jsonrpc.request.id``, the id on the
MCP SDK's own client span of that request) and, over Streamable HTTP, the MCP session id
(``mcp.mcp_session_id``, exported as ``mcp.session.id``). The client session API exposes
neither: the request id is read from the request the SDK's ``JSONRPCDispatcher`` writes
(``_write``, in the task of the session call), the session id from the request context the
Streamable HTTP transport posts it with (``_handle_post_request``, which runs in a copy of the
sender's context); over the legacy HTTP+SSE transport, from the query of the endpoint the
SSE transport posts the request to (``session_id``, which the server sent in its ``endpoint``
event); all only while one of the three calls is under way. stdio has no MCP session: no
``mcp.session.id`` there.

Content (the text) only under content capture.
A model call of the same envelope whose block carries a resource's, a prompt message's or a
tool result's text names the MCP item in ``context.block.source_item_refs`` (matched by
content in process, see ``otel_agent_context._links``).
"""

from __future__ import annotations

import contextvars
import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

from ..._api import current_envelope
from ..._attributes import digest_text
from ..._digest import short_digest
from ..._enums import ContentMode, ContextKind, Scope
from ..._records import ContextItem, ContextSourceRef
from .._lazy_patch import LazyInstrumentor, LazyPatches, Switch, internal_failure

__all__ = ["MCPContextInstrumentor"]

_instruments = ("mcp >= 2, < 3",)
_MODULE = "mcp.client.session"
_DISPATCHER = "mcp.shared.jsonrpc_dispatcher"
_HTTP = "mcp.client.streamable_http"
_SSE = "mcp.client.sse"


_STATE = Switch()


class _Call:
    """The native ids of one session call's request, as the SDK sends it."""

    __slots__ = ("method", "request_id", "session_id")

    def __init__(self, method: str) -> None:
        self.method = method
        self.request_id: str | None = None
        self.session_id: str | None = None

    def ids(self) -> dict[str, str]:
        out = {}
        if self.request_id is not None:
            out["mcp.jsonrpc_request_id"] = self.request_id
        if self.session_id is not None:
            out["mcp.mcp_session_id"] = self.session_id
        return out


#: The session call under way in this task (and in the transport's copies of its context).
_CALL: contextvars.ContextVar[_Call | None] = contextvars.ContextVar(
    "otel_agent_context.mcp.call", default=None)


def _note(first: Any, read: Any) -> None:
    """The ids ``read`` finds in a message the SDK sends, if it is the call's request."""
    call = _CALL.get()
    if call is None:
        return
    try:
        message, ids = read(first)
        if getattr(message, "method", None) != call.method:
            return
        for key, value in ids.items():
            if getattr(call, key) is None and isinstance(value, (int, str)) and value != "":
                setattr(call, key, str(value))
    except Exception:
        internal_failure("MCP", "native ids")


def _request(message: Any) -> tuple[Any, dict[str, Any]]:
    return message, {"request_id": getattr(message, "id", None)}


def _posted(ctx: Any) -> tuple[Any, dict[str, Any]]:
    message = getattr(getattr(ctx, "session_message", None), "message", None)
    return message, {"session_id": getattr(ctx, "session_id", None)}


async def _wrap_write(wrapped: Any, instance: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
    """``JSONRPCDispatcher._write``: the request of the call under way, with its id."""
    _note(args[0] if args else kwargs.get("message"), _request)
    return await wrapped(*args, **kwargs)


async def _wrap_post(wrapped: Any, instance: Any, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
    """``StreamableHTTPTransport._handle_post_request``: the session id the request goes with."""
    _note(args[0] if args else kwargs.get("ctx"), _posted)
    return await wrapped(*args, **kwargs)


def _sse_posted(request: tuple[Any, Any]) -> tuple[Any, dict[str, Any]]:
    """A message the SSE transport posts: its JSON body and the endpoint it posts to, whose
    query names the session the server opened (``session_id``, or ``sessionId``)."""
    body, url = request
    query = parse_qs(urlsplit(str(url)).query)
    named = query.get("session_id") or query.get("sessionId")
    session = named[0] if named else None
    method = body.get("method") if isinstance(body, dict) else None
    return _Sent(method), {"session_id": session}


class _Sent:
    """The method of a message sent as a JSON body (the readers compare ``.method``)."""

    __slots__ = ("method",)

    def __init__(self, method: Any) -> None:
        self.method = method


async def _wrap_sse_request(wrapped: Any, instance: Any, args: tuple[Any, ...],
                            kwargs: dict[str, Any]) -> Any:
    """``request_within_origin`` as the SSE transport calls it to post a message (in a copy
    of the sender's context): the session id of the legacy HTTP+SSE transport."""
    if len(args) >= 3 and args[1] == "POST":
        _note((kwargs.get("json"), args[2]), _sse_posted)
    return await wrapped(*args, **kwargs)


def _server(session: Any) -> str | None:
    try:
        info = session.server_info
    except Exception:
        return None
    name = getattr(info, "name", None)
    return name if isinstance(name, str) and name else None


def _source(uri: str | None, server: str | None, prompt: str | None = None
            ) -> ContextSourceRef:
    native: dict[str, str] = {}
    if uri:
        native["mcp.resource_uri"] = uri
    if server:
        native["mcp.server_id"] = server
    if prompt:
        native["mcp.prompt_name"] = prompt
    return ContextSourceRef(uri=uri, source_kind="mcp_resource" if uri else "mcp_prompt",
                            external_mappings=native)


def _resource_item(content: Any, server: str | None, prompt: str | None = None,
                   mode: ContentMode | None = None) -> ContextItem:
    uri = str(getattr(content, "uri", "") or "")
    text = getattr(content, "text", None)
    if not isinstance(text, str):
        text = getattr(content, "blob", None)  # base64 of a binary resource
    mime = getattr(content, "mime_type", None)
    return ContextItem(
        item_id="mcp_resource:" + short_digest(server or "", uri),
        context_kind=ContextKind.EXTERNAL_RESOURCE, content_mode=mode,
        content=text if isinstance(text, str) else None,
        digest=digest_text(text) if isinstance(text, str) else None,
        mime_type=mime if isinstance(mime, str) else None,
        source_refs=[_source(uri, server, prompt)])


def _link_item(link: Any, server: str | None, prompt: str | None = None) -> ContextItem:
    """A resource link: the resource it names (no text: only its URI and media type)."""
    uri = str(getattr(link, "uri", ""))
    mime = getattr(link, "mime_type", None)
    return ContextItem(item_id="mcp_resource:" + short_digest(server or "", uri),
                       context_kind=ContextKind.EXTERNAL_RESOURCE,
                       content_mode=ContentMode.RESOURCE_LINK,
                       mime_type=mime if isinstance(mime, str) else None,
                       source_refs=[_source(uri, server, prompt)])


def _prompt_items(result: Any, name: str, server: str | None) -> list[ContextItem]:
    items = []
    for index, message in enumerate(getattr(result, "messages", None) or ()):
        content = getattr(message, "content", None)
        ctype = getattr(content, "type", None)
        if ctype == "resource":  # an embedded resource: the resource, carried by the prompt
            items.append(_resource_item(getattr(content, "resource", None), server, name,
                                        ContentMode.EMBEDDED_RESOURCE))
            continue
        if ctype == "resource_link":
            items.append(_link_item(content, server, name))
            continue
        text = getattr(content, "text", None)
        role = getattr(message, "role", None)
        items.append(ContextItem(
            item_id=f"mcp_prompt:{short_digest(server or '', name)}:{index}",
            context_kind=ContextKind.USER_MESSAGE if role == "user"
            else ContextKind.SESSION_HISTORY,
            content=text if isinstance(text, str) else None,
            digest=digest_text(text) if isinstance(text, str) else None,
            source_refs=[_source(None, server, name)]))
    return items


def _tool_items(result: Any, name: str, arguments: Any, server: str | None
                ) -> list[ContextItem]:
    try:
        args = json.dumps(arguments, sort_keys=True, default=str)
    except (TypeError, ValueError):
        args = repr(arguments)
    base = f"mcp_tool:{short_digest(server or '', name, args)}"
    native = {"mcp.tool_name": name}
    if server:
        native["mcp.server_id"] = server
    if getattr(result, "isError", None) is True or getattr(result, "is_error", None) is True:
        native["mcp.tool.is_error"] = "true"
    items = []
    blocks = list(getattr(result, "content", None) or ())
    for index, block in enumerate(blocks):
        btype = getattr(block, "type", None)
        if btype == "resource":
            item = _resource_item(getattr(block, "resource", None), server,
                                  mode=ContentMode.EMBEDDED_RESOURCE)
        elif btype == "resource_link":
            item = _link_item(block, server)
        else:
            text = getattr(block, "text", None)
            item = ContextItem(
                item_id=f"{base}:{index}", context_kind=ContextKind.TOOL_RESULT,
                content_mode=ContentMode.TOOL_RESULT_REF,
                content=text if isinstance(text, str) else None,
                digest=digest_text(text) if isinstance(text, str) else None,
                mime_type=getattr(block, "mime_type", None) if btype == "image" else None,
                source_refs=[ContextSourceRef(source_kind="mcp_tool",
                                              external_mappings=dict(native))])
            items.append(item)
            continue
        for ref in item.source_refs or ():
            ref.external_mappings.update(native)
        items.append(item)
    structured = getattr(result, "structuredContent", None)
    if structured is None:
        structured = getattr(result, "structured_content", None)
    if structured is not None and not blocks:
        text = json.dumps(structured, sort_keys=True, default=str)
        items.append(ContextItem(
            item_id=f"{base}:structured", context_kind=ContextKind.TOOL_RESULT,
            content_mode=ContentMode.TOOL_RESULT_REF, content=text, digest=digest_text(text),
            mime_type="application/json",
            source_refs=[ContextSourceRef(source_kind="mcp_tool",
                                          external_mappings=dict(native))]))
    return items


def _record(items: list[ContextItem], call: _Call) -> None:
    ctx = _STATE.ctx
    if ctx is None or not items:
        return
    ids = call.ids()
    for item in items:
        for ref in item.source_refs or ():
            ref.external_mappings.update(ids)
    env = current_envelope()
    if env is not None:
        with env.surface() as surface:
            for item in items:
                surface.add(item)
        return
    with ctx.envelope(scope=Scope.TURN) as implicit, implicit.surface() as surface:
        for item in items:
            surface.add(item)


async def _calling(method: str, wrapped: Any, args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> tuple[Any, _Call]:
    """Run a session call, watching for its request's native ids."""
    call = _Call(method)
    token = _CALL.set(call)
    try:
        return await wrapped(*args, **kwargs), call
    finally:
        _CALL.reset(token)


async def _wrap_read_resource(wrapped: Any, instance: Any, args: tuple[Any, ...],
                              kwargs: dict[str, Any]) -> Any:
    if _STATE.ctx is None:
        return await wrapped(*args, **kwargs)
    result, call = await _calling("resources/read", wrapped, args, kwargs)
    if _STATE.ctx is not None:
        try:
            server = _server(instance)
            _record([_resource_item(c, server) for c in getattr(result, "contents", None) or ()],
                    call)
        except Exception:
            internal_failure("MCP", "read_resource")
    return result


async def _wrap_get_prompt(wrapped: Any, instance: Any, args: tuple[Any, ...],
                           kwargs: dict[str, Any]) -> Any:
    if _STATE.ctx is None:
        return await wrapped(*args, **kwargs)
    result, call = await _calling("prompts/get", wrapped, args, kwargs)
    if _STATE.ctx is not None:
        try:
            name = args[0] if args else kwargs.get("name")
            _record(_prompt_items(result, str(name), _server(instance)), call)
        except Exception:
            internal_failure("MCP", "get_prompt")
    return result


async def _wrap_call_tool(wrapped: Any, instance: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
    if _STATE.ctx is None:
        return await wrapped(*args, **kwargs)
    result, call = await _calling("tools/call", wrapped, args, kwargs)
    if _STATE.ctx is not None:
        try:
            name = args[0] if args else kwargs.get("name")
            arguments = args[1] if len(args) > 1 else kwargs.get("arguments")
            _record(_tool_items(result, str(name), arguments, _server(instance)), call)
        except Exception:
            internal_failure("MCP", "call_tool")
    return result


def _session_class(module: Any) -> Any:
    return getattr(module, "ClientSession", None)


def _dispatcher_class(module: Any) -> Any:
    return getattr(module, "JSONRPCDispatcher", None)


def _module_itself(module: Any) -> Any:
    return module


def _http_transport(module: Any) -> Any:
    return getattr(module, "StreamableHTTPTransport", None)


_PATCHES = LazyPatches({
    _MODULE: [(_session_class, "read_resource", _wrap_read_resource),
              (_session_class, "get_prompt", _wrap_get_prompt),
              (_session_class, "call_tool", _wrap_call_tool)],
    _DISPATCHER: [(_dispatcher_class, "_write", _wrap_write)],
    _HTTP: [(_http_transport, "_handle_post_request", _wrap_post)],
    _SSE: [(_module_itself, "request_within_origin", _wrap_sse_request)],
}, _STATE.on)


class MCPContextInstrumentor(LazyInstrumentor):
    """Records MCP resources read and prompts fetched as surface items (module doc).

    ``instrument()`` takes ``tracer_provider``, ``meter_provider`` and
    ``capture_content``, or a ready ``agent_context`` instead.
    """

    _instruments = _instruments
    _switch = _STATE
    _patches = _PATCHES
