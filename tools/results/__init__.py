"""Results and reports: a benchmark's Result from its samples (compute.py), their comparison (compare.py) and the
data a report is drawn from (report_data.py). A run's record, its tuning job and its client's heartbeat are the
run's life, in tools/runs/. It imports the words, policies/, sky/ (the rendered task a report shows), tools/store/ and
tools/deployments/ (a deployment's render options); never the MCP layer."""
