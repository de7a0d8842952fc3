"""Results and reports: a benchmark's Result from its samples (compute.py) and their comparison (compare.py), a
tuning run's record (run_records.py), the tuning jobs around the Tuner (tuning_jobs.py), a run's client and its
heartbeat (run_heartbeat.py: what the server does when the client stops) and the data a report is drawn from
(report_data.py). It imports the words, policies/, sky/ (the rendered task a report shows), tools/store/ and
tools/deployments/ (a deployment's render options, a run's deployments torn down); never the MCP layer."""
