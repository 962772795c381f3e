"""Performance benchmarks that print figures (never run as tests)."""
