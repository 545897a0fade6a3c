"""The push consumers' held deliveries: hold, forget, move to a new handle, release."""

from __future__ import annotations

from ingest_api.grpc.held import HeldHandles


def test_a_client_releases_only_what_it_still_holds() -> None:
    held = HeldHandles()
    held.hold("c1", "G", ["h1", "h2", "h3"])
    held.hold("c2", "G", ["h4"])
    held.forget(["h1", "unknown"])  # acked
    held.replace("h2", "h2b")  # a changed invisible time: the new handle, same holder
    held.replace("nobody", "x")  # not a push delivery: stays untracked
    assert held.release("c1") == [("G", "h2b"), ("G", "h3")]
    assert held.release("c1") == [] and len(held) == 1
    held.forget(["h4"])
    assert held.release("c2") == [] and len(held) == 0
