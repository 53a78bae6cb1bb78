"""The dev environment: what builds and tears down worlds, servers and tools around the product."""
