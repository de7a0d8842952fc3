"""The results database: the Store (database.py) made of its record families (schema.py, runs.py,
deployments.py, benchmarks.py), where the file lives (db_path.py, which the agent may read) and who owns each row
with its heartbeat (owners.py). It imports only the words, the standard library and SQLite; every room above it
reaches the database through it, and the agent only through the MCP tools."""
