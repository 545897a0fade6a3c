"""``sparkmq``: run the broker and talk to it.

``sparkmq serve`` is the main job (:mod:`sparkmq.cli.serve`). The other commands are HTTP
clients of a running broker or cluster through the route-aware :mod:`sparkmq.client`
(``--endpoint``/``--url``, ``--token``; environment ``SPARKMQ_URL`` / ``SPARKMQ_TOKEN``) with
``--output table|json`` and exit codes for scripts (:mod:`sparkmq.cli.common`), plus offline
tools on a store directory (:mod:`sparkmq.cli.store_tools`) and a local cluster for trying
one (:mod:`sparkmq.cli.local_cluster`). See docs/cli.md.
"""

from __future__ import annotations

from sparkmq.cli import (
    auth,
    cluster,
    consume,
    groups,
    ladder,
    local_cluster,
    messages,
    openapi,
    status,
    store_tools,
    topics,
)  # fmt: skip
from sparkmq.cli.root import app
from sparkmq.cli.serve import SERVE_COMPANIONS, FlushMode, ServeOptions, serve

__all__ = [
    "SERVE_COMPANIONS", "FlushMode", "ServeOptions", "app", "auth", "cluster", "consume", "groups", "ladder",
    "local_cluster", "main", "messages", "openapi", "serve", "status", "store_tools", "topics",
]  # fmt: skip


def main() -> None:
    app()
