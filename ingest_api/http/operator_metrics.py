"""Prometheus lines for the stateful operators (the delay resolver), read from the broker's
:class:`~ingest_api.http.operators.OperatorBoard` at scrape time.

Read defensively: a broker without a board (``--operators off``) or an operator that has not
reported yet simply contributes fewer lines.
"""

from __future__ import annotations

from typing import Any

from ingest_api.http.metrics import Labels
from ingest_api.http.operators import LATENESS_BUCKETS_S, OperatorBoard


def _labels(labels: Labels) -> str:
    inner = ",".join(f'{name}="{value}"' for name, value in labels)
    return "{" + inner + "}" if inner else ""


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _numeric(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def render_operators(board: OperatorBoard | None) -> str:
    """The operator families (empty when there is no board)."""
    if board is None:
        return ""
    rows = board.describe()
    job = board.job()
    families: dict[str, tuple[str, str, list[str]]] = {
        "sparkmq_operator_pending_messages": ("gauge", "Delayed messages waiting in the resolver.", []),
        "sparkmq_operator_next_due_timestamp_seconds": ("gauge", "When the next pending message is due.", []),
        "sparkmq_operator_last_published_batch": ("gauge", "Last batch with its relocations published.", []),
        "sparkmq_operator_relocated_total": ("counter", "Delayed messages delivered to their topic.", []),
    }  # fmt: skip
    for row in rows:
        labels = _labels((("operator", str(row.get("operator", "?"))),))
        values = {
            "sparkmq_operator_pending_messages": _numeric(row.get("pending")),
            "sparkmq_operator_next_due_timestamp_seconds": (
                None if _numeric(row.get("next_due_ms")) is None else float(row["next_due_ms"]) / 1000
            ),
            "sparkmq_operator_last_published_batch": _numeric(row.get("last_published_batch")),
            "sparkmq_operator_relocated_total": _numeric(row.get("relocated_total")),
        }
        for name, value in values.items():
            if value is not None:
                families[name][2].append(f"{name}{labels} {_number(value)}")
    lines: list[str] = []
    for name, (kind, help_text, samples) in families.items():
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *samples]
    lines += _lateness(board, [str(row.get("operator", "?")) for row in rows])
    name = "sparkmq_operator_job_running"
    lines += [f"# HELP {name} 1 while the supervised operator job runs (absent: external job).",
              f"# TYPE {name} gauge"]  # fmt: skip
    if job.get("mode") == "child":
        lines.append(f"{name} {1 if job.get('running') else 0}")
        restarts = "sparkmq_operator_job_restarts_total"
        lines += [f"# HELP {restarts} Restarts of the supervised operator job.", f"# TYPE {restarts} counter",
                  f"{restarts} {_number(float(job.get('restarts') or 0))}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def _lateness(board: OperatorBoard, operators: list[str]) -> list[str]:
    name = "sparkmq_operator_delivery_lateness_seconds"
    lines = [
        f"# HELP {name} Delivered store time minus due time of delayed messages.",
        f"# TYPE {name} histogram",
    ]
    for operator in operators:
        histogram = board.state(operator).lateness
        cumulative = 0
        for bound, count in zip(LATENESS_BUCKETS_S, histogram.counts, strict=False):
            cumulative += count
            labels = _labels((("operator", operator), ("le", repr(float(bound)))))
            lines.append(f"{name}_bucket{labels} {cumulative}")
        labels = _labels((("operator", operator),))
        lines.append(f"{name}_bucket{_labels((('operator', operator), ('le', '+Inf')))} {histogram.total}")
        lines.append(f"{name}_sum{labels} {_number(histogram.sum_s)}")
        lines.append(f"{name}_count{labels} {histogram.total}")
    return lines
