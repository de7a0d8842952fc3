"""Every backend behind the Backend word (tools/words/deployment.py): the local twins (local.py) here, the
SkyPilot and Kubernetes backends in sky/ (sky/backend.py, sky/kubernetes.py: sky/ has no __init__.py and imports
only the words, ARCHITECTURE.md), all three picked by infra in one place. It imports the words, policies/, sky/
(by module name, so SkyPilot loads only when used), tools/plans/ and tools/store/; never a capability above it
or the MCP layer."""
