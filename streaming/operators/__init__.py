"""The stateful operators: RocketMQ's background logic as Spark ``transformWithState`` queries.

* :mod:`streaming.operators.delay`: delay levels and timer messages (the delay resolver);
* :mod:`streaming.operators.runtime`: the operator job that runs them against a broker.
"""
