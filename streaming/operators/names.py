"""The resolver queries of the operator job, by name (no Spark import: ``sparkmq serve`` checks
its ``--operator-queries`` with them)."""

from __future__ import annotations

from store import DELAY_OPERATOR, RETRY_OPERATOR, TRANSACTION_OPERATOR

__all__ = ["DELAY_OPERATOR", "QUERIES", "RETRY_OPERATOR", "TRANSACTION_OPERATOR", "parse_queries"]
#: Every resolver query, in the order the job starts them. A job may run fewer
#: (``--queries``): the retry ladder's retries are delivered by the delay resolver, so retry
#: needs delay (in this job or another one).
QUERIES = (DELAY_OPERATOR, TRANSACTION_OPERATOR, RETRY_OPERATOR)


def parse_queries(text: str) -> tuple[str, ...]:
    """``"transactions,delay"`` as ``("delay", "transactions")`` (the start order); ``ValueError``
    naming an unknown or missing name."""
    names = {name.strip() for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(QUERIES))
    if unknown:
        raise ValueError(f"unknown resolver(s) {', '.join(unknown)}; expected some of {', '.join(QUERIES)}")
    if not names:
        raise ValueError(f"name at least one of {', '.join(QUERIES)}")
    return tuple(name for name in QUERIES if name in names)
