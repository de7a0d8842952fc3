"""The capabilities: plain functions over the words, in rooms (docs/layout.md has the tree).

tools/words/ (the words), tools/store/ (the results database), tools/plans/ (plans and prices), tools/twin/ (the
twin engine), tools/bench/ (the benchmark client), tools/results/ (results and reports), tools/deployments/
(deployments and their lifecycle), tools/backends/ (every backend behind the Backend word) and tools/mcp/ (the MCP
server over all of them). No module sits here: this package only names the rooms; what each room may import is in
its own docstring and enforced by tests/unit/test_layering.py."""
