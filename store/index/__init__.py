"""The IndexFile key index and the thread that builds it behind the put path."""
