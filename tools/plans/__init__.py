"""Plans and prices: the estimate of a plan (estimate.py), the GPU offers and their dated snapshot (offers.py,
tools/data/), spend quotes and guardrails (spend.py), the plan frontier (frontier.py) and which profile files a
caller may read (profile_paths.py). Pure functions over the words and the performance model: it imports only the
words and policies/, never the database, a backend or the MCP layer."""
