"""One router per resource: topics, messages (produce and query), queues (pull), groups, ops."""
