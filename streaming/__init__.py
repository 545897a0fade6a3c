"""Spark adapters: the ``sparkmq`` Structured Streaming source (``format("sparkmq")``)."""

from streaming.datasource import SparkMQDataSource
from streaming.options import InvalidSourceOption, SourceOptions, parse_options
from streaming.reader import MESSAGE_DDL
from streaming.register import register

__all__ = [
    "MESSAGE_DDL",
    "InvalidSourceOption",
    "SourceOptions",
    "SparkMQDataSource",
    "parse_options",
    "register",
]
