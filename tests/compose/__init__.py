"""End-to-end check of docker-compose.yaml (``make compose-test``); not collected by pytest."""
