"""The procurement REST API (``/api/v1/procurement/...``)."""
