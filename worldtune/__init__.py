"""worldtune: find the cheapest way to serve Cosmos 3 on vLLM-Omni that meets a goal, with evidence."""

__version__ = "0.1.0"
