"""Spark adapters: the ``sparkmq`` Structured Streaming source (``format("sparkmq")``)."""

from streaming.options import InvalidSourceOption, SourceOptions, parse_options
from streaming.register import register
from streaming.source import MESSAGE_DDL, SparkMQDataSource

__all__ = [
    "MESSAGE_DDL",
    "InvalidSourceOption",
    "SourceOptions",
    "SparkMQDataSource",
    "parse_options",
    "register",
]
