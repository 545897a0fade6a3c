"""Network partitions in a replica group: real broker processes, real ZooKeeper, and a TCP proxy
(:class:`~tests.support.proxy.TcpProxy`) that black-holes one link, as a real partition does.

* **A master cut from ZooKeeper but not from its clients.** The master's ``--cluster`` goes
  through the proxy; clients keep producing to it (and to its slave) throughout. The old master
  must stop acknowledging before the new one starts, and nothing it acknowledged is lost.
* **A slave cut from its master's HA port.** The master advertises the proxy
  (``--ha-advertise``), so the slave replicates through it. With ``--replication sync`` the
  master acknowledges nothing the slave has not got until the slave leaves the in-sync set; then
  it goes on alone (``--min-insync 1``), and the slave catches up and rejoins once healed.

Each test ends with the checker (:mod:`tests.support.acks`): every acknowledged message read
back from the surviving master exactly once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.support.acks import AckRecorder, Attempt, ack_windows, check_exactly_once, read_bodies
from tests.support.cluster import ProcessBroker, ProcessCluster
from tests.support.proxy import TcpProxy
from tests.support.replica_pair import SYNC_ARGS, ReplicaPair
from tests.support.waiting import wait_until

pytestmark = pytest.mark.cluster

TOPIC, QUEUES = "t", 2
#: A sync produce waits this long for the in-sync set before FLUSH_SLAVE_TIMEOUT (ms).
REPLICATION_TIMEOUT_MS = 1000


def _pair(
    cluster: ProcessCluster,
    *,
    master_zk_url: str | None = None,
    master_args: Sequence[str] = (),
    ha_proxy: TcpProxy | None = None,
) -> ReplicaPair:
    """``b1-a`` (leads; its own ``--cluster`` and extra flags), then ``b1-b``, in sync. With
    ``ha_proxy``, the proxy forwards to ``b1-a``'s HA port before ``b1-b`` starts."""
    args = (*SYNC_ARGS, "--replication-timeout-ms", str(REPLICATION_TIMEOUT_MS))
    first = cluster.add("b1", ha=True, args=(*args, *master_args), member="b1-a", zk_url=master_zk_url)
    pair = ReplicaPair(cluster, "b1", first, first)
    pair.wait_led_by(first)
    if ha_proxy is not None:
        assert first.ha_port is not None
        ha_proxy.target = ("127.0.0.1", first.ha_port)
    pair.slave = cluster.add("b1", ha=True, args=args, member="b1-b")
    wait_until(lambda: _in_sync(pair, first) == 2, 60, "b1-b in sync")
    with first.http() as http:
        assert http.put(f"/topics/{TOPIC}", json={"queues": QUEUES}).status_code == 201
    return pair


def _in_sync(pair: ReplicaPair, via: ProcessBroker) -> int:
    return len(pair.group_seen_by(via).get("in_sync") or ())


def _codes(refused: Sequence[Attempt]) -> set[str]:
    """The error codes of refusals (``transport`` for a request that got no answer)."""
    return {a.detail.split('"error":"', 1)[-1].split('"', 1)[0] if a.status else "transport" for a in refused}


def _assert_exactly_once(recorder_history: Sequence[Attempt], master: ProcessBroker) -> int:
    verdict = check_exactly_once(recorder_history, read_bodies(master.url, TOPIC, QUEUES))
    assert verdict.valid, verdict
    return verdict.acknowledged


def test_a_master_cut_from_zookeeper_stops_acknowledging_before_its_successor_starts(
    tmp_path: Path,
) -> None:
    with (
        ProcessCluster.started(tmp_path, []) as cluster,
        TcpProxy(("127.0.0.1", cluster.zookeeper.port)) as zk,
    ):
        pair = _pair(cluster, master_zk_url=f"zk://{zk.address}{cluster.chroot}")
        old, new = pair.master, pair.slave
        recorder = AckRecorder([old.url, new.url], TOPIC, QUEUES).start()
        try:
            wait_until(lambda: len(recorder.acked(by=old.port)) >= 50, 30, "acknowledgements before the cut")
            cut_s = time.monotonic()
            zk.cut()  # a black hole: the old master's session expires, nothing is closed
            pair.wait_led_by(new, 30)
            wait_until(lambda: len(recorder.acked(by=new.port)) >= 50, 30, "the new master's acks")
            # the old master still answers its clients, and refuses
            refused_by_old = [a for a in recorder.refused(since_s=cut_s) if a.via == old.url]
            assert refused_by_old and _codes(refused_by_old) <= {"replica_fenced", "not_master"}, _codes(
                refused_by_old
            )
            zk.heal()  # it finds its session expired, a newer epoch, and follows the new master
            followed = {new.url: "master", old.url: "slave"}
            wait_until(
                lambda: pair.roles_seen_by(new) == followed and _in_sync(pair, new) == 2,
                60,
                "the old master to follow the new one and catch up",
            )
            healed = len(recorder.acked())
            wait_until(lambda: len(recorder.acked()) >= healed + 20, 30, "acknowledgements after the heal")
        finally:
            history = recorder.stop()
        assert "re-registered after its ZooKeeper session expired" in old.log_tail(100_000)
        windows = ack_windows(history)
        assert set(windows) == {old.port, new.port}, windows
        gap_s = windows[new.port].first_sent_s - windows[old.port].last_answered_s
        print(f"old master: {windows[old.port]}; new master: {windows[new.port]}; gap {gap_s:.3f} s")
        # fencing: every acknowledgement of the old master was answered before the first
        # request the new master acknowledged was even sent
        assert gap_s > 0, (windows, gap_s)
        assert _assert_exactly_once(history, new) == sum(w.count for w in windows.values())


def test_a_slave_cut_from_its_master_is_waited_for_then_left_behind_then_catches_up(tmp_path: Path) -> None:
    with ProcessCluster.started(tmp_path, []) as cluster, TcpProxy() as link:
        pair = _pair(cluster, master_args=("--ha-advertise", link.address), ha_proxy=link)
        master, slave = pair.master, pair.slave
        recorder = AckRecorder([master.url, slave.url], TOPIC, QUEUES).start()
        try:
            wait_until(lambda: len(recorder.acked()) >= 50, 30, "acknowledgements before the cut")
            link.cut()  # a black hole: the replication connection stays open, nothing crosses
            cut_s = time.monotonic()
            # sync: nothing the slave has not got is acknowledged; each produce times out ...
            wait_until(
                lambda: "flush_slave_timeout" in _codes(recorder.refused(since_s=cut_s)),
                30,
                "FLUSH_SLAVE_TIMEOUT refusals",
            )
            # ... until the slave has not caught up for max_time_slave_not_catchup_ms (15 s):
            # the in-sync set shrinks to the master, which acknowledges alone (--min-insync 1)
            wait_until(lambda: _in_sync(pair, master) == 1, 40, "the slave to leave the in-sync set")
            shrunk_s = time.monotonic()
            wait_until(lambda: len(recorder.acked(since_s=shrunk_s)) >= 20, 30, "acknowledgements alone")
            left_after_s = shrunk_s - cut_s
            link.heal()
            wait_until(lambda: _in_sync(pair, master) == 2, 60, "the slave to catch up and rejoin")
            healed_s = time.monotonic()
            wait_until(lambda: len(recorder.acked(since_s=healed_s)) >= 20, 30, "acknowledgements in sync")
        finally:
            history = recorder.stop()
        during = [a for a in history if cut_s <= a.sent_s < shrunk_s]
        acked_after_cut = [a for a in during if a.status == 201] + recorder.acked(since_s=shrunk_s)
        first_alone_s = min(a.answered_s for a in acked_after_cut)
        print(
            f"cut: {len(during)} produces before the slave was seen out of the in-sync set "
            f"({left_after_s:.1f} s), refusals {_codes(recorder.refused(since_s=cut_s))}, "
            f"first acknowledgement after the cut at +{first_alone_s - cut_s:.2f} s"
        )
        # nothing sent after the cut was acknowledged until the slave had not caught up for
        # max_time_slave_not_catchup_ms (15 s, less what it had not acked when cut) and left
        assert first_alone_s - cut_s > 14, first_alone_s - cut_s
        # the slave now holds everything: the master dies, the slave serves every acknowledged
        # message exactly once
        master.kill()
        pair.wait_led_by(slave, 30)
        assert _assert_exactly_once(history, slave) > 0
