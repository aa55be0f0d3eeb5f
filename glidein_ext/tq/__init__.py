"""The Task Queue service of seed 001 section IV: workflows, matching, pilots, PilotMonitor."""
