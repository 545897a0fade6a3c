"""The put path: producer messages to records, queue offsets, append, dispatch, dedupe."""
