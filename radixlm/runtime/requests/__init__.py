"""What a request carries in and out: ids, limits, validation, JSON bounds, responses, server info."""
