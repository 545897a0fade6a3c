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

from streaming.bootstrap import check_bootstrap_address
from streaming.options import parse_options
from streaming.reader import SparkMQBatchReader, SparkMQStreamReader
from streaming.schemas import check_schema, ddl_for
from streaming.writer import batch_writer, stream_writer


class SparkMQDataSource(DataSource):
    """``format("sparkmq")``: batch and streaming reads and exactly-once writes of sparkmq topics."""

    @classmethod
    def name(cls) -> str:
        return "sparkmq"

    def schema(self) -> str:
        options = parse_options(self.options)  # fail at load() with the option's name
        if options.endpoint_from_bootstrap and options.endpoint is not None:
            check_bootstrap_address(options.endpoint, options.request_timeout_s)
        return ddl_for(options)

    def reader(self, schema: StructType) -> DataSourceReader:
        options = parse_options(self.options).validate_for_batch()
        check_schema(schema, options)
        return SparkMQBatchReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:  # noqa: N802 (Spark's method name)
        options = parse_options(self.options).validate_for_stream()
        check_schema(schema, options)
        return SparkMQStreamReader(options)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        return batch_writer(dict(self.options), schema, overwrite)  # docs/exactly_once.md

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802 (Spark's method name)
        return stream_writer(dict(self.options), schema, overwrite)
