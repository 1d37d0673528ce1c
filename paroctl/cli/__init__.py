"""The click layer: parses, builds a typed request, calls the domain, prints."""
