"""The JSON bodies of the gateway's broker-to-broker calls (``POST /kafka/peer/{op}``).

Declared once here, encoded and decoded with msgspec (unknown fields are refused: both ends run
the same code); golden bytes in ``tests/kafka/test_peer_messages.py``. Names are Kafka names.

==================  ===========================  =====================================  ==================
op                  sent by -> to                body                                   answer
==================  ===========================  =====================================  ==================
``txn-participant`` coordinator -> participant   :class:`MirrorMsg`                     ``{}``
``txn-state``       participant -> coordinator   :class:`StateAsk`                      :class:`StateAnswer`
``txn-offsets``     group coord. -> txn coord.   :class:`TxnOffsetsMsg`                 :class:`ErrorAnswer`
``txn-offsets-half`` coordinator -> owner        :class:`OffsetsHalfMsg`                :class:`ErrorAnswer`
``txn-end``         coordinator -> participant   :class:`EndMsg`                        :class:`EndAnswer`
==================  ===========================  =====================================  ==================

Every call is idempotent: a participant registered twice, a half of offsets written twice for
the same transaction (the offsets of the later one win, as for a retried TxnOffsetCommit), an
end repeated (answered with the outcome it had) change nothing more.
"""

from __future__ import annotations

import msgspec

from ingest_api.kafka.txn_participants import Mirror


class MirrorMsg(msgspec.Struct, forbid_unknown_fields=True):
    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    timeout_ms: int
    coordinator: str

    @staticmethod
    def of(mirror: Mirror) -> MirrorMsg:
        return MirrorMsg(
            mirror.transactional_id,
            mirror.producer_id,
            mirror.epoch,
            mirror.sequence,
            mirror.timeout_ms,
            mirror.coordinator,
        )

    def mirror(self) -> Mirror:
        return Mirror(
            self.transactional_id,
            self.producer_id,
            self.epoch,
            self.sequence,
            self.timeout_ms,
            self.coordinator,
        )


class StateAsk(msgspec.Struct, forbid_unknown_fields=True):
    transactional_id: str
    #: The asking broker's name: it gets the mirror only if it participates.
    asker: str


class StateAnswer(msgspec.Struct, forbid_unknown_fields=True):
    #: ``None``: no open transaction in which the asker participates.
    mirror: MirrorMsg | None = None


class TxnOffsetsMsg(msgspec.Struct, forbid_unknown_fields=True):
    transactional_id: str
    producer_id: int
    epoch: int
    group: str
    #: ``[topic, partition, next offset]``.
    offsets: list[tuple[str, int, int]]


class OffsetsHalfMsg(msgspec.Struct, forbid_unknown_fields=True):
    mirror: MirrorMsg
    group: str
    offsets: list[tuple[str, int, int]]


class ErrorAnswer(msgspec.Struct, forbid_unknown_fields=True):
    #: A Kafka error code (0: done).
    error: int


class EndMsg(msgspec.Struct, forbid_unknown_fields=True):
    transactional_id: str
    transaction_id: str
    commit: bool


class EndAnswer(msgspec.Struct, forbid_unknown_fields=True):
    #: How the participant's halves ended: ``commit``, ``rollback``, ``discard`` (the resolver
    #: gave up on them), or ``None`` when it held none.
    outcome: str | None


PEER_OPS: dict[str, type[msgspec.Struct]] = {
    "txn-participant": MirrorMsg,
    "txn-state": StateAsk,
    "txn-offsets": TxnOffsetsMsg,
    "txn-offsets-half": OffsetsHalfMsg,
    "txn-end": EndMsg,
}
ANSWERS: dict[str, type[msgspec.Struct] | None] = {
    "txn-participant": None,
    "txn-state": StateAnswer,
    "txn-offsets": ErrorAnswer,
    "txn-offsets-half": ErrorAnswer,
    "txn-end": EndAnswer,
}


def peer_path(op: str) -> str:
    return f"/kafka/peer/{op}"
