"""The Python end of a multi-iteration job's link (``DistributedTrainer(iterations_per_job=...)``).

A group task of such a job finds, after the partitions in its header, the path of a Unix domain socket its executor
opened for it (``jvm_bridge``'s ``TaskLink.java``, in an owner-only directory under the executor's Spark local
directory). Per iteration it writes its gradient records there; the executor forwards them over Spark's RPC to the
driver's ``Rendezvous`` and, once every task of the job has sent that iteration's, writes back the next
iteration's counters and weights, or the order to stop. Layout, little-endian::

    task to executor:  int32 n | n x (int32 length | record bytes)
    executor to task:  int32 m | m x (int32 length | bytes); the first is int32 status (0 next, 1 stop, 2 failed)
                       | int32 epoch | int32 iteration in epoch | int32 global iteration; then the weights' chunks
                       (or, on failure, the driver's message)
"""
from __future__ import annotations

import socket
import struct

__all__ = ["link_path", "run_linked"]

_INT = struct.Struct("<i")
_REPLY = struct.Struct("<iiii")
_CONTINUE, _STOP, _FAILED = 0, 1, 2
_SEND_BUFFER = 4 << 20
#: Buffers per ``sendmsg`` (Linux takes at most IOV_MAX = 1024).
_MAX_PARTS = 512


def link_path(header: bytes, end: int) -> str | None:
    """The socket path a multi-iteration job's header carries from byte ``end`` (after the partitions): int32
    length then UTF-8; None when the header ends there (a job of one iteration)."""
    if len(header) <= end:
        return None
    (size,) = _INT.unpack_from(header, end)
    return bytes(header[end + 4:end + 4 + size]).decode("utf-8")


def run_linked(path: str, ctx, weights: list, compute, make_ctx) -> None:
    """Run the job's iterations: ``compute(ctx, weights)`` returns one iteration's records (a list of bytes-like),
    which go to the executor; its reply gives the next iteration's ``make_ctx(epoch, iteration, global_iteration)``
    and weights (a list of float32 chunks), until it says stop.

    Raises
    ------
    RuntimeError
        If the driver failed the job (a task failed, or a second attempt of a task arrived), with its message, or
        if the executor closed the link mid-job.
    """
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        # Room for a whole iteration's records in the socket (the kernel caps it at net.core.wmem_max): sent in
        # one call instead of 64 KB at a time, each waiting for the executor to read the last (1 ms per iteration
        # for LeNet-5's 247 KB)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SEND_BUFFER)
        sock.connect(path)
        stream = sock.makefile("rb", buffering=1 << 16)
        while True:
            records = compute(ctx, weights)
            _send_all(sock, [_INT.pack(len(records))] + [p for r in records for p in (_INT.pack(len(r)), r)])
            del records
            reply = _read_frames(stream)
            status, epoch, iteration, global_iteration = _REPLY.unpack(reply[0])
            if status == _FAILED:
                raise RuntimeError("sparkdl: the multi-iteration job failed at the driver: "
                                   + bytes(reply[1]).decode("utf-8", "replace"))
            if status != _CONTINUE:
                return
            ctx, weights = make_ctx(epoch, iteration, global_iteration), reply[1:]


def _send_all(sock, parts: list) -> None:
    """Send ``parts`` (bytes-like) in as few system calls as the socket takes: one ``sendmsg`` of them all when
    its buffer has room, which wakes the executor's reader once per iteration instead of once per part."""
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        sent = sock.sendmsg(views[:_MAX_PARTS])
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if sent:
            views[0] = views[0][sent:]


def _read_frames(stream) -> list:
    def exactly(n):
        data = stream.read(n)
        if len(data) != n:
            raise RuntimeError("sparkdl: the executor's iteration link closed mid-job (the job is failing)")
        return data
    (count,) = _INT.unpack(exactly(4))
    return [exactly(_INT.unpack(exactly(4))[0]) for _ in range(count)]
