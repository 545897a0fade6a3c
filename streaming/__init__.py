"""Spark adapters: the ``sparkmq`` data source (``format("sparkmq")``: reader and exactly-once
writer) and the stateful operators."""

from streaming.datasource import SparkMQDataSource
from streaming.options import InvalidSourceOption, SourceOptions, parse_options
from streaming.register import register
from streaming.schemas import KAFKA_DDL, KAFKA_HEADERS_DDL, MESSAGE_DDL

__all__ = [
    "KAFKA_DDL",
    "KAFKA_HEADERS_DDL",
    "MESSAGE_DDL",
    "InvalidSourceOption",
    "SourceOptions",
    "SparkMQDataSource",
    "parse_options",
    "register",
]
