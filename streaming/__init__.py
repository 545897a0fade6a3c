"""Spark adapters: the ``sparkmq`` data source (``format("sparkmq")``: reader and exactly-once
writer) and the stateful operators."""

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
