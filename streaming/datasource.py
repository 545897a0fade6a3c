"""``format("sparkmq")``: the one Spark ``DataSource``, reading (:mod:`streaming.reader`) and
writing exactly once (:mod:`streaming.writer`).

It only parses options and hands each direction to its module, so the reader and the writer
never import each other.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from streaming.options import parse_options
from streaming.reader import MESSAGE_DDL, SparkMQBatchReader, SparkMQStreamReader, check_schema
from streaming.writer import batch_writer, stream_writer


class SparkMQDataSource(DataSource):
    """``format("sparkmq")``: batch and streaming reads and exactly-once writes of sparkmq topics."""

    @classmethod
    def name(cls) -> str:
        return "sparkmq"

    def schema(self) -> str:
        parse_options(self.options)  # fail at load() with the option's name
        return MESSAGE_DDL

    def reader(self, schema: StructType) -> DataSourceReader:
        check_schema(schema)
        return SparkMQBatchReader(parse_options(self.options).validate_for_batch())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's method name)
        check_schema(schema)
        return SparkMQStreamReader(parse_options(self.options).validate_for_stream())

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return batch_writer(dict(self.options), schema, overwrite)  # docs/exactly_once.md

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 (Spark's method name)
        return stream_writer(dict(self.options), schema, overwrite)
