"""Support code shared by tests."""
