"""The MCP server (server.py) with its session (session.py), resources and prompts (resources.py), what the tool
modules share (common.py) and one module per tool family (offers.py, plans.py, deploy.py, bench.py, results.py,
tuning.py, capacity.py, replan.py, runs.py), wired by registry.py. Thin wrappers: arguments -> capability ->
result. It may import every room of tools/ and policies/; no room of tools/ imports it."""
