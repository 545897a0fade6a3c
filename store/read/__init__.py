"""The read path: ConsumeQueue units to CommitLog bytes to messages and Arrow batches."""
