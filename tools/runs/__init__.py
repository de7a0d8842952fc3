"""The run's life below the agent, in one place: how a tuning run and what it starts are owned, kept alive and ended.

- run_records.py: the run's record in the results database (opened, waiting for approval, running, ended), written
  through the MCP tools record_run and mark_run.
- tuning_jobs.py: a run started, followed and resumed for start_tuning, get_tuning and approve_tuning, on the Tuner
  the server is given (the agent's AgentTuner); a detached run's own process takes its run over.
- run_heartbeat.py: a run belongs to its client: the client's heartbeat, the grace, and the server's sweep that
  abandons a run whose client is gone (its driver stopped, its deployments torn down, its samples kept).
- stopping.py: stopping a run on purpose: SIGINT, SIGTERM and SIGHUP handled like Ctrl-C, and a stop asked from
  another thread (the run's session ending, the sweep).
- lease.py: the hours paid for, enforced: a deployment is torn down once its lease has run out.
- garbage.py: the leftovers of dead owners (`worldtune gc`): what a killed or vanished owner left, torn down.

Who owns a row (a run, or the process that deployed it) is tools/store/owners.py. Above this package: the MCP tools
that expose it (tools/mcp/runs.py, tuning.py, heartbeat.py, and client_hooks.py, the middleware that stamps a run's
heartbeat on every call and sees a session end), and the agent's side, which drives the graph and so cannot live
below the agent: agent/runner.py (tune, resume: signals and the stop control of stopping.py around the graph, the
teardown), agent/detached.py (a run in a process of its own), agent/tuner.py (the Tuner tools/runs/tuning_jobs.py
runs) and agent/checkpoints.py. docs/layout.md walks one run through them.

It imports the words, sky/ (a SkyPilot cluster gc brings down), tools/store/, tools/bench/ (a lease never runs out
while a benchmark holds its lock) and tools/deployments/ (a deployment torn down through the backend that made it);
never the MCP layer or the agent.
"""
