"""The Task Queue service of Hasham 2011 section IV: workflows, matching, pilots, PilotMonitor."""
