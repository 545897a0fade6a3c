"""sparkmq: a RocketMQ-compatible message queue native to Spark Structured Streaming."""

__version__ = "0.1.0"
