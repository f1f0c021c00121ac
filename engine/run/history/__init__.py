"""Reading a whole events.jsonl fast: step events as columns, and an index that makes reopening free."""
