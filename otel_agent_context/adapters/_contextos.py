"""ContextOS API contracts (seed 004) as Agent Context records and spans.

One ``invokeAgent`` call is one ``turn`` envelope:

- ``CompiledContext``: the compiled prompt (system, developer, task, context blocks) is an
  assembly whose hash is ``context_ledger.compiled_context_hash``; ``budget_report`` is a
  budget whose window segments are the buckets (allocated = reserved, used = used), each
  truncated bucket a truncation record, each ``dropped_block_ids`` entry an item omitted for
  ``budget``; the manifests' policy bundles, tool capabilities and evidence (and the ledger's
  memory refs) are selected items, and the envelope's policy and evidence refs;
- ``RunContext`` / ``invokeAgent`` envelope: actor refs from the principal chain, runtime
  refs (run, request, session, tenant, pinned context packs), the W3C trace context
  (``traceparent``, ``tracestate``, baggage) as the parent of the envelope's spans;
- ``ToolCallEnvelope``: an injection of the arguments into the tool (``tool_argument``);
  ``ToolResultEnvelope``: a ``tool_result`` item injected into the model's message history;
  a result that is not ``ok``/``completed`` is also missing context (what the plan lacks);
- ``DecisionRecord``: evidence refs (and its policy decisions as policy refs);
- an unpinned ``context_pack_refs`` entry (refused by the runtime): blocking missing context.
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import inspect
import logging
import random
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .. import _semconv as S
from .._api import AgentContext
from .._attributes import digest_text
from .._enums import (
    ContentMode,
    ContextKind,
    InjectionPoint,
    Lifecycle,
    OmissionReason,
    OverflowStrategy,
    RedactionState,
    Scope,
    Severity,
    Visibility,
)
from .._failsafe import _guard, is_strict
from .._records import (
    AssemblyBlock,
    Bundle,
    ContextAssembly,
    ContextBudget,
    ContextEnvelope,
    ContextInjection,
    ContextItem,
    ContextSelection,
    ContextSourceRef,
    ContextSurface,
    ContextWindow,
    MissingContext,
    OmittedRef,
    TruncationRecord,
    WindowSegment,
    ns_to_rfc3339,
)
from .._replay import emit_bundle

__all__ = [
    "AgentInvocation",
    "ContextOSRefs",
    "ToolResultRecords",
    "compiled_context_bundle",
    "contextos_bundle",
    "current_invocation",
    "decision_refs",
    "pack_ref_gaps",
    "run_context_refs",
    "tool_call_injection",
    "tool_result_records",
    "trace_parent",
    "wrap_invoke_agent",
]

_log = logging.getLogger("otel_agent_context.adapters")
_F = TypeVar("_F", bound=Callable[..., Any])

SURFACE_ID = "contextos-surface"
SELECTION_ID = "contextos-selection"
BUDGET_ID = "contextos-budget"
WINDOW_ID = "contextos-window"
ASSEMBLY_ID = "contextos-assembly"

#: ``pack_id@semver``: what the runtime accepts in ``context_pack_refs``.
PINNED_PACK_REF = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._/-]*@(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-[0-9A-Za-z.-]+)?(?:\+[0-9A-Za-z.-]+)?$")
#: budget bucket -> context_kind of its blocks
BUCKET_KINDS: Mapping[str, ContextKind] = {
    "policy": ContextKind.POLICY_NOTE,
    "tool": ContextKind.TOOL_RESULT,
    "evidence": ContextKind.RETRIEVAL_RESULT,
    "memory": ContextKind.DURABLE_MEMORY,
    "business": ContextKind.KNOWLEDGE_PACK_ITEM,
    "session": ContextKind.SESSION_HISTORY,
}
#: compiled_prompt part -> (context_kind, injection point)
PROMPT_PARTS: Mapping[str, tuple[ContextKind, InjectionPoint]] = {
    "system": (ContextKind.SYSTEM_PROMPT, InjectionPoint.SYSTEM_PROMPT),
    "developer": (ContextKind.DEVELOPER_INSTRUCTION, InjectionPoint.DEVELOPER_PROMPT),
    "task": (ContextKind.USER_MESSAGE, InjectionPoint.MESSAGE_HISTORY),
}
#: ToolResultEnvelope status -> severity of the missing context it leaves (None: nothing)
TOOL_STATUS_SEVERITY: Mapping[str, Severity | None] = {
    "ok": None,
    "completed": None,
    "paused": Severity.MEDIUM,
    "blocked": Severity.HIGH,
    "rejected": Severity.HIGH,
    "failed": Severity.HIGH,
    "error": Severity.HIGH,
}
_TOOL_STATUS_QUESTION = {
    "paused": "is paused: approval, an external dependency or a continuation is pending",
    "blocked": "was blocked by policy or consent before the adapter ran",
    "rejected": "was rejected by the gateway (malformed, unauthorized or unsurfaced)",
    "failed": "failed in the adapter, the transport or the runtime",
    "error": "returned an error result",
}
#: baggage / tracestate keys -> runtime ref kind
_BAGGAGE_REFS = {"run_id": "run", "session_id": "session", "request_id": "request",
                 "decision_id": "decision", "tenant_id": "tenant", "tenant": "tenant",
                 "ctxpack": "context_pack"}


def _m(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _l(value: Any) -> list[Any]:
    """A JSON array, else nothing (a string is not a list of refs)."""
    return value if isinstance(value, list) else []


def _s(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _n(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _json(value: Any) -> str:
    """Canonical JSON (sorted keys, no spaces): what digests of envelopes are taken over."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


def _time(at: str | int | None) -> str | None:
    if at is None or isinstance(at, str):
        return at
    return ns_to_rfc3339(at)


def _unique(values: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(v for v in values if v))


def _ref(kind: str, value: Any) -> str | None:
    v = _s(value)
    if v is None:
        return None
    return v if v.startswith(kind + ":") else f"{kind}:{v}"


# ---------------------------------------------------------------------------------------
# refs


@dataclasses.dataclass(frozen=True)
class ContextOSRefs:
    """Envelope refs (``kind:id``) found in a ContextOS object."""

    actor_refs: tuple[str, ...] = ()
    runtime_refs: tuple[str, ...] = ()
    policy_refs: tuple[str, ...] = ()
    evidence_refs: tuple[str, ...] = ()

    def __or__(self, other: ContextOSRefs) -> ContextOSRefs:
        return ContextOSRefs(*(tuple(_unique((*a, *b))) for a, b in zip(
            dataclasses.astuple(self), dataclasses.astuple(other), strict=True)))


def _principals(chain: Any) -> list[str]:
    out = []
    for p in chain if isinstance(chain, list) else []:
        ref = _ref(_s(_m(p).get("kind")) or "principal", _m(p).get("id"))
        if ref:
            out.append(ref)
    return out


def _trace_carrier(obj: Mapping[str, Any]) -> dict[str, str]:
    """traceparent / tracestate / baggage of a RunContext, a manifest's ``trace_context`` or
    an invokeAgent envelope's ``trace`` block."""
    for candidate in (obj.get("trace_context"), _m(obj.get("metadata")).get("trace_context"),
                      obj):
        tc = _m(candidate)
        if _s(tc.get("traceparent")):
            return {k: tc[k] for k in ("traceparent", "tracestate", "baggage") if _s(tc.get(k))}
    tr = _m(obj.get("trace"))
    trace_id, span_id = _s(tr.get("trace_id")), _s(tr.get("span_id"))
    if trace_id and span_id:
        flags = _s(tr.get("trace_flags")) or "01"
        return {"traceparent": f"00-{trace_id}-{span_id}-{flags}"}
    return {}


def _carrier_refs(carrier: Mapping[str, str]) -> list[str]:
    out = []
    for header, sep in (("baggage", ","), ("tracestate", ",")):
        for entry in carrier.get(header, "").split(sep):
            key, eq, value = entry.partition("=")
            kind = _BAGGAGE_REFS.get(key.strip())
            if eq and kind:
                out.append(f"{kind}:{value.split(';')[0].strip()}")
    return out


def run_context_refs(run_context: Mapping[str, Any] | None = None,
                     request: Mapping[str, Any] | None = None) -> ContextOSRefs:
    """Actor and runtime refs of a ``RunContext`` and/or an ``invokeAgent`` envelope:
    the principal chain (else the user and the agent), the run, request, session and tenant,
    the pinned context packs, attachments as evidence, and what the W3C baggage and
    tracestate name."""
    actors: list[str] = []
    runtime: list[str] = []
    evidence: list[str] = []
    for obj in (_m(run_context), _m(request)):
        if not obj:
            continue
        agent = _m(obj.get("agent"))
        chain = _principals(agent.get("principal_chain"))
        actors += chain or [r for r in (
            _ref("user", _m(obj.get("user")).get("user_id")),
            _ref("agent", agent.get("agent_urn") or agent.get("agent_id"))) if r]
        runtime += [r for r in (_ref("run", obj.get("run_id")),
                                _ref("request", obj.get("request_id")),
                                _ref("session", obj.get("session_id")),
                                _ref("tenant", obj.get("tenant_id"))) if r]
        refs = obj.get("context_pack_refs")
        for ref in refs if isinstance(refs, list) else []:
            if isinstance(ref, str) and PINNED_PACK_REF.match(ref):
                runtime.append(f"context_pack:{ref}")
        for att in _l(obj.get("attachments")):
            r = _ref("artifact", _m(att).get("artifact_id"))
            if r:
                evidence.append(r)
        runtime += _carrier_refs(_trace_carrier(obj))
    return ContextOSRefs(tuple(_unique(actors)), tuple(_unique(runtime)), (),
                         tuple(_unique(evidence)))


def trace_parent(*sources: Mapping[str, Any] | None) -> Context | None:
    """The OpenTelemetry context to start the envelope in: from the first source with a
    W3C ``traceparent`` (a RunContext's or manifest's ``trace_context``, or an invokeAgent
    envelope's ``trace`` block), with its ``tracestate`` and baggage; else, from a bare
    ``trace_id`` (a RunContext without trace context), the same trace under a remote parent
    whose span is unknown. None when no source names a trace."""
    propagator = TraceContextTextMapPropagator()
    for source in sources:
        carrier = _trace_carrier(_m(source))
        if not carrier:
            continue
        ctx = propagator.extract(carrier)
        if not trace.get_current_span(ctx).get_span_context().is_valid:
            _log.warning("contextos: invalid traceparent %r; ignored", carrier["traceparent"])
            continue
        if "baggage" in carrier:
            ctx = W3CBaggagePropagator().extract(carrier, context=ctx)
        return ctx
    for source in sources:
        trace_id = _s(_m(source).get("trace_id"))
        if trace_id and re.fullmatch(r"[0-9a-f]{32}", trace_id) and int(trace_id, 16):
            parent = trace.SpanContext(int(trace_id, 16), random.getrandbits(64) or 1,
                                       is_remote=True,
                                       trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED))
            return trace.set_span_in_context(trace.NonRecordingSpan(parent))
    return None


def decision_refs(record: Mapping[str, Any]) -> ContextOSRefs:
    """A ``DecisionRecord``'s evidence refs (its own ``evidence_refs``, the record itself,
    its approval gates) and policy refs (its policy decisions)."""
    r = _m(record)
    evidence = [e for e in _l(r.get("evidence_refs")) if isinstance(e, str)]
    evidence += [x for x in (_ref("decision_record", r.get("record_id")),) if x]
    evidence += [x for x in (_ref("approval", _m(a).get("gate_id"))
                             for a in _l(r.get("approvals"))) if x]
    policy = [x for x in (_ref("policy_decision", _m(p).get("policy_decision_id"))
                          for p in _l(r.get("policy_decisions"))) if x]
    actors = _principals(_m(r.get("agent_identity")).get("principal_chain"))
    return ContextOSRefs(tuple(_unique(actors)), (), tuple(_unique(policy)),
                         tuple(_unique(evidence)))


def _call_refs(envelope: Mapping[str, Any]) -> ContextOSRefs:
    e = _m(envelope)
    evidence = [x for x in _l(e.get("evidence_refs")) if isinstance(x, str)]
    evidence += [x for x in (_s(_m(c).get("evidence_ref")) for c in _l(e.get("citations")))
                 if x]
    policy = [x for x in (_ref("policy_decision", e.get("policy_decision_id")),) if x]
    return ContextOSRefs((), (), tuple(policy), tuple(_unique(evidence)))


# ---------------------------------------------------------------------------------------
# context_pack_refs


def pack_ref_gaps(context_pack_refs: Any, *, at: str | int | None = None
                  ) -> list[MissingContext]:
    """Blocking missing context for every ``context_pack_refs`` entry the runtime refuses
    (not ``pack_id@semver``), or for an empty list (at least one pinned pack is required)."""
    when = _time(at)
    refs = context_pack_refs if isinstance(context_pack_refs, list) else []
    if not refs:
        return [MissingContext(
            missing_id="context_pack_refs", scope="compile", needed_for="compile",
            question="invokeAgent names no context pack; at least one pinned pack_id@semver "
                     "is required", severity=Severity.BLOCKING, blocked_actions=["compile"],
            status="open", created_at=when)]
    out = []
    for ref in refs:
        if isinstance(ref, str) and PINNED_PACK_REF.match(ref):
            continue
        text = ref if isinstance(ref, str) else _json(ref)
        out.append(MissingContext(
            missing_id=f"unpinned:{text}", scope="compile", needed_for="compile",
            question=f"context pack ref {text!r} is not pinned to pack_id@semver; the runtime "
                     "refuses it", severity=Severity.BLOCKING,
            candidate_sources=[text.partition("@")[0]], blocked_actions=["compile"],
            status="open", created_at=when))
    return out


# ---------------------------------------------------------------------------------------
# tool envelopes


@dataclasses.dataclass(frozen=True)
class ToolResultRecords:
    """What a ``ToolResultEnvelope`` becomes."""

    item: ContextItem
    injection: ContextInjection
    missing: MissingContext | None
    refs: ContextOSRefs


def tool_call_injection(call: Mapping[str, Any], *, at: str | int | None = None
                        ) -> ContextInjection:
    """A ``ToolCallEnvelope``: the arguments became visible to the tool (``tool_argument``);
    the hash is the digest of the canonical JSON of ``args``."""
    c = _m(call)
    call_id = _s(c.get("tool_call_id")) or "unknown"
    return ContextInjection(
        injection_id=f"tool_call:{call_id}", target=Visibility.TOOL,
        injection_point=InjectionPoint.TOOL_ARGUMENT, native_id=call_id,
        final_ref=_ref("capability", c.get("capability_id")),
        hash=digest_text(_json(c.get("args"))) if "args" in c else None,
        visibility=[Visibility.TOOL], created_at=_time(at))


def tool_result_records(result: Mapping[str, Any], *, at: str | int | None = None
                        ) -> ToolResultRecords:
    """A ``ToolResultEnvelope``: a ``tool_result`` item (content: the canonical JSON of
    ``output``, or of ``error`` when there is no output), its injection into the model's
    message history, and, for a status other than ``ok``/``completed``, the missing context
    it leaves."""
    r = _m(result)
    call_id = _s(r.get("tool_call_id")) or "unknown"
    capability = _s(r.get("capability_id")) or "unknown"
    status = _s(r.get("status")) or "unknown"
    meta = _m(r.get("metadata"))
    payload = r.get("output") if r.get("output") is not None else r.get("error")
    content = _json(payload) if payload is not None else None
    redacted = meta.get("redaction_applied")
    native = {"model_api.tool_call_id": call_id, "contextos.capability_id": capability,
              "contextos.status": status}
    for key in ("run_id", "policy_decision_id"):
        if _s(r.get(key)):
            native[f"contextos.{key}"] = r[key]
    if _s(meta.get("tool_transcript_id")):
        native["contextos.tool_transcript_id"] = meta["tool_transcript_id"]
    when = _time(at)
    item = ContextItem(
        item_id=f"tool:{capability}:{call_id}", context_kind=ContextKind.TOOL_RESULT,
        content_mode=ContentMode.TOOL_RESULT_REF, content=content,
        mime_type="application/json" if content is not None else None,
        digest=digest_text(content) if content is not None else None,
        redaction_state=None if not isinstance(redacted, bool) else
        (RedactionState.MASKED if redacted else RedactionState.NONE),
        source_refs=[ContextSourceRef(source_id=call_id, source_kind="tool",
                                      external_mappings=native)])
    injection = ContextInjection(
        injection_id=f"tool_result:{call_id}", target=Visibility.MODEL,
        injection_point=InjectionPoint.MESSAGE_HISTORY, native_id=call_id, hash=item.digest,
        visibility=[Visibility.MODEL], created_at=when)
    missing = None
    severity = TOOL_STATUS_SEVERITY.get(status, Severity.HIGH)
    if severity is not None:
        what = _TOOL_STATUS_QUESTION.get(status, f"has the unknown status {status!r}")
        missing = MissingContext(
            missing_id=f"tool_result:{call_id}", scope="tool_invocation",
            question=f"the result of {capability} ({call_id}) {what}",
            needed_for=capability, severity=severity, blocked_actions=[capability],
            status="open", created_at=when)
    return ToolResultRecords(item, injection, missing, _call_refs(r))


# ---------------------------------------------------------------------------------------
# CompiledContext


def _agent_meta(*objs: Mapping[str, Any] | None) -> dict[str, str]:
    meta: dict[str, str] = {}
    for obj in objs:
        o = _m(obj)
        agent, user = _m(o.get("agent")), _m(o.get("user"))
        urn = _s(agent.get("agent_urn"))
        name = None
        if urn:  # agent:contextos/<slug>@<version>
            name = urn.rpartition("/")[2].partition("@")[0] or None
        for key, value in ((S.GEN_AI_AGENT_NAME, name or _s(agent.get("agent_id"))),
                           (S.GEN_AI_AGENT_ID, _s(agent.get("agent_id"))),
                           (S.GEN_AI_CONVERSATION_ID, _s(o.get("session_id"))),
                           (S.USER_ID, _s(user.get("user_id")))):
            if value and key not in meta:
                meta[key] = value
    return meta


class _Compose:
    """Accumulates the records of one envelope; each object keeps its own time."""

    def __init__(self) -> None:
        self.refs = ContextOSRefs()
        self.items: dict[str, ContextItem] = {}
        self.candidates: list[str] = []
        self.selected: list[str] = []
        self.omitted: list[OmittedRef] = []
        self.budget: ContextBudget | None = None
        self.window: ContextWindow | None = None
        self.assembly: ContextAssembly | None = None
        self.injections: list[ContextInjection] = []
        self.missing: dict[str, MissingContext] = {}
        self.meta: dict[str, str] = {}
        self.intent: str | None = None
        self.first: str | None = None
        self.context_id: str | None = None
        self.run_budget: Mapping[str, Any] = {}

    def _at(self, at: str | None) -> None:
        if self.first is None:
            self.first = at

    def item(self, item: ContextItem) -> None:
        self.items.setdefault(item.item_id, item)

    def invocation(self, request: Mapping[str, Any] | None, run_context: Mapping[str, Any] | None,
                   at: str | None) -> None:
        self._at(at)
        self.refs |= run_context_refs(run_context, request)
        self.meta.update({k: v for k, v in _agent_meta(request, run_context).items()
                          if k not in self.meta})
        rq, rc = _m(request), _m(run_context)
        self.intent = self.intent or _s(_m(rq.get("input")).get("intent")) or _s(rc.get("intent"))
        self.run_budget = _m(rc.get("run_budget")) or self.run_budget
        self.context_id = self.context_id or _ref("contextos", rq.get("request_id")) \
            or _ref("contextos", rc.get("run_id"))
        if request is not None:
            for gap in pack_ref_gaps(rq.get("context_pack_refs"), at=at):
                self.missing.setdefault(gap.missing_id, gap)

    def compiled(self, compiled: Mapping[str, Any], at: str | None) -> None:
        self._at(at)
        c = _m(compiled)
        prompt, manifests = _m(c.get("compiled_prompt")), _m(c.get("manifests"))
        report, ledger = _m(c.get("budget_report")), _m(c.get("context_ledger"))
        pack_ref = _s(ledger.get("pack_ref"))
        self.context_id = self.context_id or _ref("contextos", ledger.get("request_id")) \
            or _ref("contextos", ledger.get("compiled_context_hash"))
        from_pack = [ContextSourceRef(source_id=pack_ref, source_kind="context_pack",
                                      external_mappings={"contextos.pack_ref": pack_ref})] \
            if pack_ref else []

        # the compiled prompt: the assembly
        blocks: list[tuple[ContextItem, InjectionPoint | None]] = []
        for part, (kind, part_point) in PROMPT_PARTS.items():
            text = prompt.get(part)
            if isinstance(text, str):
                blocks.append((ContextItem(
                    item_id=f"compiled_prompt.{part}", context_kind=kind,
                    content_mode=ContentMode.INLINE, content=text, digest=digest_text(text),
                    source_refs=from_pack), part_point))
        raw_blocks = prompt.get("context_blocks")
        for i, block in enumerate(raw_blocks if isinstance(raw_blocks, list) else []):
            b = _m(block) if isinstance(block, Mapping) else {"content": block}
            text = b.get("content", b.get("text"))
            text = text if isinstance(text, str) else (_json(text) if text is not None else None)
            bucket = _s(b.get("bucket"))
            blocks.append((ContextItem(
                item_id=_s(b.get("block_id")) or _s(b.get("id")) or f"context_blocks[{i}]",
                context_kind=BUCKET_KINDS.get(bucket or "", ContextKind.CUSTOM),
                content_mode=ContentMode.INLINE, content=text,
                digest=digest_text(text) if text is not None else None,
                token_estimate=_n(b.get("tokens")), priority=_n(b.get("priority")),
                source_refs=from_pack), None))
        for item, point in blocks:
            if point is not None:
                self.item(item)
        used_total = _n(report.get("tokens_used_at_compile"))
        if blocks:
            self.assembly = ContextAssembly(
                assembly_id=ASSEMBLY_ID, target=Visibility.MODEL, budget_ref=BUDGET_ID,
                ordered_blocks=[AssemblyBlock(index=i, item_id=item.item_id,
                                              context_kind=item.context_kind,
                                              tokens=item.token_estimate, injection_point=point,
                                              digest=item.digest)
                                for i, (item, point) in enumerate(blocks)],
                block_count=len(blocks), token_count=used_total,
                hash=_s(ledger.get("compiled_context_hash")), created_at=at)
        for item, point in blocks:
            if point is None:  # a context block (the prompt parts are not candidates)
                self._select(item)

        # manifests and ledger: selected items and envelope refs
        policy_refs: list[str] = []
        for entry in _l(manifests.get("policy_manifest")):
            e = _m(entry)
            bundle_id = _s(e.get("bundle_id"))
            if not bundle_id:
                continue
            rules = [r for r in _l(e.get("rule_ids")) if isinstance(r, str)]
            policy_refs += [f"policy:{bundle_id}#{r}" for r in rules] or [f"policy:{bundle_id}"]
            self._select(ContextItem(
                item_id=f"policy:{bundle_id}", context_kind=ContextKind.POLICY_NOTE,
                content_mode=ContentMode.REF, source_refs=[ContextSourceRef(
                    source_id=bundle_id, source_kind="policy_bundle",
                    external_mappings={"contextos.rule_ids": ",".join(rules)} if rules else {})]))
        for entry in _l(manifests.get("tool_manifest")):
            e = _m(entry)
            adapter = _s(e.get("adapter_id"))
            meta = _m(e.get("capability_metadata"))
            for cap in _l(e.get("capabilities")):
                if not adapter or not isinstance(cap, str):
                    continue
                cm = _m(meta.get(cap))
                native = {"contextos.adapter_id": adapter, "contextos.capability": cap}
                native.update({f"contextos.{k}": str(v) for k, v in cm.items()
                               if isinstance(v, (str, int, float, bool))})
                self._select(ContextItem(
                    item_id=f"capability:{adapter}.{cap}", context_kind=ContextKind.CUSTOM,
                    content_mode=ContentMode.REF, source_refs=[ContextSourceRef(
                        source_id=f"{adapter}.{cap}", source_kind="tool_capability",
                        external_mappings=native)]))
        evidence = [_s(_m(e).get("evidence_ref")) for e in _l(manifests.get("evidence_manifest"))]
        evidence += [e for e in _l(ledger.get("evidence_refs")) if isinstance(e, str)]
        for ref in _unique(e for e in evidence if e):
            self._select(ContextItem(
                item_id=ref, context_kind=ContextKind.RETRIEVAL_RESULT,
                content_mode=ContentMode.REF, content_ref=ref,
                source_refs=[ContextSourceRef(source_id=ref, source_kind="evidence")]))
        for ref in _l(ledger.get("memory_refs")):
            if isinstance(ref, str) and ref:
                self._select(ContextItem(
                    item_id=ref, context_kind=ContextKind.DURABLE_MEMORY,
                    content_mode=ContentMode.REF, content_ref=ref,
                    source_refs=[ContextSourceRef(source_id=ref, source_kind="memory")]))
        runtime = [x for x in (_ref("context_pack", pack_ref),
                               _ref("request", ledger.get("request_id"))) if x]
        self.refs |= ContextOSRefs((), tuple(runtime), tuple(_unique(policy_refs)),
                                   tuple(_unique(e for e in evidence if e)))

        # budget_report: the budget, its window segments, truncations, dropped blocks
        self._budget(report, used_total, at)

    def _select(self, item: ContextItem) -> None:
        self.item(item)
        if item.item_id not in self.candidates:
            self.candidates.append(item.item_id)
            self.selected.append(item.item_id)

    def _budget(self, report: Mapping[str, Any], used_total: int | None, at: str | None) -> None:
        allocated = {k: v for k, v in _m(report.get("tokens_allocated")).items()
                     if _n(v) is not None}
        used = _m(report.get("tokens_used_by_bucket"))
        truncated = [b for b, v in _m(report.get("bucket_truncations")).items() if v is True]
        warnings = [w for w in _l(report.get("warnings")) if isinstance(w, str)]
        if not allocated and not used and used_total is None:
            return
        buckets = list(dict.fromkeys([*allocated, *used]))
        segments = [WindowSegment(segment=b, order=i, reserved_tokens=_n(allocated.get(b)),
                                  used_tokens=_n(used.get(b))) for i, b in enumerate(buckets)]
        max_tokens = _n(self.run_budget.get("total_tokens")) \
            or (sum(_n(v) or 0 for v in allocated.values()) or None)
        if used_total is None and used:
            used_total = sum(_n(v) or 0 for v in used.values())
        overflow = bool(truncated)
        dropped = _m(report.get("dropped_block_ids"))
        for bucket, ids in dropped.items():
            note = "; ".join(w for w in warnings if bucket in w) \
                or f"dropped from the {bucket} bucket at compile"
            for block_id in ids if isinstance(ids, list) else []:
                if not isinstance(block_id, str) or block_id in self.candidates:
                    continue
                self.item(ContextItem(item_id=block_id,
                                      context_kind=BUCKET_KINDS.get(bucket, ContextKind.CUSTOM)))
                self.candidates.append(block_id)
                self.omitted.append(OmittedRef(item_id=block_id, reason=OmissionReason.BUDGET,
                                               detail=note))
        self.budget = ContextBudget(
            budget_id=BUDGET_ID, target=Visibility.MODEL, max_tokens=max_tokens,
            actual_tokens=used_total,
            overflow=overflow,
            overflow_strategy=OverflowStrategy.CUSTOM if overflow else None,
            utilization=used_total / max_tokens if max_tokens and used_total is not None
            else None,
            window_ref=WINDOW_ID,
            truncation_records=[TruncationRecord(segment=b, strategy=OverflowStrategy.CUSTOM,
                                                 tokens_after=_n(used.get(b)))
                                for b in truncated],
            window_segments=segments, created_at=at, completed_at=at)
        self.window = ContextWindow(window_id=WINDOW_ID, budget_ref=BUDGET_ID,
                                    target=Visibility.MODEL, max_tokens=max_tokens,
                                    segments=segments, created_at=at)

    def tool_call(self, call: Mapping[str, Any], at: str | None) -> None:
        self._at(at)
        self.context_id = self.context_id or _ref("contextos", _m(call).get("run_id"))
        self.injections.append(tool_call_injection(call, at=at))
        self.refs |= _call_refs(call)
        self.refs |= ContextOSRefs(tuple(_principals(_m(call).get("principal_chain"))))

    def tool_result(self, result: Mapping[str, Any], at: str | None) -> None:
        self._at(at)
        self.context_id = self.context_id or _ref("contextos", _m(result).get("run_id"))
        rec = tool_result_records(result, at=at)
        self.item(rec.item)
        self.injections.append(rec.injection)
        if rec.missing is not None:
            self.missing[rec.missing.missing_id] = rec.missing
        self.refs |= rec.refs

    def decision(self, record: Mapping[str, Any], at: str | None) -> None:
        self._at(at)
        self.context_id = self.context_id or _ref(
            "contextos", _m(_m(record).get("inputs_refs")).get("request"))
        self.refs |= decision_refs(record)
        lineage = _m(_m(record).get("lineage"))
        pack = _ref("context_pack", lineage.get("pack_version"))
        if pack:
            self.refs |= ContextOSRefs((), (pack,))

    def _run_budget(self) -> None:
        """Without a budget_report, the RunContext's run budget: its total and buckets."""
        rb = self.run_budget
        buckets = {k: _n(v) for k, v in _m(rb.get("bucket_tokens")).items()
                   if _n(v) is not None}
        total = _n(rb.get("total_tokens"))
        if total is None and not buckets:
            return
        segments = [WindowSegment(segment=b, order=i, reserved_tokens=v)
                    for i, (b, v) in enumerate(buckets.items())]
        self.budget = ContextBudget(budget_id=BUDGET_ID, target=Visibility.MODEL, max_tokens=total,
                                    window_ref=WINDOW_ID if segments else None,
                                    window_segments=segments, created_at=self.first,
                                    completed_at=self.first)
        if segments:
            self.window = ContextWindow(window_id=WINDOW_ID, budget_ref=BUDGET_ID,
                                        target=Visibility.MODEL, max_tokens=total,
                                        segments=segments, created_at=self.first)

    def bundle(self, *, context_id: str | None, start: str | None, end: str | None) -> Bundle:
        start = start or self.first
        if self.budget is None:
            self._run_budget()
        items = list(self.items.values())
        known = [i.token_estimate for i in items if i.token_estimate is not None]
        surface = [ContextSurface(
            surface_id=SURFACE_ID, item_refs=[i.item_id for i in items], item_count=len(items),
            token_estimate=sum(known) if known else None,
            created_at=self.first, completed_at=self.first)] if items else []
        selection = [ContextSelection(
            selection_id=SELECTION_ID, surface_id=SURFACE_ID, intent=self.intent,
            candidate_item_refs=self.candidates, selected_item_refs=self.selected,
            omitted_item_refs=self.omitted,
            budget_ref=BUDGET_ID if self.budget is not None else None,
            candidate_count=len(self.candidates), created_at=self.first,
            completed_at=self.first)] if self.candidates else []
        lifecycle = (Lifecycle.INJECTED if self.injections
                     else Lifecycle.ASSEMBLED if self.assembly
                     else Lifecycle.SELECTED if selection
                     else Lifecycle.AVAILABLE if items else Lifecycle.DRAFT)
        envelope = ContextEnvelope(
            context_id=context_id or self.context_id or "contextos:unknown", scope=Scope.TURN,
            lifecycle=lifecycle, created_at=start, completed_at=end or start,
            actor_refs=list(self.refs.actor_refs), runtime_refs=list(self.refs.runtime_refs),
            policy_refs=list(self.refs.policy_refs),
            evidence_refs=list(self.refs.evidence_refs), metadata=self.meta)
        return Bundle(
            context_envelope=envelope, context_surfaces=surface, context_items=items,
            context_selections=selection,
            context_budgets=[self.budget] if self.budget else [],
            context_windows=[self.window] if self.window else [],
            context_assemblies=[self.assembly] if self.assembly else [],
            context_injections=self.injections, missing_context=list(self.missing.values()))


def compiled_context_bundle(compiled: Mapping[str, Any], *,
                            request: Mapping[str, Any] | None = None,
                            run_context: Mapping[str, Any] | None = None,
                            context_id: str | None = None,
                            at: str | int | None = None) -> Bundle:
    """A ``CompiledContext`` (with the request and RunContext it was compiled for, when
    given) as a bundle. ``at``: the compile time (RFC 3339 or ns); default: none recorded."""
    return contextos_bundle(compiled=compiled, request=request, run_context=run_context,
                            context_id=context_id, at=at)


def contextos_bundle(*, request: Mapping[str, Any] | None = None,
                     run_context: Mapping[str, Any] | None = None,
                     compiled: Mapping[str, Any] | None = None,
                     tool_calls: Sequence[Mapping[str, Any]] = (),
                     tool_results: Sequence[Mapping[str, Any]] = (),
                     decision: Mapping[str, Any] | None = None,
                     context_id: str | None = None,
                     at: str | int | None = None) -> Bundle:
    """Every ContextOS object of one ``invokeAgent`` call as one bundle (all at ``at``).
    The context id is ``contextos:<request_id>`` (else the run id, else the compiled hash)."""
    when = _time(at)
    c = _Compose()
    if request is not None or run_context is not None:
        c.invocation(request, run_context, when)
    if compiled is not None:
        c.compiled(compiled, when)
    for call in tool_calls:
        c.tool_call(call, when)
    for result in tool_results:
        c.tool_result(result, when)
    if decision is not None:
        c.decision(decision, when)
    return c.bundle(context_id=context_id, start=when, end=when)


# ---------------------------------------------------------------------------------------
# the invokeAgent helper

_CURRENT: contextvars.ContextVar[AgentInvocation | None] = contextvars.ContextVar(
    "otel_agent_context_contextos_invocation", default=None)


def current_invocation() -> AgentInvocation | None:
    """The :class:`AgentInvocation` of the ``invokeAgent`` call running now, if any."""
    return _CURRENT.get()


class AgentInvocation:
    """One observed ``invokeAgent(request_envelope, run_context)`` call.

    Starts an ``invoke_agent {name}`` span in the caller's trace (the RunContext's
    ``traceparent``, else the request's ``trace`` block) that is the envelope; report the
    objects as the run produces them (:meth:`compiled`, :meth:`tool_call`,
    :meth:`tool_result`, :meth:`decision`); :meth:`stop` (or the end of a ``with`` block)
    emits them all as the envelope's records and ends the span. Telemetry errors are logged,
    never raised into the call; the call's own exceptions pass through unchanged.
    """

    def __init__(self, agent_context: AgentContext, request: Mapping[str, Any] | None = None,
                 run_context: Mapping[str, Any] | None = None, *, name: str | None = None
                 ) -> None:
        self.agent_context = agent_context
        self._compose = _Compose()
        self._ended = False
        self._tokens: list[Any] = []
        self._start = time.time_ns()
        self.span: trace.Span = trace.INVALID_SPAN
        try:
            self._compose.invocation(request, run_context, ns_to_rfc3339(self._start))
            meta = self._compose.meta
            agent = name or meta.get(S.GEN_AI_AGENT_NAME) or "agent"
            attrs = {S.GEN_AI_OPERATION_NAME: "invoke_agent", S.GEN_AI_AGENT_NAME: agent}
            if S.GEN_AI_AGENT_ID in meta:
                attrs[S.GEN_AI_AGENT_ID] = meta[S.GEN_AI_AGENT_ID]
            self.span = agent_context._tracer.start_span(
                f"invoke_agent {agent}", context=trace_parent(run_context, request),
                kind=SpanKind.INTERNAL, attributes=attrs, start_time=self._start)
        except Exception:
            if is_strict():
                raise
            _log.warning("contextos: invokeAgent telemetry could not start; the call runs "
                         "without it", exc_info=True)
            self._ended = True

    @property
    def context_id(self) -> str:
        return self._compose.context_id or "contextos:unknown"

    @_guard
    def compiled(self, compiled: Mapping[str, Any]) -> None:
        """The ``CompiledContext`` the runtime compiled for this call."""
        self._compose.compiled(compiled, ns_to_rfc3339(time.time_ns()))

    @_guard
    def tool_call(self, call: Mapping[str, Any]) -> None:
        """A ``ToolCallEnvelope`` the executor sent."""
        self._compose.tool_call(call, ns_to_rfc3339(time.time_ns()))

    @_guard
    def tool_result(self, result: Mapping[str, Any]) -> None:
        """A ``ToolResultEnvelope`` the gateway returned."""
        self._compose.tool_result(result, ns_to_rfc3339(time.time_ns()))

    @_guard
    def decision(self, record: Mapping[str, Any]) -> None:
        """The ``DecisionRecord`` the call returned."""
        self._compose.decision(record, ns_to_rfc3339(time.time_ns()))

    @_guard
    def stop(self) -> None:
        """Emit the envelope's records and end the span (idempotent)."""
        if self._ended:
            return
        self._ended = True
        end = time.time_ns()
        try:
            bundle = self._compose.bundle(context_id=None, start=ns_to_rfc3339(self._start),
                                          end=ns_to_rfc3339(end))
            emit_bundle(bundle, self.agent_context, span=self.span)
        finally:
            self.span.end(end_time=end)

    @_guard
    def fail(self, exc: BaseException) -> None:
        """Mark the call failed (``error.type``), then :meth:`stop`."""
        if not self._ended:
            self.span.set_status(Status(StatusCode.ERROR, str(exc) or type(exc).__name__))
            self.span.set_attribute(S.ERROR_TYPE, type(exc).__qualname__)
        self.stop()

    def __enter__(self) -> AgentInvocation:
        self._tokens.append((_CURRENT.set(self), otel_context.attach(
            trace.set_span_in_context(self.span))))
        return self

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        if self._tokens:
            mine, otel = self._tokens.pop()
            otel_context.detach(otel)
            _CURRENT.reset(mine)
        if exc is None:
            self.stop()
        else:
            self.fail(exc)


def _is_decision(value: Any) -> bool:
    return isinstance(value, Mapping) and "decision_key" in value and "record_id" in value


def wrap_invoke_agent(agent_context: AgentContext, *, name: str | None = None
                      ) -> Callable[[_F], _F]:
    """Decorate an ``invokeAgent(request_envelope, run_context, ...)`` function (sync or
    async): each call is an :class:`AgentInvocation` (reach it inside with
    :func:`current_invocation` to report the compiled context and tool envelopes); a
    returned ``DecisionRecord`` is recorded. Return values and exceptions pass unchanged."""

    def decorate(fn: _F) -> _F:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(request: Any, run_context: Any = None, *args: Any,
                                    **kwargs: Any) -> Any:
                with AgentInvocation(agent_context, request, run_context, name=name) as inv:
                    out = await fn(request, run_context, *args, **kwargs)
                    if _is_decision(out):
                        inv.decision(out)
                    return out
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(request: Any, run_context: Any = None, *args: Any, **kwargs: Any) -> Any:
            with AgentInvocation(agent_context, request, run_context, name=name) as inv:
                out = fn(request, run_context, *args, **kwargs)
                if _is_decision(out):
                    inv.decision(out)
                return out
        return wrapper  # type: ignore[return-value]

    return decorate
