"""memabra.storage."""
