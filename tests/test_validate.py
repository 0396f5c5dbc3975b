"""``otel-agent-context validate``: refs to items a bundle does not hold, and empty input.

Every test runs the real command in a subprocess.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson

from otel_agent_context import AgentContext
from otel_agent_context.adapters import emit_session
from otel_agent_context.testing import CapturedTelemetry

SEED_SESSION = Path(__file__).parent / "adapters" / "fixtures" / "abi" / "seed_session"


def _cli(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "otel_agent_context", *args],
                          input=stdin.decode() if stdin is not None else None,
                          capture_output=True, text=True, timeout=60, check=False)


def _bundle() -> dict[str, Any]:
    """A bundle with items, a selection (selected, omitted, candidates) and an assembly."""
    return {
        "context_envelope": {"context_id": "ctx-1", "scope": "turn"},
        "context_items": [
            {"item_id": "kb:1", "context_kind": "retrieval_result"},
            {"item_id": "kb:2", "context_kind": "retrieval_result"},
            {"item_id": "kb:3", "context_kind": "retrieval_result"},
        ],
        "context_selections": [{
            "selection_id": "sel-1",
            "candidate_item_refs": ["kb:1", "kb:2", "kb:3"],
            "selected_item_refs": ["kb:1", "kb:2"],
            "omitted_item_refs": [{"item_id": "kb:3", "reason": "budget"}],
        }],
        "context_assemblies": [{
            "assembly_id": "asm-1",
            "ordered_blocks": [{"index": 0, "item_id": "kb:1"}, {"index": 1, "item_id": "kb:2"},
                               {"index": 2}],
        }],
    }


def _write(tmp_path: Path, *bundles: dict[str, Any]) -> Path:
    path = tmp_path / "bundles.jsonl"
    path.write_bytes(b"".join(orjson.dumps(b) + b"\n" for b in bundles))
    return path


def test_the_hand_written_bundle_is_valid(tmp_path: Path) -> None:
    # the bundles the other tests break are valid as they stand
    path = _write(tmp_path, _bundle())
    out = _cli("validate", str(path))
    assert (out.returncode, out.stdout, out.stderr) == (0, "", f"{path}: all bundles valid\n")


def test_dangling_selected_ref(tmp_path: Path) -> None:
    ok = _bundle()
    bad = _bundle()
    bad["context_selections"][0]["selected_item_refs"] = ["kb:1", "kb:9"]
    path = _write(tmp_path, ok, ok, bad)
    out = _cli("validate", str(path))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"{path}:3: $.context_selections[0].selected_item_refs[1]: "
        "item 'kb:9' is not in context_items"]
    assert out.stderr == "1 error(s)\n"


def test_dangling_omitted_and_candidate_refs(tmp_path: Path) -> None:
    bad = _bundle()
    selection = bad["context_selections"][0]
    selection["candidate_item_refs"] = ["kb:1", "kb:2", "kb:3", "gone"]
    selection["omitted_item_refs"].append({"item_id": "dropped", "reason": "budget"})
    out = _cli("validate", str(_write(tmp_path, bad)))
    assert out.returncode == 1
    assert [line.split(": ", 1)[1] for line in out.stdout.splitlines()] == [
        "$.context_selections[0].candidate_item_refs[3]: item 'gone' is not in context_items",
        "$.context_selections[0].omitted_item_refs[1].item_id: "
        "item 'dropped' is not in context_items"]


def test_dangling_not_injected_and_block_source_refs(tmp_path: Path) -> None:
    ok = _bundle()
    ok["context_selections"][0]["not_injected_item_refs"] = ["kb:2"]
    ok["context_assemblies"][0]["ordered_blocks"][2]["source_item_refs"] = ["kb:2"]
    bad = _bundle()
    bad["context_selections"][0]["not_injected_item_refs"] = ["kb:gone"]
    bad["context_assemblies"][0]["ordered_blocks"][0]["source_item_refs"] = ["kb:2", "doc:x"]
    out = _cli("validate", str(_write(tmp_path, ok, bad)))
    assert out.returncode == 1
    assert [line.split(": ", 1)[1] for line in out.stdout.splitlines()] == [
        "$.context_selections[0].not_injected_item_refs[0]: "
        "item 'kb:gone' is not in context_items",
        "$.context_assemblies[0].ordered_blocks[0].source_item_refs[1]: "
        "item 'doc:x' is not in context_items"]
    assert all(line.startswith(f"{tmp_path / 'bundles.jsonl'}:2:")
               for line in out.stdout.splitlines())


def test_dangling_block_item_id(tmp_path: Path) -> None:
    bad = _bundle()
    bad["context_assemblies"][0]["ordered_blocks"][1]["item_id"] = "kb:404"
    path = _write(tmp_path, bad)
    out = _cli("validate", str(path))
    assert out.returncode == 1
    assert out.stdout.splitlines() == [
        f"{path}:1: $.context_assemblies[0].ordered_blocks[1].item_id: "
        "item 'kb:404' is not in context_items"]


def test_a_bundle_without_items_has_every_ref_dangling(tmp_path: Path) -> None:
    bad = _bundle()
    del bad["context_items"]
    out = _cli("validate", str(_write(tmp_path, bad)))
    assert out.returncode == 1
    assert len(out.stdout.splitlines()) == 3 + 2 + 1 + 2  # candidates, selected, omitted, blocks
    assert out.stderr == "8 error(s)\n"


def test_ref_errors_follow_the_schema_errors_of_their_line(tmp_path: Path) -> None:
    bad = _bundle()
    bad["context_envelope"]["scope"] = "galaxy"
    bad["context_selections"][0]["selected_item_refs"] = ["nope"]
    path = _write(tmp_path, bad)
    out = _cli("validate", str(path))
    lines = out.stdout.splitlines()
    assert out.returncode == 1 and len(lines) == 2
    assert lines[0].startswith(f"{path}:1: $.context_envelope.scope: 'galaxy' is not one of")
    assert lines[1] == (f"{path}:1: $.context_selections[0].selected_item_refs[0]: "
                        "item 'nope' is not in context_items")


def test_a_real_rebuild_is_valid(tmp_path: Path) -> None:
    captured = CapturedTelemetry()
    agent_context: AgentContext = captured.agent_context
    emit_session(SEED_SESSION, agent_context)
    bundles = captured.bundles()
    assert len(bundles) == 1
    bundle = bundles[0]
    selection = bundle["context_selections"][0]
    # the rebuild has every kind of ref the check follows
    assert selection["selected_item_refs"] and selection["omitted_item_refs"]
    assert selection["candidate_item_refs"]
    assert any("item_id" in b for b in bundle["context_assemblies"][0]["ordered_blocks"])
    path = _write(tmp_path, bundle)
    out = _cli("validate", str(path))
    assert (out.returncode, out.stdout, out.stderr) == (0, "", f"{path}: all bundles valid\n")

    # and the same bundle with one of its selected items gone is not
    first = selection["selected_item_refs"][0]
    bundle["context_items"] = [i for i in bundle["context_items"] if i["item_id"] != first]
    out = _cli("validate", str(_write(tmp_path, bundle)))
    assert out.returncode == 1
    assert f"$.context_selections[0].selected_item_refs[0]: item {first!r} is not in " \
           "context_items" in out.stdout


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    out = _cli("validate", str(path))
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"validate: {path}: no bundles (empty file)\n"


def test_blank_lines_only(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_bytes(b"\n  \n\t\n\r\n")
    out = _cli("validate", str(path))
    assert (out.returncode, out.stdout) == (1, "")
    assert out.stderr == f"validate: {path}: no bundles (empty file)\n"


def test_empty_stdin() -> None:
    for stdin in (b"", b"\n\n"):
        out = _cli("validate", "-", stdin=stdin)
        assert (out.returncode, out.stdout) == (1, "")
        assert out.stderr == "validate: -: no bundles (empty file)\n"


def test_stdin_with_a_bundle_is_still_valid() -> None:
    out = _cli("validate", "-", stdin=orjson.dumps(_bundle()) + b"\n")
    assert (out.returncode, out.stderr) == (0, "-: all bundles valid\n")


def test_missing_file_is_still_exit_2(tmp_path: Path) -> None:
    out = _cli("validate", str(tmp_path / "none.jsonl"))
    assert out.returncode == 2
    assert out.stderr == f"validate: {tmp_path / 'none.jsonl'}: no such file\n"


def test_a_directory_says_which_file_to_give(tmp_path: Path) -> None:
    out = _cli("validate", str(tmp_path))
    assert out.returncode == 2
    assert out.stderr == (f"validate: {tmp_path}: a directory; give one of its "
                          "bundles-*.jsonl files\n")
