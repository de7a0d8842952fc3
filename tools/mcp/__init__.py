"""The MCP server (server.py) with its session (session.py), resources and prompts (resources.py), what the tool
modules share (common.py), the middleware that counts a call carrying a run id as its client's heartbeat
(client_hooks.py) and one module per tool family (offers.py, plans.py, deploy.py, bench.py, results.py, tuning.py,
capacity.py, replan.py, runs.py, heartbeat.py, report.py), wired by registry.py. Thin wrappers: arguments ->
capability -> result. It may import every room of tools/ and policies/; no room of tools/ imports it."""
