"""Stand-ins for the outside services the tests talk to."""
