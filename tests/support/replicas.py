"""Replica groups in one process for tests: real stores on disk, real TCP on 127.0.0.1, fast timers.

``Group.node(broker_id)`` opens a replicated store with 64 KiB CommitLog files (files roll every
few hundred messages) and starts its HA service; ``FakeSlave`` / ``FakeMaster`` speak the frames
by hand (a stalled slave, a deposed master) where a real replica cannot be made to misbehave.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from store import MessageStore
from store.ha import (
    EpochEntry,
    HAConfig,
    InMemorySyncStateAuthority,
    ReplicaController,
    ReplicationMode,
    SyncState,
)
from store.ha.frames import (
    MASTER_HANDSHAKE,
    SLAVE_ACK,
    SLAVE_HANDSHAKE,
    TRANSFER_HEADER,
    SlaveHandshake,
    TransferHeader,
    decode_master_handshake,
    decode_master_handshake_header,
    decode_transfer_header,
    encode_master_handshake,
    encode_slave_ack,
    encode_slave_handshake,
    encode_transfer_header,
)
from store.ha.tls import IdentityCheck
from store.io.fs import FileSystem
from tests.support.stores import tiny_config

FAST = {
    "heartbeat_interval_ms": 100,
    "housekeeping_interval_ms": 3000,
    "max_time_slave_not_catchup_ms": 1500,
    "sync_state_check_interval_ms": 50,
    "reconnect_min_ms": 50,
    "reconnect_max_ms": 400,
    "ack_timeout_ms": 3000,
}


@dataclass
class Node:
    broker_id: int
    directory: Path
    store: MessageStore
    ha: ReplicaController


@dataclass
class Group:
    root: Path
    authority: InMemorySyncStateAuthority = field(default_factory=InMemorySyncStateAuthority)
    nodes: dict[int, Node] = field(default_factory=dict)

    def node(
        self,
        broker_id: int,
        *,
        store: dict[str, object] | None = None,
        fs: FileSystem | None = None,
        identity_check: IdentityCheck | None = None,
        **ha: object,
    ) -> Node:
        """Open member ``broker_id`` (``fs``: a file-system seam to break, e.g. a full disk;
        ``identity_check``: who may replicate, with ``tls=HATls(...)`` in ``ha``)."""
        directory = self.root / f"broker-{broker_id}"
        opened = MessageStore.open(tiny_config(directory, replicated=True, **(store or {})), fs=fs)
        config = HAConfig(broker_id=broker_id, **{**FAST, **ha})  # type: ignore[arg-type]
        controller = ReplicaController(opened, config, self.authority, identity_check=identity_check)
        controller.start()
        node = Node(broker_id, directory, opened, controller)
        self.nodes[broker_id] = node
        return node

    def elect(self, node: Node, epoch: int, set_epoch: int = 0) -> None:
        """What the cluster layer does on an election: the new set, then the role."""
        self.authority.reset(SyncState(frozenset({node.broker_id}), epoch, set_epoch))
        node.ha.become_master(epoch, set_epoch)

    def stop(self, node: Node) -> None:
        node.ha.close()
        node.store.close()
        self.nodes.pop(node.broker_id, None)

    def close(self) -> None:
        for node in list(self.nodes.values()):
            self.stop(node)


def replication(mode: str) -> ReplicationMode:
    return ReplicationMode(mode)


def commitlog_bytes(store: MessageStore, start: int, end: int) -> bytes:
    """The stored bytes of ``[start, end)`` as a master would send them (file ends included)."""
    log = store.replica_log()
    out = bytearray()
    while start + len(out) < end:
        with log.transfer_view(start + len(out), end - start - len(out)) as view:
            assert len(view), f"no bytes at {start + len(out)}"
            out += view
    return bytes(out)


def commitlog_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((directory / "commitlog").iterdir())}


def assert_prefix(slave: Node, master: Node) -> None:
    """The slave's CommitLog is a byte-identical prefix of the master's, file by file."""
    end = slave.store.commitlog_max_offset
    assert end <= master.store.commitlog_max_offset
    start = slave.store.replica_log().min_offset
    assert commitlog_bytes(slave.store, start, end) == commitlog_bytes(master.store, start, end)


class FakeSlave:
    """A slave written from the frame layout alone: handshakes, acks only when told."""

    def __init__(self, master_address: str, broker_id: int = 9) -> None:
        host, port = master_address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=5)
        self.sock.sendall(encode_slave_handshake(SlaveHandshake(broker_id)))
        self.handshake = decode_master_handshake(self._read_handshake())
        self.frames: list[tuple[TransferHeader, bytes]] = []
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read_frames, daemon=True)

    def _read_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed")
            out += chunk
        return bytes(out)

    def _read_handshake(self) -> bytes:
        head = self._read_exactly(MASTER_HANDSHAKE.size)
        body_size, _, _ = decode_master_handshake_header(head)
        return head + self._read_exactly(body_size)

    def start_reading(self) -> None:
        self._reader.start()

    def _read_frames(self) -> None:
        try:
            while not self._stop.is_set():
                header = decode_transfer_header(self._read_exactly(TRANSFER_HEADER.size))
                self.frames.append((header, self._read_exactly(header.body_size)))
        except OSError:
            return

    def ack(self, offset: int) -> None:
        self.sock.sendall(encode_slave_ack(offset))

    def received_end(self) -> int:
        frames = list(self.frames)
        data = [h for h, _ in frames if h.body_size]
        return data[-1].offset + data[-1].body_size if data else -1

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


class FakeMaster:
    """A master written from the frame layout alone: answers one slave with the given
    handshake, then sends the given frames."""

    def __init__(self, epoch: int, entries: list[EpochEntry], max_offset: int) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.server.getsockname()[1]
        self.handshake = encode_master_handshake(max_offset, epoch, entries)
        self.frames: list[bytes] = []
        self.acks: list[int] = []
        self.slave: SlaveHandshake | None = None
        self.closed_by_slave = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def send_after_first_ack(self, header: TransferHeader, body: bytes = b"") -> None:
        self.frames.append(encode_transfer_header(header) + body)

    def _serve(self) -> None:
        conn, _ = self.server.accept()
        conn.settimeout(5)
        try:
            raw = conn.recv(SLAVE_HANDSHAKE.size, socket.MSG_WAITALL)
            _, last_file, learner, broker_id = SLAVE_HANDSHAKE.unpack(raw)
            self.slave = SlaveHandshake(broker_id, last_file == 1, learner == 1)
            conn.sendall(self.handshake)
            sent = False
            while True:
                got = conn.recv(SLAVE_ACK.size, socket.MSG_WAITALL)
                if len(got) < SLAVE_ACK.size:
                    break
                self.acks.append(SLAVE_ACK.unpack(got)[1])
                if not sent:
                    for frame in self.frames:
                        conn.sendall(frame)
                    sent = True
        except OSError:
            pass
        self.closed_by_slave.set()
        conn.close()

    def close(self) -> None:
        self.server.close()
