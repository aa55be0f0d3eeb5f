"""The PilotMonitor and the PilotManager: how many pilots each site needs, and their submission."""
