"""The real-engine tier: our server in front of real engine servers (see scripts/test-engines)."""
