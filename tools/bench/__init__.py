"""The benchmark client and its lock: a benchmark of a deployment (benchmark.py: the backend's benchmark with
preemption recovery), the request loop that stores every Sample (runner.py), one request and its answer
(request.py, answers.py) and the lock that keeps two benchmarks off one deployment (lock.py). It imports the
words, policies/, tools/store/, tools/plans/, tools/results/ (a Result from samples), tools/twin/ (only video.py,
to check a clip), tools/backends/ and tools/deployments/ (the backend a deployment runs on); never the MCP layer."""
