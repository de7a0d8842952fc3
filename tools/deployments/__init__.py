"""Deployments: deploy and its quote (deploy.py) over one set of checks (checks.py) and the dry run (preview.py),
replanning a node (replan.py), fleets for traffic (capacity.py) and their rehearsal on twins (fleet_rehearsal.py).
Leases and the garbage of dead owners are the run's life, in tools/runs/. It imports the words, policies/, sky/,
tools/plans/, tools/store/, tools/bench/ and tools/backends/; never the MCP layer."""
