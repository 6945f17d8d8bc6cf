"""memabra.router."""
