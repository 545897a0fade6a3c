"""format("sparkmq") without register(), the schema contract and bad options at load()."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from store.format.arrow_schema import MESSAGE_SCHEMA
from streaming.datasource import SparkMQDataSource
from streaming.reader import MESSAGE_DDL, MESSAGE_STRUCT

pytestmark = pytest.mark.spark


def test_ddl_struct_and_arrow_schema_agree(spark: Any) -> None:
    parsed = StructType.fromDDL(MESSAGE_DDL)
    assert parsed == MESSAGE_STRUCT
    assert to_arrow_schema(parsed, timezone="UTC").equals(MESSAGE_SCHEMA)
    assert SparkMQDataSource.name() == "sparkmq"


def test_short_name_works_without_register(spark: Any, tmp_path: Path) -> None:
    # A brand-new session of the same JVM has no explicit registrations of its own.
    fresh = spark.newSession()
    df = fresh.read.format("sparkmq").option("path", str(tmp_path)).option("topic", "nothing_here").load()
    assert df.schema == MESSAGE_STRUCT
    stream = fresh.readStream.format("sparkmq").option("path", str(tmp_path)).option("topic", "t").load()
    assert stream.isStreaming


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("maxMessagesPerTrigger", "-3", "maxMessagesPerTrigger"),
        ("startingOffsets", "{not json", "startingOffsets"),
        ("tags", "||", "tags"),
        ("unknownThing", "1", "unknownthing"),
    ],
)
def test_bad_options_fail_at_load(spark: Any, tmp_path: Path, option: str, value: str, named: str) -> None:
    reader = spark.readStream.format("sparkmq").option("path", str(tmp_path)).option("topic", "t")
    with pytest.raises(Exception, match=f"option '{named}'"):
        reader.option(option, value).load()
    with pytest.raises(Exception, match="option 'path'"):
        spark.read.format("sparkmq").option("path", str(tmp_path / "missing")).option("topic", "t").load()


def test_a_user_schema_must_be_the_fixed_one(spark: Any, tmp_path: Path) -> None:
    reader = spark.read.format("sparkmq").option("path", str(tmp_path)).option("topic", "t")
    with pytest.raises(Exception, match="fixed schema"):
        reader.schema("body BINARY").load().collect()
