"""A full disk under the write-ahead log: nothing is acknowledged that is not durable, the
senders are told to retry (UNAVAILABLE with RetryInfo / 503 with Retry-After), a record
the disk stopped part-way is cut back, and once space returns nothing acknowledged is lost,
not even across a SIGKILL.

Two ways: a fault-injection seam in process (``os.writev`` of the WAL writes half a record
then fails with ENOSPC), everywhere; and a real, tiny tmpfs mounted by the test, when it
runs as root (as here and in CI containers; skipped otherwise, which the other test covers).
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2
from processor_testkit import by_context, envelope_spans, read_bundles, request, serve, wait_for

from otel_agent_context.processor import _wal
from otel_agent_context.processor._wal import WriteAheadLog


def _body(context_id: str, trace: int) -> bytes:
    return request(envelope_spans(trace, context_id, stages=2)).SerializeToString()


def _post(address: str, body: bytes) -> tuple[int, dict[str, str]]:
    req = urllib.request.Request(f"http://{address}/v1/traces", data=body, method="POST",
                                 headers={"Content-Type": "application/x-protobuf"})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def _grpc_export(address: str, body: bytes) -> grpc.RpcError | None:
    channel = grpc.insecure_channel(address)
    export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                                 request_serializer=lambda b: b,
                                 response_deserializer=lambda b: b)
    try:
        export(body, timeout=10)
        return None
    except grpc.RpcError as exc:
        return exc
    finally:
        channel.close()


class _DiskFull:
    """``os.writev`` that writes half of what it is given, then fails as a full disk does."""

    def __init__(self) -> None:
        self.on = False
        self.real = os.writev

    def __call__(self, fd: int, buffers: Any) -> int:
        if not self.on:
            return self.real(fd, buffers)
        data = b"".join(buffers)
        os.write(fd, data[: len(data) // 2])
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_refuses_retryably_cuts_the_torn_record_and_loses_nothing(
        start_processor, monkeypatch, tmp_path: Path) -> None:
    disk = _DiskFull()
    monkeypatch.setattr(_wal.os, "writev", disk)  # the seam: the WAL's writes only fail
    processor = start_processor(**{"receivers.otlp_grpc.endpoint": "127.0.0.1:0"})
    http, grpc_address = processor.addresses["otlp_http"], processor.addresses["otlp_grpc"]
    assert _post(http, _body("before", 1))[0] == 200
    wal_dir = Path(processor.config.wal_dir)
    sizes = {p.name: p.stat().st_size for p in wal_dir.iterdir()}

    disk.on = True
    status, headers = _post(http, _body("during", 2))
    assert status == 503 and float(headers["Retry-After"]) > 0
    error = _grpc_export(grpc_address, _body("during", 2))
    assert error is not None and error.code() == grpc.StatusCode.UNAVAILABLE
    details = status_pb2.Status.FromString(dict(error.trailing_metadata())[
        "grpc-status-details-bin"]).details
    retry = error_details_pb2.RetryInfo()
    assert details[0].Unpack(retry) and retry.retry_delay.ToNanoseconds() > 0
    # the half-written records were cut back: the segments are as they were
    assert {p.name: p.stat().st_size for p in wal_dir.iterdir()} == sizes

    disk.on = False  # space is back: the senders' retries go through
    assert _post(http, _body("during", 2))[0] == 200
    assert _grpc_export(grpc_address, _body("after", 3)) is None
    wait_for(lambda: {"before", "during", "after"} <= set(by_context(read_bundles(
        Path(processor.config.out_dir)))))
    # every record in the WAL is whole: a replay reads all of them, no torn tail
    copy = tmp_path / "wal-copy"
    shutil.copytree(wal_dir, copy)
    replay = WriteAheadLog(copy, segment_bytes=1 << 20, fsync=False).open()
    assert replay.torn_bytes == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root; "
                    "test_a_full_disk_refuses_retryably... covers this with a seam")
def test_a_real_full_tmpfs_then_sigkill_loses_no_acknowledged_envelope(tmp_path: Path) -> None:
    mount = tmp_path / "small"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:  # root without CAP_SYS_ADMIN (an unprivileged container)
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
                    "test_a_full_disk_refuses_retryably... covers this with a seam")
    try:
        out_dir, ready = tmp_path / "out", tmp_path / "ready.json"
        args = ["--out", str(out_dir), "--wal", str(mount / "wal"), "--otlp-grpc", "off",
                "--otlp-http", "127.0.0.1:0", "--metrics", "off", "--envelope-timeout", "600",
                "--orphan-timeout", "600"]
        process, addresses = serve(args, ready)
        filler = mount / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
        try:  # leave the WAL no room
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        acked, refused = [], 0
        for i in range(40):  # envelopes left open (no envelope span): they stay in the WAL
            spans = envelope_spans(100 + i, f"env-{i}", stages=2)
            status, _ = _post(addresses["otlp_http"], request(spans[1:]).SerializeToString())
            if status == 200:
                acked.append(i)
            else:
                assert status == 503
                refused += 1
        assert refused > 0  # the disk was full
        filler.unlink()  # space returns
        for i in range(40):
            if i not in acked:
                spans = envelope_spans(100 + i, f"env-{i}", stages=2)
                status, _ = _post(addresses["otlp_http"],
                                  request(spans[1:]).SerializeToString())
                assert status == 200
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        process, addresses = serve(args, ready)
        for i in range(40):  # the envelope spans complete every envelope after the restart
            spans = envelope_spans(100 + i, f"env-{i}", stages=2)
            assert _post(addresses["otlp_http"], request(spans[:1]).SerializeToString())[0] \
                == 200
        wait_for(lambda: len(read_bundles(out_dir)) >= 40, timeout=30)
        bundles = read_bundles(out_dir)
        assert sorted(b["context_envelope"]["context_id"] for b in bundles) == sorted(
            f"env-{i}" for i in range(40))
        for bundle in bundles:  # both stage spans survived the full disk and the SIGKILL
            assert bundle["rebuild"]["status"] == "complete", bundle["rebuild"]
        process.send_signal(signal.SIGTERM)
        process.wait(20)
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
