"""The CommitLog: the one sequence of records every other structure is rebuilt from."""
