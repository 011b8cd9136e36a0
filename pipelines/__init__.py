"""Example Spark pipelines over Logbus topics (``make pipeline`` runs one end to end)."""
