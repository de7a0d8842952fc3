"""Deployments and their lifecycle: deploy and its quote (deploy.py) over one set of checks (checks.py) and the
dry run (preview.py), replanning a node (replan.py), leases (lease.py), garbage collection of what a dead owner
left (garbage.py), fleets for traffic (capacity.py) and their rehearsal on twins (fleet_rehearsal.py). It
imports the words, policies/, sky/, tools/plans/, tools/store/, tools/bench/ and tools/backends/; never the MCP
layer."""
