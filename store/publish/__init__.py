"""Services above the store facade: the exactly-once publish of Spark sink batches."""
