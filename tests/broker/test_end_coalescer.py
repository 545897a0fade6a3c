"""Transaction ends coalesced into one append (:class:`broker.transactions.EndCoalescer`), on a
real replicated store: a group whose append was stored but not acknowledged is answered as
refused, and ending again never stores a transaction's final messages twice."""

from __future__ import annotations

from pathlib import Path

from broker.transactions import EndCoalescer
from store import FlushSlaveTimeout
from store.publish.transactions import EndRequest, TransactionService
from store.write.transactions import TxOutcome
from tests.store.test_transactions import open_replicated, put_halves
from tests.support.replication_faults import AckTimesOut


def test_ends_refused_after_their_append_are_never_stored_twice(tmp_path: Path) -> None:
    with open_replicated(tmp_path / "s") as ms:
        replica = ms.replica_log()
        hooks = AckTimesOut()  # a master whose slaves confirm every write, until armed
        replica.set_hooks(hooks)
        ms.create_topic("orders", 4)
        service = TransactionService.open(ms)
        ends = [EndRequest(put_halves(ms, service, ["orders"]), TxOutcome.COMMIT, "pg") for _ in range(2)]
        coalescer = EndCoalescer(service)
        hooks.armed = 1_000  # the slave does not confirm in time: FLUSH_SLAVE_TIMEOUT after the append
        assert [type(o) for o in coalescer._end_each(ends)] == [FlushSlaveTimeout] * 2
        hooks.armed = 0  # the slave caught up: the producers end again
        again = coalescer._end_each(ends)
        assert [getattr(o, "outcome", o) for o in again] == [TxOutcome.COMMIT] * 2
        replica.advance_confirm(ms.commitlog_max_offset)
        finals = ms.get_messages("orders", 1, 0, 10).messages
        assert sorted(m.body for m in finals) == [b"m0", b"m0"]  # one final message per transaction
        assert len({m.uniq_key for m in finals}) == 2
        ms.abandon()
