"""What the store must say about a bundle, computed straight from the bundle (independently
of ``_store._rows``), so the tests compare two readings of the same data."""

from __future__ import annotations

from typing import Any


def conversation(bundle: dict[str, Any]) -> str | None:
    return bundle["context_envelope"].get("metadata", {}).get("gen_ai.conversation.id")


def key(bundle: dict[str, Any]) -> tuple[str, str]:
    env = bundle["context_envelope"]
    return env["telemetry_refs"][0]["trace_id"], env["context_id"]


def omitted(bundle: dict[str, Any]) -> set[tuple[str, str | None]]:
    return {(o["item_id"], o.get("reason")) for s in bundle.get("context_selections", [])
            for o in s.get("omitted_item_refs", [])}


def selected(bundle: dict[str, Any]) -> set[str]:
    return {i for s in bundle.get("context_selections", [])
            for i in s.get("selected_item_refs", [])}


def window(bundle: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for assembly in bundle.get("context_assemblies", []):
        for block in assembly.get("ordered_blocks", []):
            if block.get("item_id") and block["item_id"] not in out:
                out.append(block["item_id"])
    return out


def truncated(bundle: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {t["item_id"]: (t.get("tokens_before"), t.get("tokens_after"))
            for b in bundle.get("context_budgets", []) for t in b.get("truncation_records", [])}


def compacted(bundle: dict[str, Any]) -> set[str]:
    return {i for c in bundle.get("context_compactions", []) for i in c.get("source_item_refs", [])}


def uncovered(bundle: dict[str, Any]) -> set[str]:
    return {s["item_id"] for c in bundle.get("context_compactions", [])
            for s in c.get("source_coverage", []) if s.get("covered") is False}


def tokens_by_kind(bundle: dict[str, Any]) -> dict[str, int]:
    out: dict[str, int] = {}
    for assembly in bundle.get("context_assemblies", []):
        for block in assembly.get("ordered_blocks", []):
            kind = block.get("context_kind") or "unknown"
            out[kind] = out.get(kind, 0) + (block.get("tokens") or 0)
    return out


def in_time_order(bundles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from otel_agent_context._records import rfc3339_to_ns

    return sorted(bundles, key=lambda b: (rfc3339_to_ns(b["context_envelope"]["created_at"]),
                                          b["context_envelope"]["context_id"]))
