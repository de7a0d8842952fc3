"""The twin engine: an HTTP server that speaks vLLM-Omni's video API and behaves like Cosmos 3 on a plan
(server.py), made of what a replica does with a request (engine.py), the form and its validation (form.py), the
routes and answers (api.py), its clock (clock.py) and the tiny real MP4s it answers with (video.py, which the
benchmark client also uses to check clips). It imports the words, policies/, tools/plans/ and tools/store/; it
runs as its own process and never imports a backend, the benchmark client or the MCP layer."""
