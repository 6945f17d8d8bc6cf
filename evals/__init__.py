"""memabra.evals."""
