"""ConsumeQueues: per-(topic, queue) indexes of CommitLog positions."""
