"""Results and reports: a benchmark's Result from its samples (compute.py) and their comparison (compare.py), a
tuning run's record (run_records.py) and the tuning jobs around the Tuner (tuning_jobs.py), and the data a report
is drawn from (report_data.py). It imports the words, policies/, sky/ (the rendered task a report shows),
tools/store/ and tools/deployments/ (a deployment's render options); never the MCP layer."""
