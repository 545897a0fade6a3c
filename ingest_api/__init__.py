"""The broker's doors, as siblings: ``http`` (the FastAPI API), ``kafka`` (the Kafka wire-protocol
gateway, optional extra ``sparkmq[kafka]``) and ``console`` (the web console). Each uses the
store only through its public API (``store``, ``store.publish``)."""
