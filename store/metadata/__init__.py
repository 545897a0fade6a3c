"""The store's small metadata files: checkpoint, offset tables, topic configs, file sizes."""
